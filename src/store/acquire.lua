-- Takes ownership of a partition: moves its epoch to a value no owner held before.
-- The new epoch is the old one plus one, or the current time in ms if that is larger,
-- so an epoch handed out before Redis lost its data (restart without persistence,
-- failover) is never handed out again: an owner from before the loss stays fenced.
-- States the last owner's intake was writing and never confirmed (written.lua) go to the
-- dirty set: the new owner's checkpoint writes them.
-- KEYS: 1 epoch, 2 timers whose state the intake writes (zset by first offset), 3 dirty set
-- ARGV: 1 now ms
-- Returns the new epoch.
local old = tonumber(redis.call('GET', KEYS[1]) or '0')
local new = math.max(old + 1, tonumber(ARGV[1]))
redis.call('SET', KEYS[1], string.format('%d', new))
local writing = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #writing, 2 do
  redis.call('ZADD', KEYS[3], 'LT', writing[i + 1], writing[i])
end
redis.call('DEL', KEYS[2])
return new
