-- Lists the timers of a partition for the admin API, one page at a time, with filters:
-- the bucket's records first (place.lua; HSCAN), then the timers with keys of their
-- own (SCAN, on the node that holds the partition). Like SCAN, a timer present and not
-- moved for the whole listing is listed; one that moves between the bucket and its own
-- key meanwhile (promotion, an update) may be listed twice or missed.
-- KEYS: 1 the bucket's meta (routes the call to the partition's slot)
-- ARGV: 1 the partition's key prefix, 2 cursor ('' to start: `bC` or `b0:X` an HSCAN
--       cursor of the bucket, `kC` a SCAN cursor), 3 application ('' any), 4 state
--       ('' any), 5 id prefix ('' any), 6 '1': only timers with dead-lettered fires,
--       7 most timers answered (a page ends between scan steps of a large bucket, so
--       it may hold a few more), 8 most records looked at
-- Returns {next cursor ('' when done), then per timer: id, state, due ('' none), kind,
--          version, application, dead letters, last dead letter's due, its reason}.
rec_init(ARGV[1], 0)
local app, state, prefix, dead = ARGV[3], ARGV[4], ARGV[5], ARGV[6] == '1'
local want, budget = tonumber(ARGV[7]), tonumber(ARGV[8])
local out = {''}
local seen, found = 0, 0

-- `s` as hex digits, and back (a field in a cursor).
local function hex(s)
  return (string.gsub(s, '.', function(ch) return string.format('%02x', string.byte(ch)) end))
end
local function unhex(x)
  return (string.gsub(x, '%x%x', function(h) return string.char(tonumber(h, 16)) end))
end

local function consider(id, a)
  seen = seen + 1
  if prefix ~= '' and string.sub(id, 1, #prefix) ~= prefix then
    return
  end
  local st = REC_STATES[a[REC_ST]] or a[REC_ST]
  if (state ~= '' and st ~= state) or (dead and not a[REC_DL]) then
    return
  end
  local ap = rec_app_raw(a) or ''
  if app ~= '' and ap ~= app then
    return
  end
  found = found + 1
  local n = #out
  out[n + 1], out[n + 2] = id, st
  out[n + 3] = a[REC_DUE] and string.format('%d', a[REC_DUE]) or ''
  out[n + 4], out[n + 5], out[n + 6] = a[REC_K] or 'o', string.format('%d', a[REC_V]), ap
  out[n + 7], out[n + 8], out[n + 9] = a[REC_DL] or '', a[REC_DLR] or '', a[REC_DLX] or ''
end

local cursor = ARGV[2] == '' and 'b0' or ARGV[2]
if string.sub(cursor, 1, 1) == 'b' then
  -- `bC`: the HSCAN cursor C. A scan step covers more of the hash as fields go, so a page
  -- ends between steps, except in a step that answered every field (a compact hash):
  -- there a page may stop after field X (`b0:X`, hex) and the next reads the whole hash
  -- again and takes its fields in name order after X, so fields removed meanwhile shift
  -- none past the page.
  local b, after = string.match(cursor, '^b(%d+):?(%x*)$')
  after = after ~= '' and unhex(after) or nil
  repeat
    local r = redis.call('HSCAN', REC.bucket, b, 'COUNT', math.max(want - found, 10))
    local whole = b == '0' and r[1] == '0'
    local all, ids, recs = r[2], {}, {}
    for i = 1, #all, 2 do
      if not (whole and after) or all[i] > after then
        ids[#ids + 1] = all[i]
        recs[all[i]] = all[i + 1]
      end
    end
    table.sort(ids)
    for _, id in ipairs(ids) do
      if whole and (found >= want or seen >= budget) then
        out[1] = 'b0:' .. hex(after)
        return out
      end
      consider(id, cmsgpack.unpack(recs[id]))
      after = id
    end
    b, after = r[1], nil
  until b == '0' or found >= want or seen >= budget
  if b ~= '0' then
    out[1] = 'b' .. b
    return out
  end
  cursor = 'k0'
end
-- Own keys: `BASE t:ID` (the base's glob characters escaped).
local pattern = string.gsub(REC.base, '([%*%?%[%]\\])', '\\%1') .. 't:*'
local skip = #REC.base + 2
local c = string.sub(cursor, 2)
local steps = 0
repeat
  local r = redis.call('SCAN', c, 'MATCH', pattern, 'COUNT', 200)
  c, steps = r[1], steps + 1
  for _, key in ipairs(r[2]) do
    local s = redis.call('GET', key)
    if s then
      local id = string.sub(key, skip + 1)
      consider(id, rec_view(id, cmsgpack.unpack(s), s))
    end
  end
until c == '0' or found >= want or seen >= budget or steps >= 50
if c ~= '0' then
  out[1] = 'k' .. c
end
return out
