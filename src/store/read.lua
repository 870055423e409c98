-- Reads one timer for a look-up: its fields as field/value pairs (as HGETALL would
-- answer them), wherever it is (record.lua, prepended); {} when unknown.
-- KEYS: 1 the record buckets' meta (routes the call to the partition's slot)
-- ARGV: 1 the partition's key prefix, 2 timer id
rec_init(ARGV[1], 0)
local t = rec_get(ARGV[2])
local out = {}
if t then
  rec_emit(t, out)
end
return out
