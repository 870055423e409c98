-- Takes ownership of a partition: moves its epoch to a value no owner held before.
-- The new epoch is the old one plus one, or the current time in ms if that is larger,
-- so an epoch handed out before Redis lost its data (restart without persistence,
-- failover) is never handed out again: an owner from before the loss stays fenced.
-- KEYS: 1 epoch
-- ARGV: 1 now ms
-- Returns the new epoch.
local old = tonumber(redis.call('GET', KEYS[1]) or '0')
local new = math.max(old + 1, tonumber(ARGV[1]))
redis.call('SET', KEYS[1], string.format('%d', new))
return new
