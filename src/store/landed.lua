-- Acknowledges delivered one-shot fires that the claim took as fired without writing
-- their records (claim.lua answered their record; rec_view, place.lua): the fire path's
-- lean acknowledgement, which writes no timer's key. Each fire moves from the in-flight
-- set to the fired hash, with when it was produced (its record reads fired with that
-- last fire until the checkpoint deletes it after the retention: the fired queue holds
-- one entry per call, checkpoint.lua), and
-- its timer leaves the deferred set (its state was never written) or enters the dirty
-- set scored REC_TOMB (it owes a tombstone, record.lua). A fire no longer in flight (an
-- acknowledgement sent again after a lost reply) is bookkept again only while its timer
-- still reads fired at its version: it may have been created again since.
-- KEYS: 1 epoch, 2 in-flight set, 3 dirty set, 4 deferred (by first offset),
--       5 acknowledgement counter, 6 fired hash, 7 fired queue
-- ARGV: 1 expected epoch, 2 the partition's key prefix (record.lua), then groups of fires
--       whose states were all written or all not: '1' when written (else ''), the number
--       of fires n, then per fire its in-flight member, its timer id and when it was
--       produced (ms)
-- Returns the number of members removed from the in-flight set, or -1 when fenced.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
redis.call('INCR', KEYS[5])
rec_init(ARGV[2], 0)
-- The fires: members, timer ids, when produced and whether their states were written.
local members, ids, at, written = {}, {}, {}, {}
local g = 3
while g <= #ARGV do
  local w, n = ARGV[g] == '1', tonumber(ARGV[g + 1])
  for i = g + 2, g + 3 * n, 3 do
    local j = #members + 1
    members[j], ids[j], at[j], written[j] = ARGV[i], ARGV[i + 1], ARGV[i + 2], w
  end
  g = g + 2 + 3 * n
end
-- Which were in flight: all, when the in-flight set held them all (the common case);
-- else those whose records still stand scheduled at the member's version and due, not
-- yet in the fired hash (nothing else takes such a member out of flight unwritten).
local removed = 0
for i = 1, #members, 1000 do
  removed = removed + redis.call('ZREM', KEYS[2], unpack(members, i, math.min(i + 999, #members)))
end
assert(REC_V == 1 and REC_ST == 2 and REC_K == 4 and REC_DUE == 5)
local function was_flying(id, m)
  if redis.call('HEXISTS', KEYS[6], m) == 1 then
    return false
  end
  local a = rec_raw(id, nil, true)
  local v, due = string.match(m, '^(%d+):(%d+):')
  return a ~= nil and a[REC_ST] == 1 and not a[REC_K] and a[REC_V] == tonumber(v)
    and a[REC_DUE] == tonumber(due)
end
-- The fired hash's entries (member, when) and the queue's entry of this call: when, then
-- its members (packed), which the checkpoint takes in order once the retention passed.
local flying, fired, queued = {}, {}, {0}
local all = removed == #members
for j = 1, #members do
  if all or was_flying(ids[j], members[j]) then
    flying[j] = true
    fired[#fired + 1] = members[j]
    fired[#fired + 1] = at[j]
    queued[#queued + 1] = members[j]
    queued[1] = math.max(queued[1], tonumber(at[j]))
  end
end
for i = 1, #fired, 2000 do
  redis.call('HSET', KEYS[6], unpack(fired, i, math.min(i + 1999, #fired)))
end
if #queued > 1 then
  redis.call('RPUSH', KEYS[7], cmsgpack.pack(queued))
end
-- Whether fire `m` of timer `id`, no longer in flight, still leaves its timer reading
-- fired at the member's version (rec_view).
local function still_fired(id, m)
  local a = rec_raw(id)
  return a ~= nil and a[REC_ST] == REC_STATE_CODE.fired
    and a[REC_V] == tonumber(string.match(m, '^(%d+):'))
end
local dirty, undefer = {}, {}
for j = 1, #members do
  if flying[j] or still_fired(ids[j], members[j]) then
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
