-- Acknowledges delivered one-shot fires whose claim answered their record (claim.lua):
-- the fire path's lean acknowledgement, which writes no timer's key. Each fire leaves the
-- in-flight set: its record reads fired from then on (rec_view, place.lua; or was
-- written fired by a late claim) until the checkpoint deletes it after the retention, in
-- the order of the fired queue, one entry per call (checkpoint.lua). Its timer leaves
-- the deferred set (its state was never written) or enters the dirty set scored REC_TOMB
-- (it owes a tombstone, record.lua). A fire no longer in flight (an acknowledgement sent
-- again after a lost reply) is bookkept again only while its timer still reads fired at
-- its version: it may have been created again since.
-- KEYS: 1 epoch, 2 in-flight set, 3 dirty set, 4 deferred (by first offset),
--       5 acknowledgement counter, 6 fired queue
-- ARGV: 1 expected epoch, 2 the partition's key prefix (record.lua), 3 the fired queue's
--       entry of these fires (when the last was produced, then their members, one per
--       line), then groups of fires whose states were all written or all not: '1' when
--       written (else ''), the number of fires n, then per fire its in-flight member and
--       its timer id
-- Returns the number of members removed from the in-flight set, or -1 when fenced.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
redis.call('INCR', KEYS[5])
rec_init(ARGV[2], 0)
-- The fires: members, timer ids and whether their states were written.
local members, ids, written = {}, {}, {}
local g = 4
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
-- Whether fire `m` of timer `id`, no longer in flight, still leaves its timer reading
-- fired at the member's version.
assert(REC_V == 1 and REC_ST == 2)
local function still_fired(id, m)
  local a = rec_raw(id)
  return a ~= nil and a[REC_ST] == REC_STATE_CODE.fired
    and a[REC_V] == tonumber(string.match(m, '^(%d+):'))
end
-- All were in flight (the common case): the entry given goes to the queue. Else those
-- that still read fired are bookkept (again) and queued (the sweep deletes a record
-- only while it is unwritten, once).
local all = removed == #members
local dirty, undefer, queued = {}, {}, {string.match(ARGV[3], '^[^\n]*')}
for j = 1, #members do
  if all or still_fired(ids[j], members[j]) then
    if not all then
      queued[#queued + 1] = members[j]
    end
    if written[j] then
      dirty[#dirty + 1] = REC_TOMB
      dirty[#dirty + 1] = ids[j]
    else
      undefer[#undefer + 1] = ids[j]
    end
  end
end
if all then
  redis.call('RPUSH', KEYS[6], ARGV[3])
elseif #queued > 1 then
  redis.call('RPUSH', KEYS[6], table.concat(queued, '\n'))
end
for i = 1, #dirty, 1000 do
  redis.call('ZADD', KEYS[3], 'NX', unpack(dirty, i, math.min(i + 999, #dirty)))
end
for i = 1, #undefer, 1000 do
  redis.call('ZREM', KEYS[4], unpack(undefer, i, math.min(i + 999, #undefer)))
end
return removed
