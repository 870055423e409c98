-- Records that every command of a partition up to an offset was handled (also those
-- rejected before reaching Redis), so the applied offset can be compared with the
-- committed one after Redis lost data.
-- KEYS: 1 epoch, 2 applied offset
-- ARGV: 1 expected epoch, 2 offset, 3 the applied offset Redis must hold at least (what
--       this owner applied before; -1 unknown)
-- Returns 1, or -1 when fenced or when Redis is behind ARGV[3] (it lost writes).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
if tonumber(redis.call('GET', KEYS[2]) or '-1') < tonumber(ARGV[3]) then
  return -1
end
if tonumber(ARGV[2]) > tonumber(redis.call('GET', KEYS[2]) or '-1') then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
