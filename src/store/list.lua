-- Lists the timers of a partition for the admin API, one page at a time, with filters:
-- the bucket's records first (place.lua; HSCAN), then the timers with keys of their
-- own (SCAN, on the node that holds the partition). Like SCAN, a timer present and not
-- moved for the whole listing is listed; one that moves between the bucket and its own
-- key meanwhile (promotion, an update) may be listed twice or missed.
-- KEYS: 1 the bucket's meta (routes the call to the partition's slot)
-- ARGV: 1 the partition's key prefix, 2 cursor ('' to start: `bC` or `bC:K` an HSCAN
--       cursor of the bucket, `kC` a SCAN cursor), 3 application ('' any), 4 state
--       ('' any), 5 id prefix ('' any), 6 '1': only timers with dead-lettered fires,
--       7 most timers answered, 8 most records looked at
-- Returns {next cursor ('' when done), then per timer: id, state, due ('' none), kind,
--          version, application, dead letters, last dead letter's due, its reason}.
rec_init(ARGV[1], 0)
local app, state, prefix, dead = ARGV[3], ARGV[4], ARGV[5], ARGV[6] == '1'
local want, budget = tonumber(ARGV[7]), tonumber(ARGV[8])
local out = {''}
local seen, found = 0, 0

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
  -- `bC:K`: HSCAN cursor C, of whose step the first K fields were looked at already (a
  -- compact hash answers all its fields in one step).
  local b, skip = string.match(cursor, '^b(%d+):?(%d*)$')
  skip = tonumber(skip) or 0
  repeat
    local r = redis.call('HSCAN', REC.bucket, b, 'COUNT', 200)
    local all = r[2]
    local i = 2 * skip + 1
    while i <= #all and found < want and seen < budget do
      consider(all[i], cmsgpack.unpack(all[i + 1]))
      i = i + 2
    end
    if i <= #all then
      out[1] = 'b' .. b .. ':' .. (i - 1) / 2
      return out
    end
    b, skip = r[1], 0
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
      consider(string.sub(key, skip + 1), cmsgpack.unpack(s))
    end
  end
until c == '0' or found >= want or seen >= budget or steps >= 50
if c ~= '0' then
  out[1] = 'k' .. c
end
return out
