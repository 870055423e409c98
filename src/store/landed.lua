-- Acknowledges delivered one-shot fires whose claim answered their record (claim.lua):
-- the fire path's lean acknowledgement, which writes no timer's key. Each fire leaves the
-- in-flight set: its record reads fired from then on (rec_view, place.lua; released at
-- its claim when that was late) until the checkpoint deletes it after the retention, in
-- the order of the fired queue, one entry per call (checkpoint.lua). Its timer leaves
-- the deferred set (its state was never written) or owes a tombstone: the call's written
-- ones make one entry of the owed list (owed.lua). A fire no longer in flight (an
-- acknowledgement sent again after a lost reply) is bookkept again only while its timer
-- still reads fired at its version: it may have been created again since.
-- KEYS: 1 epoch, 2 in-flight set, 3 owed tombstones (list), 4 deferred (by first
--       offset), 5 acknowledgement counter, 6 fired queue
-- ARGV: 1 expected epoch, 2 the partition's key prefix (record.lua), 3 the fired queue's
--       entry of these fires (when the last was produced, then their members, one per
--       line), then groups of fires whose states were all written or all not: '1' when
--       written (else ''), the number of fires n, their n in-flight members, then their
--       n timer ids in the same order (blocks Redis takes as they are: no table per fire)
-- Returns the number of members removed from the in-flight set, or -1 when fenced.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local count = redis.call('INCR', KEYS[5])
local time = string.match(ARGV[3], '^[^\n]*')
rec_init(ARGV[2], 0)
-- The runs: {first member's index, n, written}; the members of a run are ARGV[f] to
-- ARGV[f + n - 1], their timer ids the n values after them.
local runs, total = {}, 0
local g = 4
while g <= #ARGV do
  local n = tonumber(ARGV[g + 1])
  runs[#runs + 1] = {g + 2, n, ARGV[g] == '1'}
  total = total + n
  g = g + 2 + 2 * n
end
local removed = 0
for _, r in ipairs(runs) do
  for i = r[1], r[1] + r[2] - 1, 1000 do
    removed = removed + redis.call('ZREM', KEYS[2], unpack(ARGV, i, math.min(i + 999, r[1] + r[2] - 1)))
  end
end
-- Whether fire `m` of timer `id`, no longer in flight, still leaves its timer reading
-- fired at the member's version.
assert(REC_V == 1 and REC_ST == 2)
local function still_fired(id, m)
  local a = rec_raw(id)
  return a ~= nil and a[REC_ST] == REC_STATE_CODE.fired
    and a[REC_V] == tonumber(string.match(m, '^(%d+):'))
end
-- Bookkeeps timer ids args[first..last] (their states written or not).
local function bookkeep(args, first, last, w)
  if w then
    owed_push(KEYS[3], count, time, args, first, last)
    return
  end
  for i = first, last, 1000 do
    redis.call('ZREM', KEYS[4], unpack(args, i, math.min(i + 999, last)))
  end
end
-- All were in flight (the common case): the entry given goes to the queue, each run's
-- ids are bookkept as they came. Else those that still read fired are bookkept (again)
-- and queued (the sweep deletes a record only while it is unwritten, once).
if removed == total then
  redis.call('RPUSH', KEYS[6], ARGV[3])
  for _, r in ipairs(runs) do
    bookkeep(ARGV, r[1] + r[2], r[1] + 2 * r[2] - 1, r[3])
  end
  return removed
end
local queued = {time}
for _, r in ipairs(runs) do
  local ids = {}
  for i = r[1], r[1] + r[2] - 1 do
    local id = ARGV[i + r[2]]
    if still_fired(id, ARGV[i]) then
      queued[#queued + 1] = ARGV[i]
      ids[#ids + 1] = id
    end
  end
  bookkeep(ids, 1, #ids, r[3])
end
if #queued > 1 then
  redis.call('RPUSH', KEYS[6], table.concat(queued, '\n'))
end
return removed
