-- Applies a batch of timer commands of one partition, in order, atomically and
-- idempotently (one call per batch: the per-call cost of a script dominates a command's).
-- KEYS: 1 epoch, 2 applied offset, 3 slice index, 4 in-flight set, 5 cron index,
--       6 dirty set (timers changed since the last checkpoint, scored by the first
--       command that changed them since), 7 deferred timers by first offset
--       (checkpoint.lua), 8 live timers per application, 9 the states the caller writes
--       (hash: per call, field its first offset written, value the ids, written.lua),
--       10 parked index (claim.lua: the parked members of application APP are in
--       KEYS[10] .. ':' .. APP), 11 acknowledgement counter, 12 revived (owed.lua)
-- ARGV: 1 expected epoch, 2 retention ms, 3 slice key prefix, 4 the applied offset
--       Redis must hold at least (what this owner applied before; -1 unknown), 5 now ms,
--       6 defer ms, 7 the partition's key prefix (timer records, record.lua), 8 history
--       entries kept per timer, 9 history TTL ms, 10 '1' when the caller writes the
--       states of the timers this call changes (else the checkpoint does), then per
--       command a group:
--       +0 command offset, +1 op (create | update | pause | resume | cancel | fire), +2 timer id,
--       +3 request id, +4 kind (o one-shot | c cron), +5 due ms (one-shot due, first
--       cron occurrence, or the extra fire's), +6 stored definition ('' keeps the current one on update),
--       +7 origin ms (resume), +8 application, +9 most live timers the application may
--       have in the partition ('' no limit), +10 '1' when the application's fires are
--       paced (its pending fires go to its parked set, KEYS[10] .. ':' .. application,
--       not to the slices; claim.lua), +11 and +12 the record of a new one-shot timer
--       packed by the owner around its definition (head, tail; src/store/fresh.rs; ''
--       when not a one-shot create), +13 the number of cron values that follow (0 without
--       a cron schedule): +14 cron spec (JSON), +15 misfire (once | all | skip), +16 max
--       fires (''), +17 materialised through ms, +18 next materialisation ms ('' when the
--       schedule is exhausted), +19.. the occurrences to materialise
-- Returns {'fenced'} (also when Redis is behind ARGV[4]: it lost writes), or, packed
-- with cmsgpack (one string; src/store/packed.rs reads it), per command {code, version,
-- state, due, reason} flattened; code is accepted | duplicate | rejected; with ARGV[10]
-- = '1', then the states to write: per timer id, n, n field/value pairs (n = -1: a
-- tombstone), as checkpoint.lua answers them, or id, -2, offset: the timer's state is the
-- one the owner sent with the create at that offset (+16, +17).
-- Invariants:
-- * the version of a timer is the offset of the last command that changed it, so every
--   cron member "\1version:due:id" of an older version is stale and never claimed;
-- * a command at or below the timer's version, or repeating its last request id, is a
--   duplicate: a replayed batch changes nothing; the record that made the timer's
--   current version, applied again, answers accepted again (and changes nothing);
-- * a scheduled one-shot timer has exactly one member: its id in the slice of its due
--   minute, or "version:due:id" in flight; cron members of older versions are dropped
--   lazily when their minute is claimed; one fired with its member in flight (its fire
--   under way, rec_view) refuses every command but a fire, recording none of them;
-- * the applied offset only grows; it is the highest offset of the batch once applied;
-- * a timer belongs to the application that created it (field a): a command of another
--   application is rejected and changes nothing;
-- * KEYS[8] counts each application's live (scheduled or paused) timers: a create that
--   makes a timer live adds one, every change to a done state (complete(), cancel, a
--   fire acknowledged, ...) takes one; a create over the limit is rejected;
-- * a slice index entry names a minute whose slice has members: a command that empties a
--   slice removes its entry (claim.lua only looks a bounded way past empty ones);
-- * a cron timer whose fires reached its maximum (through an update or a resume) is
--   completed, never left scheduled with nothing to fire;
-- * every timer an accepted command changed is in the dirty set, so the next checkpoint
--   writes its state to the state topic; a new one-shot timer due within the defer time
--   goes straight to the deferred set instead (checkpoint.lua);
-- * with ARGV[10] = '1', a changed timer whose state no earlier call answered (one not
--   in KEYS[9]) is answered (its state after the call, or a tombstone) instead of
--   entering the dirty set: the call's entry in KEYS[9] (field: its first command's
--   offset; value: the ids of the timers answered, one per line) stays until
--   the caller confirms the write (written.lua); a timer already in KEYS[9] (a write
--   not confirmed) goes to the dirty set as before;
-- * a live timer in the dirty set carries p (its state is owed to the state topic, and
--   then a tombstone when it ends): set here, so a checkpoint never rewrites the record;
--   a done timer made live again is noted revived (owed.lua: a tombstone owed is void);
-- * a fire (FIRE_NOW) of a timer Redis holds, in any state, adds one extra fire: slice
--   member "\1-offset:due:id" (a negative version: never stale, no state change, its own
--   fire id); the timer keeps the offset in `fo`, so the same command applied again is a
--   duplicate; neither its version nor its schedule changes;
-- * every command accepted, and every one rejected that names a timer of its own
--   application, is an entry of the timer's history (record.lua); a duplicate is not.
if rec_fenced(KEYS[1], ARGV[1], KEYS[2], ARGV[4]) then
  return {'fenced'}
end
rec_init(ARGV[7], ARGV[2], KEYS[8])
rec_history(ARGV[8], ARGV[9])
local OPS = {create = 1, update = 1, pause = 1, resume = 1, cancel = 1, fire = 1}
local out = {}
-- top: the highest offset of the batch, as its decimal string (tonumber costs two
-- strtod). deferred: set by a create whose timer is deferred rather than dirty. existed:
-- set by each command, whether Redis held a record of its timer before it (was_done: a
-- done one). paced_app: the application of the command being applied when its fires are
-- paced, else nil.
local top, deferred, existed, was_done, paced_app = nil, false, false, false, nil
local soon = tonumber(ARGV[5]) + tonumber(ARGV[6])

-- Adds `member`, due `d` (a string; `nd` the same as a number, when known), to its slice
-- or parked set.
local function slice_add(d, member, nd)
  if paced_app then
    redis.call('ZADD', KEYS[10] .. ':' .. paced_app, d, member)
    redis.call('ZADD', KEYS[10], 'LT', d, paced_app)
    return
  end
  rec_slice_add(ARGV[3], KEYS[3], d, nd or tonumber(d), member)
end

-- Removes the pending member of a one-shot timer of application `app`: from its slice,
-- else from the application's parked set (claim.lua), if it is there.
local function slice_remove(d, member, app)
  local minute = string.format('%d', math.floor(tonumber(d) / 60000))
  local skey = ARGV[3] .. minute
  local removed = redis.call('ZREM', skey, member)
  if removed == 1 and redis.call('EXISTS', skey) == 0 then
    redis.call('ZREM', KEYS[3], minute)
    REC.slice.indexed[minute] = nil
  elseif removed == 0 and app then
    redis.call('ZREM', KEYS[10] .. ':' .. app, member)
  end
end

-- Stores the schedule of the command whose group starts at ARGV[a] in `t` (timer `id`,
-- version `off`) and writes it; materialises it when `live`.
local function install(t, a, id, off, live)
  local due_arg = ARGV[a + 5]
  if ARGV[a + 4] == 'o' then
    t.k, t.due = 'o', due_arg
    t.sc, t.mp, t.mx, t.hz, t.lst, t.fin, t.n = nil, nil, nil, nil, nil, nil, nil
    redis.call('ZREM', KEYS[5], id)
    if live then
      slice_add(due_arg, id)
    end
    rec_put(id, t)
    return
  end
  -- (No next occurrence: no due.)
  t.k, t.sc, t.mp, t.hz = 'c', ARGV[a + 14], ARGV[a + 15], ARGV[a + 17]
  t.due = due_arg ~= '' and due_arg or nil
  t.fin, t.lst = nil, nil
  t.mx = ARGV[a + 16] ~= '' and ARGV[a + 16] or nil
  if fired_out(t) then
    complete(t, id, KEYS[5], KEYS[6])
    return
  end
  if live then
    local last
    for i = a + 19, a + 13 + tonumber(ARGV[a + 13]) do
      slice_add(ARGV[i], slice_member('c', off, ARGV[i], id))
      last = ARGV[i]
    end
    t.lst = last
    if ARGV[a + 18] == '' then
      redis.call('ZREM', KEYS[5], id)
      t.fin = last
    else
      redis.call('ZADD', KEYS[5], ARGV[a + 18], id)
    end
  end
  rec_put(id, t)
end

-- The history entry of the command whose group starts at ARGV[a], with `outcome` and
-- `reason` (nil when accepted).
local function entry(a, outcome, reason)
  local rq = ARGV[a + 3]
  return {HIST_COMMAND, tonumber(ARGV[5]), HIST_OPS[ARGV[a + 1]] or 0, HIST_OUTCOMES[outcome],
    tonumber(ARGV[a]), rq == ARGV[a + 2] or rq, reason}
end

-- Applies the command whose group starts at ARGV[a]; returns code, reason and the
-- timer's fields after it.
local function apply_one(a)
  local off, op, id, rq_arg = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  if not top or #off > #top or (#off == #top and off > top) then
    top = off
  end
  local t = rec_get(id)
  local noff = t and tonumber(off)
  existed = t ~= nil
  was_done = t ~= nil and REC_TERMINAL[t.st] == true
  if not OPS[op] then
    return 'rejected', 'unknown operation ' .. op, t
  end
  local app = ARGV[a + 8]
  if t and t.a and t.a ~= app then
    return 'rejected', 'timer belongs to another application', t
  end
  local v, st = t and t.v, t and t.st
  if op == 'fire' then
    if not v then
      return 'rejected', 'unknown timer', t
    end
    if t.fo and noff <= tonumber(t.fo) then
      return 'duplicate', 'this fire was applied already', t
    end
    t.fo = off
    rec_hist_push(t, entry(a, 'accepted'))
    slice_add(ARGV[a + 5], '\1-' .. off .. ':' .. ARGV[a + 5] .. ':' .. id)
    rec_put(id, t)
    return 'accepted', '', t
  end
  if v then
    if t.rq == rq_arg and tonumber(v) == noff then
      -- This very record, applied again (a reply lost to a client timeout, or a replay):
      -- it answers what it answered the first time.
      return 'again', '', t
    end
    if t.rq == rq_arg then
      return 'duplicate', 'request ' .. t.rq .. ' was applied already', t
    end
    if noff <= tonumber(v) then
      return 'duplicate', 'the timer is at version ' .. v .. ', newer than this command', t
    end
  end
  if st == 'fired' and t.k ~= 'c' and t.due and rec_under_way(KEYS[4], id, v, t.due) then
    -- Its fire was claimed (read fired, rec_view) and will be delivered; until it
    -- lands its record is the fire path's (this is no history entry).
    return 'rejected', 'the timer is firing: its fire is under way; send again once delivered', t, true
  end
  local live = st == 'scheduled' or st == 'paused'
  if op == 'create' then
    if live then
      return 'rejected', 'a timer with this id is ' .. st .. '; update or cancel it first', t
    end
    local most = ARGV[a + 9]
    if most ~= '' and rec_live_count(app) >= tonumber(most) then
      return 'rejected', 'pending timer limit: the application has ' .. most ..
        ' timers not yet done in this partition', t
    end
    if not t and ARGV[a + 4] == 'o' and ARGV[a + 11] ~= '' then
      -- A new one-shot timer (the common case): its record comes packed by the owner.
      local due_arg, due = ARGV[a + 5], tonumber(ARGV[a + 5])
      if due <= soon then
        redis.call('ZADD', KEYS[7], 'LT', off, id)
        deferred = true
      end
      rec_put_fresh(id, due, app, ARGV[a + 11], ARGV[a + 6], ARGV[a + 12])
      slice_add(due_arg, id, due)
      return 'accepted', '', {v = off, st = 'scheduled', due = due_arg, _fresh = true}
    end
    -- A timer whose state was written keeps owing its record (field p); one created
    -- again keeps its history (rec_hist_own: its first create is its own, not this one).
    local fresh = {v = off, st = 'scheduled', rq = rq_arg, d = ARGV[a + 6], a = app,
      p = t and t.p, _done = t and t._done, _st0 = t and t.st, h = t and rec_hist_own(t),
      lx = t and t.lx}
    local due_arg = ARGV[a + 5]
    if not t and ARGV[a + 4] == 'o' and REC.hist and REC.hist.n > 0 then
      -- A new one-shot timer: the short form of its create (record.lua).
      fresh.h = cmsgpack.pack({{HIST_CREATED, tonumber(due_arg) - tonumber(ARGV[5])}})
    else
      rec_hist_push(fresh, entry(a, 'accepted'))
    end
    if ARGV[a + 4] == 'o' then
      -- The common case: a new one-shot timer.
      fresh.k, fresh.due = 'o', due_arg
      if not fresh.p and tonumber(due_arg) <= soon then
        redis.call('ZADD', KEYS[7], 'LT', off, id)
        deferred = true
      else
        fresh.p = '1'
      end
      rec_put(id, fresh)
      slice_add(due_arg, id)
    else
      fresh.n, fresh.p = '0', '1'
      install(fresh, a, id, off, true)
    end
    return 'accepted', '', fresh
  end
  if not v then
    return 'rejected', 'unknown timer', t
  end
  if op == 'cancel' and st == 'cancelled' then
    return 'duplicate', 'the timer was cancelled already', t
  end
  if op == 'pause' and st == 'paused' then
    return 'duplicate', 'the timer is paused already', t
  end
  if op == 'resume' and st == 'scheduled' then
    return 'duplicate', 'the timer is not paused', t
  end
  if not live then
    return 'rejected', 'the timer is ' .. st .. '; create it again', t
  end
  -- Removes the pending member of a scheduled one-shot timer (cron members go lazily).
  if st == 'scheduled' and t.k ~= 'c' and t.due then
    slice_remove(t.due, id, t.a)
    redis.call('ZREM', KEYS[4], v .. ':' .. t.due .. ':' .. id)
  end
  rec_hist_push(t, entry(a, 'accepted'))
  t.v, t.rq = off, rq_arg
  if op ~= 'cancel' then
    -- It goes to the dirty set: its state is written by the next checkpoint.
    t.p = '1'
  end
  if op == 'update' then
    if ARGV[a + 6] ~= '' then
      t.d = ARGV[a + 6]
    end
    install(t, a, id, off, st == 'scheduled')
    if t.st == 'completed' then
      return 'accepted', 'the timer has fired max_fires times: completed', t
    end
  elseif op == 'pause' then
    t.st = 'paused'
    redis.call('ZREM', KEYS[5], id)
    rec_put(id, t)
  elseif op == 'resume' then
    t.st = 'scheduled'
    if t.k == 'c' and fired_out(t) then
      complete(t, id, KEYS[5], KEYS[6])
      return 'accepted', 'the timer has fired max_fires times: completed', t
    elseif t.k == 'c' then
      -- Occurrences from the resume on; the migrator materialises them at once.
      t.hz = string.format('%d', tonumber(ARGV[a + 7]) - 1)
      t.fin, t.due = nil, nil
      redis.call('ZADD', KEYS[5], 0, id)
    else
      slice_add(t.due, id)
    end
    rec_put(id, t)
  elseif op == 'cancel' then
    t.st = 'cancelled'
    redis.call('ZREM', KEYS[5], id)
    rec_put(id, t)
  end
  return 'accepted', '', t
end

local a = 11
-- (offset, id) pairs for the dirty set, added in one call at the end.
local dirty = {}
-- Timers whose state this call answers: ids in order, and each one's fields after it.
local writing = ARGV[10] == '1'
local written, last = {}, {}
-- The timers whose states earlier calls answered, not yet confirmed (writing.lua; read
-- when a command first meets a timer Redis held).
local unconfirmed = nil
while a <= #ARGV do
  deferred = false
  paced_app = ARGV[a + 10] == '1' and ARGV[a + 8] or nil
  local id = ARGV[a + 2]
  local code, reason, t, unrecorded = apply_one(a)
  if code == 'accepted' and was_done and t and not REC_TERMINAL[t.st] then
    owed_revive(KEYS[12], KEYS[11], id)
  end
  if code == 'rejected' and t and not unrecorded and t.a == ARGV[a + 8] then
    rec_hist_push(t, entry(a, 'rejected', reason))
    rec_put(id, t)
    if last[id] then
      last[id] = t
    end
  end
  if code == 'again' then
    code = 'accepted'
  elseif code == 'accepted' and not deferred then
    if writing and existed and not unconfirmed then
      unconfirmed = writing_set(KEYS[9])
    end
    if last[id] then
      last[id] = t
    elseif writing and not (existed and unconfirmed[id]) then
      written[#written + 1] = id
      last[id] = t
      if existed then
        -- Written now: a deferral of an earlier command no longer holds the checkpoint.
        redis.call('ZREM', KEYS[7], id)
        if was_done then
          -- A done timer's tombstone owed unread (REC_TOMB, record.lua) no longer holds:
          -- the timer is read when the checkpoint answers it.
          redis.call('ZADD', KEYS[6], 'XX', 'LT', ARGV[a], id)
        end
      end
    else
      dirty[#dirty + 1] = ARGV[a]
      dirty[#dirty + 1] = id
    end
  end
  t = t or {}
  out[#out + 1] = code
  out[#out + 1] = t.v or ''
  out[#out + 1] = t.st or ''
  out[#out + 1] = t.due or ''
  out[#out + 1] = reason
  a = a + 14 + (ARGV[a + 13] == '0' and 0 or tonumber(ARGV[a + 13]))
end
for i = 1, #dirty, 1000 do
  redis.call('ZADD', KEYS[6], 'LT', unpack(dirty, i, math.min(i + 999, #dirty)))
end
if top and tonumber(top) > tonumber(redis.call('GET', KEYS[2]) or '-1') then
  redis.call('SET', KEYS[2], top)
end
-- The ids whose states the caller writes (one per line).
local owed = {}
for _, id in ipairs(written) do
  local t = last[id]
  if t._fresh then
    out[#out + 1] = id
    out[#out + 1] = -2
    out[#out + 1] = t.v
    owed[#owed + 1] = id
  elseif rec_state_answer(id, t, out) then
    owed[#owed + 1] = id
  end
end -- (Not owed: it ended before any state of it was written.)
if #owed > 0 then
  redis.call('HSET', KEYS[9], ARGV[11], table.concat(owed, '\n'))
end
rec_flush()
return cmsgpack.pack(out)
