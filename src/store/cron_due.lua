-- Lists the cron timers of a partition whose materialised window needs extending.
-- KEYS: 1 epoch, 2 cron index (score: when to materialise next)
-- ARGV: 1 expected epoch, 2 now ms, 3 max timers, 4 timer key prefix
-- Returns {id, version, cron spec, materialised through ms, ...}, or {'fenced'}.
-- Timers that are gone or no longer scheduled leave the index.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced'}
end
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[2], 'LIMIT', 0, ARGV[3])) do
  local t = redis.call('HMGET', ARGV[4] .. id, 'v', 'st', 'sc', 'hz')
  if t[2] == 'scheduled' and t[3] and t[4] then
    out[#out + 1] = id
    out[#out + 1] = t[1]
    out[#out + 1] = t[3]
    out[#out + 1] = t[4]
  else
    redis.call('ZREM', KEYS[2], id)
  end
end
return out
