-- Takes ownership of a partition: moves its epoch to a value no owner held before.
-- The new epoch is the old one plus one, or the current time in ms if that is larger,
-- so an epoch handed out before Redis lost its data (restart without persistence,
-- failover) is never handed out again: an owner from before the loss stays fenced.
-- States the last owner's intake was writing and never confirmed (written.lua), and the
-- timers its checkpoints put aside waiting for those (blocked), go to the dirty set: the
-- new owner's checkpoint writes them.
-- KEYS: 1 epoch, 2 the states the intake writes (hash, writing.lua, prepended), 3 dirty
--       set, 4 blocked (checkpoint.lua)
-- ARGV: 1 now ms
-- Returns the new epoch.
local old = tonumber(redis.call('GET', KEYS[1]) or '0')
local new = math.max(old + 1, tonumber(ARGV[1]))
redis.call('SET', KEYS[1], string.format('%d', new))
for id, first in pairs(writing_set(KEYS[2])) do
  redis.call('ZADD', KEYS[3], 'LT', first, id)
end
local blocked = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
for i = 1, #blocked, 2 do
  redis.call('ZADD', KEYS[3], 'LT', blocked[i + 1], blocked[i])
end
redis.call('DEL', KEYS[2], KEYS[4])
return new
