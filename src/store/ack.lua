-- Acknowledges fires the broker accepted: removes them from the in-flight set and marks
-- their one-shot timers fired (kept for look-up until the retention expires).
-- KEYS: 1 epoch, 2 in-flight set
-- ARGV: 1 expected epoch, 2 timer key prefix, 3 retention ms, 4.. members
-- Returns the number of members removed, or -1 when fenced.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local n = 0
for i = 4, #ARGV do
  local member = ARGV[i]
  n = n + redis.call('ZREM', KEYS[2], member)
  local c1 = string.find(member, ':', 1, true)
  local c2 = string.find(member, ':', c1 + 1, true)
  local tkey = ARGV[2] .. string.sub(member, c2 + 1)
  local t = redis.call('HMGET', tkey, 'v', 'st')
  if t[1] == string.sub(member, 1, c1 - 1) and t[2] == 'scheduled' then
    redis.call('HSET', tkey, 'st', 'fired')
    redis.call('PEXPIRE', tkey, ARGV[3])
  end
end
return n
