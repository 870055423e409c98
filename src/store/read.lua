-- Reads one timer for a look-up: its fields as field/value pairs (as HGETALL would
-- answer them), wherever it is (record.lua, prepended); {} when unknown. The history
-- (`h`) and the last fire (`lx`) are answered as JSON arrays.
-- KEYS: 1 the record buckets' meta (routes the call to the partition's slot)
-- ARGV: 1 the partition's key prefix, 2 timer id
rec_init(ARGV[1], 0)
local t = rec_get(ARGV[2])
local out = {}
if t then
  if t.h then
    t.h = cjson.encode(cmsgpack.unpack(t.h))
  end
  if t.lx then
    t.lx = cjson.encode({cmsgpack.unpack(t.lx)})
  end
  rec_emit(t, out)
end
return out
