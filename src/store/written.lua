-- Confirms the states the intake wrote for one apply call (apply.lua answered them;
-- writing.lua, prepended): delivered, the call's entry leaves the writing hash; not
-- delivered, its timers go back to the dirty set (scored by the call's first offset), so
-- the next checkpoint writes their state (read again) instead. Either way a timer a
-- checkpoint put aside meanwhile (it changed again: blocked) is dirty again.
-- KEYS: 1 epoch, 2 the states the intake writes (hash, writing.lua), 3 dirty set,
--       4 blocked (checkpoint.lua)
-- ARGV: 1 expected epoch, 2 'delivered' or 'failed', 3 the entry (its call's first offset)
-- Returns 1, or -1 when fenced (a new owner took the partition and its entries with it).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
-- (Delivered with none blocked, the common case: the entry goes unread, whole.)
local failed, blocked = ARGV[2] == 'failed', redis.call('ZCARD', KEYS[4]) > 0
local entry = (failed or blocked) and redis.call('HGET', KEYS[2], ARGV[3])
if entry then
  local ids = writing_ids(entry)
  if failed then
    for _, id in ipairs(ids) do
      redis.call('ZADD', KEYS[3], 'LT', ARGV[3], id)
    end
  end
  for _, id in ipairs(blocked and ids or {}) do
    local first = redis.call('ZSCORE', KEYS[4], id)
    if first then
      redis.call('ZADD', KEYS[3], 'LT', first, id)
      redis.call('ZREM', KEYS[4], id)
    end
  end
end
redis.call('HDEL', KEYS[2], ARGV[3])
return 1
