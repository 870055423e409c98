-- Reads one timer for a look-up: its fields as field/value pairs (as HGETALL would
-- answer them), wherever it is (record.lua, prepended); {} when unknown. The history
-- (`h`, then the last fire `lx`) and the last fire are answered as JSON arrays.
-- KEYS: 1 the bucket's meta (routes the call to the partition's slot)
-- ARGV: 1 the partition's key prefix, 2 timer id
rec_init(ARGV[1], 0)
local t = rec_get(ARGV[2])
local out = {}
if t then
  local h = rec_hist_list(t)
  if t.lx then
    local last = cmsgpack.unpack(t.lx)
    h[#h + 1] = last
    t.lx = cjson.encode({last})
  end
  if #h > 0 then
    t.h = cjson.encode(h)
  end
  rec_emit(t, out)
end
return out
