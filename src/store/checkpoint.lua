-- Takes one page of a partition's checkpoint: moves up to a number of changed timers
-- from the dirty set (scored by the first command that changed them since their state
-- was last written) to the pending set, which keeps them until their state records are
-- confirmed in the state topic (a page lost with its producer is taken again), and
-- answers their fields. Also answers the command offset the state topic reflects and
-- the fire watermark: every fire due at or before it was acknowledged, except the
-- in-flight members listed.
-- KEYS: 1 epoch, 2 dirty set, 3 pending set, 4 slice index, 5 in-flight set,
--       6 applied offset, 7 deferred timers by first offset, 8 acknowledgement counter,
--       9 checkpoint sequence, 10 the states the intake writes (hash, writing.lua,
--       prepended), 11 dirty timers waiting for such a write (by the first command
--       offset that changed them), 12 parked index (claim.lua), 13 owed tombstones,
--       14 owed entries taken, 15 revived (owed.lua)
-- ARGV: 1 expected epoch, 2 the partition's key prefix (record.lua), 3 slice key prefix, 4 now ms, 5 most
--       timers per page, 6 most in-flight members listed, 7 defer ms, 8 grace ms, 9 the
--       oldest checkpoint sequence Redis may hold (older: Redis came back from older
--       data, whose states must never reach the state topic: 'fenced'), 10 most bytes of
--       timer states per page (the page ends once its answers reach them), 11 retention
--       ms (the unwritten records of fires landed longer ago are deleted, sweep.lua)
-- Returns {'fenced'}, or {left, acked through ms, reflected offset, acknowledgement
-- counter, applied offset (when the watermark was read), {owed entries answered whole:
-- tombstones of the ids after their first line}, m, m in-flight members, then per
-- timer: id, n, n field/value pairs}; each timer is answered once, in the entries or
-- after them; left is the number of timers still dirty and owed entries (a
-- checkpoint is complete only with a page that leaves none, and only such a page lists
-- the in-flight members: m = 0 on the others, whose watermark nobody records); n = -1
-- is a tombstone (the timer can never fire again).
-- Invariants:
-- * a one-shot timer never written and due within `defer` ms is deferred, not written:
--   most fire before the next checkpoint and then owe nothing; while deferred, the
--   reflected offset stays below the first command that changed it (a rebuild replays
--   it); one still scheduled `grace` ms after its due and the fire watermark passed it
--   (claimed, never acknowledged) is written;
-- * a timer that ended before any of its states was written owes no tombstone (field p
--   marks a timer whose state was written);
-- * an owed entry's timer (owed.lua) whose tombstone holds is answered a tombstone
--   unread; so is a dirty member scored REC_TOMB (record.lua: a written one-shot timer
--   ack.lua made done, or an owed one the intake's write held; a command lowers its
--   score to the command's offset; a create over it that the intake writes too, apply.lua);
-- * a dirty member scored 'inf' changed by a fire, a completion or a rebuild, no command
--   since (a command lowers the score to its offset); those scripts add 'inf' only for a
--   timer whose state was written or a cron (whose state a fire changes), so one found
--   done (but fired) by its record's first bytes is answered a tombstone unread (at worst
--   for a cron never written: a tombstone of a key the state topic lacks, which changes
--   nothing);
-- * a one-shot fire under way (read fired once claimed, rec_view, still in flight) is read as
--   its timer before the claim: no tombstone precedes its acknowledgement;
-- * the watermark is at most now, below the first pending slice member, below the first
--   parked member, and below the first in-flight member not listed;
-- * a dirty timer whose state the intake is writing (KEYS[10]) is not answered (its
--   record must not follow a later state of it): it moves to KEYS[11] until that write
--   is confirmed (written.lua), so the next pages get past it and a checkpoint still
--   completes; the reflected offset stays below the first command the intake has not
--   confirmed written and below every timer in KEYS[11].
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced'}
end
if tonumber(redis.call('GET', KEYS[9]) or '0') < tonumber(ARGV[9]) then
  return {'fenced'}
end
local now, defer, grace = tonumber(ARGV[4]), tonumber(ARGV[7]), tonumber(ARGV[8])

-- The fire watermark: every fire due at or before `through` was acknowledged, except the
-- first `listed` in-flight members, which the last page of a checkpoint lists.
local through = now
local minutes = redis.call('ZRANGE', KEYS[4], 0, 15)
for i, m in ipairs(minutes) do
  local head = redis.call('ZRANGE', ARGV[3] .. m, 0, 0, 'WITHSCORES')
  if #head > 0 then
    through = math.min(through, tonumber(head[2]) - 1)
    break
  end
  if i == 16 then
    through = math.min(through, (tonumber(m) + 1) * 60000 - 1)
  end
end
-- Parked fires are pending fires (claim.lua); an index entry is never later than its
-- set's first member.
local parked = redis.call('ZRANGE', KEYS[12], 0, 0, 'WITHSCORES')
if #parked > 0 then
  through = math.min(through, tonumber(parked[2]) - 1)
end
-- Only the first member not listed is read with its score (each score read costs a
-- %.17g printf; at a steady rate a claim ahead keeps about a thousand in flight).
local listed = tonumber(ARGV[6])
local beyond = redis.call('ZRANGE', KEYS[5], listed, listed, 'WITHSCORES')
if #beyond > 0 then
  through = math.min(through, tonumber(beyond[2]) - 1)
end

rec_init(ARGV[2], 0)
-- Raw record `a` of timer `id` as a checkpoint reads it: a one-shot fire under way
-- (read fired while in flight, rec_view, not yet acknowledged) reads as its timer
-- before the claim, scheduled, so no state says done before the fire is acknowledged.
local function before_claim(id, a)
  if a and a[REC_ST] == REC_STATE_CODE.fired and not a[REC_K]
    and rec_under_way(KEYS[5], id, a[REC_V], a[REC_DUE]) then
    a[REC_ST], a[REC_LX] = REC_STATE_CODE.scheduled, nil
  end
  return a
end
-- The deferred timers that hold the reflected offset back (the first by offset), up to
-- the first one rightly deferred: one still scheduled past due and grace is stuck
-- (claimed, never acknowledged: written now); one no longer scheduled owes nothing to
-- its deferral (fired, or changed since: its change went to the dirty set or the
-- intake's writes). The grace runs from the watermark, not from now: while a burst
-- drains, the fires waiting behind it are not stuck, and writing them would cost the
-- fire path a state record and a tombstone each.
-- Up to a page of them, read a few at a time (each score read is a printf; the first is
-- mostly one rightly deferred), each one gone through leaving the set.
local stuck = through - grace
local left, chunk, done = tonumber(ARGV[5]), 16, false
while left > 0 and not done do
  local lowest = redis.call('ZRANGE', KEYS[7], 0, math.min(chunk, left) - 1, 'WITHSCORES')
  done = #lowest == 0
  for i = 1, #lowest, 2 do
    local id = lowest[i]
    local a = before_claim(id, rec_raw(id))
    local live = a and a[REC_ST] == 1 and not a[REC_K]
    if live and a[REC_DUE] > stuck then
      done = true
      break
    end
    left = left - 1
    redis.call('ZREM', KEYS[7], id)
    if live then
      redis.call('ZADD', KEYS[2], 'LT', lowest[i + 1], id)
    end
  end
  chunk = chunk * 4
end

-- The state (its name) and field p of packed record `s` (an own key's value, or false)
-- when it is a done timer's, else nil: only the first eight items are unpacked (v, st,
-- rq, k, due, a, d, p; record.lua's positions), not the history or the last fire.
assert(REC_ST == 2 and REC_P == 8)
local function done_head(s)
  local head = s and string.byte(s, 1)
  if not head or head < 0x98 or head > 0x9f then
    return nil
  end
  local _, _, code, _, _, _, _, _, p = cmsgpack.unpack_limit(s, 8, 1)
  local st = REC_STATES[code]
  if st and REC_TERMINAL[st] then
    return st, p
  end
  return nil
end

-- Whether timer `id`'s own key holds a done record other than a fired one (perhaps a fire
-- under way: read whole), read from its first bytes (the array's header, v, st:
-- record.lua's first positions), not the whole record. (The numbers go to redis.call as
-- strings: Lua formats a number with a printf.)
assert(REC_V == 1 and REC_ST == 2)
local function done_at_head(id)
  local h = redis.call('GETRANGE', REC.base .. 't:' .. id, '0', '12')
  -- A fixed array (up to 15 fields) or an array 16 (a cron's); v at 1-based `o`.
  local b = string.byte(h, 1)
  local o = (b and b >= 0x90 and b <= 0x9f and 2) or (b == 0xdc and 4)
  local v = o and string.byte(h, o)
  if not v then
    return false
  end
  -- v: a positive fixint, else a uint of 1, 2, 4 or 8 bytes after its marker.
  local w = rec_uint_width(v)
  local code = w and string.byte(h, o + w)
  return code ~= nil and code ~= REC_STATE_CODE.fired and REC_TERMINAL[REC_STATES[code]] == true
end

-- Each timer is read once: the read decides whether it is deferred and is what the page
-- answers. `emit` collects the answer's timer part.
local emit, emitted = {}, {}

-- Answers timer `id` (fields `t`, nil when gone): its fields, a tombstone, or nothing
-- (it ended before any state of it was written).
-- `emit_bytes`: the bytes answered so far, which bound the page (ARGV[10]).
local emit_bytes = 0
local function answer(id, t)
  if emitted[id] then
    return
  end
  emitted[id] = true
  local from = #emit + 1
  rec_state_answer(id, t, emit)
  for i = from, #emit do
    if type(emit[i]) == 'string' then
      emit_bytes = emit_bytes + #emit[i]
    end
  end
end

-- Writes `ids` to `key` with command `cmd` (SADD, ZREM, or ZADD LT of (score, id) pairs),
-- a thousand arguments per call.
local function in_chunks(cmd, key, ids)
  local lt = cmd == 'ZADD' and 'LT' or nil
  for j = 1, #ids, 1000 do
    if lt then
      redis.call(cmd, key, lt, unpack(ids, j, math.min(j + 999, #ids)))
    else
      redis.call(cmd, key, unpack(ids, j, math.min(j + 999, #ids)))
    end
  end
end

-- Taken into the pending set, deferred ((first offset, id) pairs), no longer deferred,
-- and held ((first offset, id) pairs for KEYS[11]: the intake is writing their state):
-- each written in one call at the end, not one per timer.
local taken, by_first, undeferred, held = {}, {}, {}, {}
local writing = writing_set(KEYS[10])
-- Takes dirty timer `id` (first changed at offset `first`) by reading its record. A done
-- timer (most pages after fires): a tombstone if any state of it was written, else
-- nothing; answered without building its fields, its record read only up to p
-- (done_head). A one-shot timer never written and due soon is deferred.
local function take_read(id, first)
  local own = redis.call('GET', REC.base .. 't:' .. id) or false
  local st, p = done_head(own)
  local t = false
  if not st or st == 'fired' then
    local a, where = rec_raw(id, own)
    a = before_claim(id, a)
    st, p = a and (REC_STATES[a[REC_ST]] or a[REC_ST]), a and a[REC_P]
    t = not (st and REC_TERMINAL[st]) and rec_from_raw(id, a, where)
  end
  local f = t or {st = st, p = p}
  local due = tonumber(f.due or '0')
  if f.st == 'scheduled' and f.k == 'o' and not f.p and due <= now + defer and due > stuck then
    local n = #by_first
    by_first[n + 1], by_first[n + 2] = first, id
  else
    undeferred[#undeferred + 1] = id
    if f.p or not REC_TERMINAL[f.st] then
      taken[#taken + 1] = id
      answer(id, t or nil)
    end
  end
end

-- A page whose records were not confirmed is answered again first: its timers, then its
-- owed entries, timer by timer (a timer may be in both).
local leftover = redis.call('SMEMBERS', KEYS[3])
for _, id in ipairs(leftover) do
  local a, where = rec_raw(id)
  answer(id, rec_from_raw(id, before_claim(id, a), where))
end
local retaken = redis.call('LRANGE', KEYS[14], 0, -1)
-- The page's owed entries answered whole (as they are: the ids after their first line).
local tombs = {}
-- Nothing answered twice, nothing held, no timer revived: owed entries younger than
-- half the retention are answered whole.
local whole = #leftover == 0 and #retaken == 0 and next(writing) == nil
  and redis.call('EXISTS', KEYS[15]) == 0
local young = now - tonumber(ARGV[11]) / 2
-- Answers owed entry `e` (owed.lua): whole, or its tombstones that still hold timer by
-- timer (one whose state the intake is writing is held; in an entry older than half the
-- retention, whose records may be gone and created again, each is read).
local function owed_answer(e)
  local _, time = owed_head(e)
  if whole and time > young then
    tombs[#tombs + 1] = e
    emit_bytes = emit_bytes + #e
    return
  end
  for _, id in ipairs(owed_holding(KEYS[15], e)) do
    if writing[id] then
      held[#held + 1] = REC_TOMB
      held[#held + 1] = id
    elseif time > young then
      answer(id, nil)
    else
      take_read(id, 'inf')
    end
  end
end
for _, e in ipairs(retaken) do
  owed_answer(e)
end

-- Moves a page of the dirty set to the pending set, deferring timers due soon; owed
-- entries are taken between the dirty set's two bands: those scored below REC_TOMB
-- (command offsets), then the others (REC_TOMB: a tombstone the intake held, 'inf':
-- fires); the members taken are always a prefix of the set.
local want = tonumber(ARGV[5]) - #leftover
if want > 0 then
  -- Bytes bound the page too: it ends once its answers reach ARGV[10] (the member that
  -- reaches them included), so large records make shorter calls, not larger ones.
  local max_bytes, taken_members = tonumber(ARGV[10]) or math.huge, 0
  -- Takes (id, score) rows in order until the bytes bound the page; false once they did.
  local function take(rows)
    for i = 1, #rows, 2 do
      if emit_bytes >= max_bytes then
        return false
      end
      taken_members = taken_members + 1
      local id, first = rows[i], rows[i + 1]
      if writing[id] then
        held[#held + 1] = first
        held[#held + 1] = id
      elseif first == REC_TOMB or (first == 'inf' and done_at_head(id)) then
        -- A one-shot timer written, then fired, no command since (REC_TOMB); or one a
        -- fire, a completion or a rebuild changed, no command since, found done: its
        -- tombstone, unread.
        undeferred[#undeferred + 1] = id
        taken[#taken + 1] = id
        answer(id, nil)
      else
        take_read(id, first)
      end
    end
    return true
  end
  local rows = redis.call('ZRANGE', KEYS[2], '-inf', '(' .. REC_TOMB, 'BYSCORE', 'LIMIT', 0,
    want, 'WITHSCORES')
  local more = take(rows)
  want = want - #rows / 2
  if more and want > 0 then
    local entries, n = owed_take(KEYS[13], KEYS[14], want)
    want = want - n
    for _, e in ipairs(entries) do
      owed_answer(e)
    end
  end
  if more and want > 0 then
    take(redis.call('ZRANGE', KEYS[2], REC_TOMB, '+inf', 'BYSCORE', 'LIMIT', 0, want,
      'WITHSCORES'))
  end
  -- The members taken are the dirty set's first ones: removed by rank, in one call
  -- (nothing above changes the dirty set).
  if taken_members > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[2], 0, taken_members - 1)
  end
end
in_chunks('ZADD', KEYS[11], held)
in_chunks('SADD', KEYS[3], taken)
in_chunks('ZREM', KEYS[7], undeferred)
in_chunks('ZADD', KEYS[7], by_first)

fired_sweep(ARGV[3], now, tonumber(ARGV[11]))

local applied = tonumber(redis.call('GET', KEYS[6]) or '-1')
local reflected = applied
for _, key in ipairs({KEYS[7], KEYS[11]}) do
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #oldest > 0 and tonumber(oldest[2]) - 1 < reflected then
    reflected = tonumber(oldest[2]) - 1
  end
end
local oldest = writing_oldest(KEYS[10])
if oldest and oldest - 1 < reflected then
  reflected = oldest - 1
end
local left = redis.call('ZCARD', KEYS[2]) + redis.call('LLEN', KEYS[13])
local flight = left == 0 and listed > 0 and redis.call('ZRANGE', KEYS[5], 0, listed - 1) or {}
local out = {left, through, string.format('%d', reflected),
  redis.call('GET', KEYS[8]) or '0', string.format('%d', applied), tombs, #flight}
for i = 1, #flight do
  out[#out + 1] = flight[i]
end
for i = 1, #emit do
  out[#out + 1] = emit[i]
end
rec_flush()
return out
