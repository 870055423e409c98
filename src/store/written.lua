-- Confirms the states the intake wrote for timers (apply.lua answered them): delivered,
-- they leave the set of timers being written; not delivered, they go back to the dirty
-- set, so the next checkpoint writes their state (read again) instead. Either way a
-- timer a checkpoint put aside meanwhile (it changed again: blocked) is dirty again.
-- KEYS: 1 epoch, 2 timers whose state the intake writes (zset by first offset), 3 dirty set,
--       4 blocked (checkpoint.lua)
-- ARGV: 1 expected epoch, 2 'delivered' or 'failed', then the timer ids
-- Returns 1, or -1 when fenced (a new owner took the partition and its set with it).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
if ARGV[2] == 'failed' then
  for i = 3, #ARGV do
    local first = redis.call('ZSCORE', KEYS[2], ARGV[i])
    if first then
      redis.call('ZADD', KEYS[3], 'LT', first, ARGV[i])
    end
  end
end
-- (Usually none is blocked: one call instead of a look-up per id.)
if redis.call('ZCARD', KEYS[4]) > 0 then
  for i = 3, #ARGV do
    local first = redis.call('ZSCORE', KEYS[4], ARGV[i])
    if first then
      redis.call('ZADD', KEYS[3], 'LT', first, ARGV[i])
      redis.call('ZREM', KEYS[4], ARGV[i])
    end
  end
end
for i = 3, #ARGV, 1000 do
  redis.call('ZREM', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return 1
