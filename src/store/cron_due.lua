-- Lists the cron timers of a partition whose materialised window needs extending.
-- KEYS: 1 epoch, 2 cron index (score: when to materialise next)
-- ARGV: 1 expected epoch, 2 now ms, 3 max timers, 4 the partition's key prefix (record.lua)
-- Returns {id, version, cron spec, materialised through ms, ...}, or {'fenced'}.
-- Timers that are gone or no longer scheduled leave the index.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced'}
end
rec_init(ARGV[4], 0)
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[2], 'LIMIT', 0, ARGV[3])) do
  local t = rec_get(id) or {}
  if t.st == 'scheduled' and t.sc and t.hz then
    out[#out + 1] = id
    out[#out + 1] = t.v
    out[#out + 1] = t.sc
    out[#out + 1] = t.hz
  else
    redis.call('ZREM', KEYS[2], id)
  end
end
return out
