-- Acknowledges delivered one-shot fires whose claim recorded them as done (claim.lua
-- answered their record; rec_claimed, place.lua): the fire path's lean acknowledgement,
-- which touches no timer's key. Each fire leaves the in-flight set, and its timer the
-- deferred set (its state was never written) or enters the dirty set scored REC_TOMB
-- (it owes a tombstone, record.lua). A fire no longer in flight (an acknowledgement sent
-- again after a lost reply) is bookkept again only while its timer is still done at its
-- version: it may have been created again since.
-- KEYS: 1 epoch, 2 in-flight set, 3 dirty set, 4 deferred (by first offset),
--       5 acknowledgement counter
-- ARGV: 1 expected epoch, 2 the partition's key prefix (record.lua), then groups of fires
--       whose states were all written or all not: '1' when written (else ''), the number
--       of fires n, then per fire its in-flight member and its timer id
-- Returns the number of members removed, or -1 when fenced.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
redis.call('INCR', KEYS[5])
-- The fires: members, timer ids and whether their states were written.
local members, ids, written = {}, {}, {}
local g = 3
while g <= #ARGV do
  local w, n = ARGV[g] == '1', tonumber(ARGV[g + 1])
  for i = g + 2, g + 2 * n, 2 do
    members[#members + 1], ids[#ids + 1], written[#written + 1] = ARGV[i], ARGV[i + 1], w
  end
  g = g + 2 + 2 * n
end
local removed = 0
for i = 1, #members, 1000 do
  removed = removed + redis.call('ZREM', KEYS[2], unpack(members, i, math.min(i + 999, #members)))
end
-- Whether the fire of in-flight member `m` of timer `id` left its timer done (fired) at
-- the member's version (read only when some fire of the call was no longer in flight).
assert(REC_V == 1 and REC_ST == 2)
local function still_done(id, m)
  local s = redis.call('GET', ARGV[2] .. 't:' .. id)
  local head = s and string.byte(s, 1)
  if not head or head < 0x92 or head > 0x9f then
    return false
  end
  local _, v, st = cmsgpack.unpack_limit(s, 2, 1)
  return st == REC_STATE_CODE.fired and v == tonumber(string.match(m, '^(%d+):'))
end
local all = removed == #members
local dirty, undefer = {}, {}
for j = 1, #members do
  if all or still_done(ids[j], members[j]) then
    if written[j] then
      dirty[#dirty + 1] = REC_TOMB
      dirty[#dirty + 1] = ids[j]
    else
      undefer[#undefer + 1] = ids[j]
    end
  end
end
for i = 1, #dirty, 1000 do
  redis.call('ZADD', KEYS[3], 'NX', unpack(dirty, i, math.min(i + 999, #dirty)))
end
for i = 1, #undefer, 1000 do
  redis.call('ZREM', KEYS[4], unpack(undefer, i, math.min(i + 999, #undefer)))
end
return removed
