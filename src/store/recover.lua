-- Lists the in-flight fires of a partition (claimed, not yet acknowledged) so the new
-- owner re-drives them; drops those whose timer was paused, cancelled or changed meanwhile.
-- KEYS: 1 epoch, 2 in-flight set
-- ARGV: 1 expected epoch, 2 timer key prefix
-- Returns {member, definition, ...}, or {'fenced'}.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced'}
end
local out = {}
for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local c1 = string.find(member, ':', 1, true)
  local c2 = string.find(member, ':', c1 + 1, true)
  local t = redis.call('HMGET', ARGV[2] .. string.sub(member, c2 + 1), 'v', 'st', 'd')
  -- 'completed': the last fire of a cron timer was acknowledged before earlier ones.
  if t[1] == string.sub(member, 1, c1 - 1) and (t[2] == 'scheduled' or t[2] == 'completed') then
    out[#out + 1] = member
    out[#out + 1] = t[3]
  else
    redis.call('ZREM', KEYS[2], member)
  end
end
return out
