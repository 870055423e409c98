-- Claims the fires of a partition that are due up to a bound: moves them from their
-- minute slices into the in-flight set, in one atomic step, so a crash between claim and
-- delivery never loses them (whoever owns the partition next re-drives the in-flight set).
-- KEYS: 1 epoch, 2 slice index, 3 in-flight set
-- ARGV: 1 expected epoch, 2 claim fires due <= this ms, 3 max fires, 4 slice key prefix,
--       5 timer key prefix
-- Returns {next due ms or '', member, definition, member, definition, ...}, or {'fenced'}.
-- Members of timers that were cancelled or replaced are dropped, not claimed.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced'}
end
local upto = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local out = {''}
local n = 0
local minutes = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', math.floor(upto / 60000))
for _, m in ipairs(minutes) do
  local skey = ARGV[4] .. m
  local items = redis.call('ZRANGEBYSCORE', skey, '-inf', ARGV[2], 'LIMIT', 0, limit - n)
  for _, member in ipairs(items) do
    redis.call('ZREM', skey, member)
    n = n + 1
    local c1 = string.find(member, ':', 1, true)
    local c2 = string.find(member, ':', c1 + 1, true)
    local ver = string.sub(member, 1, c1 - 1)
    local due = string.sub(member, c1 + 1, c2 - 1)
    local t = redis.call('HMGET', ARGV[5] .. string.sub(member, c2 + 1), 'v', 'st', 'd')
    if t[1] == ver and t[2] == 'scheduled' then
      redis.call('ZADD', KEYS[3], due, member)
      out[#out + 1] = member
      out[#out + 1] = t[3]
    end
  end
  if redis.call('EXISTS', skey) == 0 then
    redis.call('ZREM', KEYS[2], m)
  end
  if n >= limit then
    break
  end
end
-- The next due time: the first member of the first non-empty slice.
for _ = 1, 16 do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #first == 0 then
    break
  end
  local head = redis.call('ZRANGE', ARGV[4] .. first[1], 0, 0, 'WITHSCORES')
  if #head > 0 then
    out[1] = head[2]
    break
  end
  redis.call('ZREM', KEYS[2], first[1])
end
return out
