-- Acknowledges delivered one-shot fires that the claim took as fired without writing
-- their records (claim.lua answered their record; rec_view, place.lua): the fire path's
-- lean acknowledgement, which writes no timer's key for a fire produced within LATE ms
-- of its due. Each fire leaves the in-flight set (its record reads fired from then on,
-- released at its due, rec_view, until the checkpoint deletes it after the retention:
-- the fired queue holds one entry per call, checkpoint.lua); a later one's record is
-- written fired, its last fire released when it was produced (what a look-up shows
-- should not be off by more than LATE), and
-- its timer leaves the deferred set (its state was never written) or enters the dirty
-- set scored REC_TOMB (it owes a tombstone, record.lua). A fire no longer in flight (an
-- acknowledgement sent again after a lost reply) is bookkept again only while its timer
-- still reads fired at its version: it may have been created again since.
-- KEYS: 1 epoch, 2 in-flight set, 3 dirty set, 4 deferred (by first offset),
--       5 acknowledgement counter, 6 fired queue
-- ARGV: 1 expected epoch, 2 the partition's key prefix (record.lua), 3 retention ms,
--       then groups of fires
--       whose states were all written or all not: '1' when written (else ''), the number
--       of fires n, then per fire its in-flight member, its timer id and when it was
--       produced (ms)
-- Returns the number of members removed from the in-flight set, or -1 when fenced.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
redis.call('INCR', KEYS[5])
rec_init(ARGV[2], ARGV[3])
local LATE = 1000
-- The fires: members, timer ids, when produced and whether their states were written.
local members, ids, at, written = {}, {}, {}, {}
local g = 4
while g <= #ARGV do
  local w, n = ARGV[g] == '1', tonumber(ARGV[g + 1])
  for i = g + 2, g + 3 * n, 3 do
    local j = #members + 1
    members[j], ids[j], at[j], written[j] = ARGV[i], ARGV[i + 1], ARGV[i + 2], w
  end
  g = g + 2 + 3 * n
end
-- Which were in flight: all, when the in-flight set held them all (the common case).
-- Else (an acknowledgement sent again) each one whose timer still reads fired at the
-- member's version is bookkept again (it may have been created again since) and queued
-- again (the sweep deletes only a record still unwritten, once).
local removed = 0
for i = 1, #members, 1000 do
  removed = removed + redis.call('ZREM', KEYS[2], unpack(members, i, math.min(i + 999, #members)))
end
local all = removed == #members
assert(REC_V == 1 and REC_ST == 2)
local function still_fired(id, m)
  local a = rec_raw(id)
  return a ~= nil and a[REC_ST] == REC_STATE_CODE.fired
    and a[REC_V] == tonumber(string.match(m, '^(%d+):'))
end
-- Writes the record of late fire `m` of timer `id`, produced at `t` ms (`due` ms):
-- fired, as the claim left it (its counts moved at the claim). False when the record is
-- not the one the claim took (a fire sent again: bookkept as it reads).
assert(REC_K == 4 and REC_DUE == 5)
local function write_late(id, m, due, t)
  local a, where = rec_raw(id, nil, true)
  if not (a and a[REC_ST] == 1 and not a[REC_K] and a[REC_DUE] == due
    and a[REC_V] == tonumber(string.match(m, '^(%d+):'))) then
    return false
  end
  a[REC_ST] = REC_STATE_CODE.fired
  rec_done_raw(id, nil, a, where, 'fired', rec_claimed_fire(due, t))
  return true
end
-- The fired queue's entry of this call: when its last fire landed, then its members
-- (packed), which the checkpoint takes in order once the retention has passed.
local fired, queued = {}, {0}
for j = 1, #members do
  local t, due = tonumber(at[j]), tonumber(string.match(members[j], '^[^:]*:([^:]*):'))
  if (all or still_fired(ids[j], members[j])) then
    fired[j] = true
    if not (t > due + LATE and write_late(ids[j], members[j], due, t)) then
      queued[#queued + 1] = members[j]
      queued[1] = math.max(queued[1], t)
    end
  end
end
if #queued > 1 then
  redis.call('RPUSH', KEYS[6], cmsgpack.pack(queued))
end
local dirty, undefer = {}, {}
for j = 1, #members do
  if fired[j] then
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
rec_flush()
return removed
