-- Confirms a checkpoint page: its state records were acknowledged by the broker, so the
-- pending set and the owed entries taken are emptied; with a sequence, the page completed
-- checkpoint `sequence`, whose number Redis keeps (a Redis restored from older data shows
-- an older one).
-- KEYS: 1 epoch, 2 pending set, 3 checkpoint sequence, 4 owed entries taken, 5 owed
--       tombstones, 6 revived (owed.lua: those no owed entry needs are forgotten)
-- ARGV: 1 expected epoch, 2 sequence ('' for a page that completed no checkpoint), 3 the
--       oldest checkpoint sequence Redis may hold
-- Returns 1, or -1 when fenced (also when Redis holds an older checkpoint).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
if tonumber(redis.call('GET', KEYS[3]) or '0') < tonumber(ARGV[3]) then
  return -1
end
redis.call('DEL', KEYS[2], KEYS[4])
owed_trim(KEYS[5], KEYS[6])
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[3], ARGV[2])
end
return 1
