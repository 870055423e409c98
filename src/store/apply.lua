-- Applies a batch of timer commands of one partition, in order, atomically and
-- idempotently (one call per batch: the per-call cost of a script dominates a command's).
-- KEYS: 1 epoch, 2 applied offset, 3 slice index, 4 in-flight set, 5 cron index,
--       6 dirty set (timers changed since the last checkpoint, scored by the first
--       command that changed them since), 7 deferred timers by due, 8 by first offset
--       (checkpoint.lua), 9 live timers per application, 9+i timer hash of the i-th command
-- ARGV: 1 expected epoch, 2 retention ms, 3 slice key prefix, 4 the applied offset
--       Redis must hold at least (what this owner applied before; -1 unknown), 5 now ms,
--       6 defer ms, then per command a group:
--       +0 command offset, +1 op (create | update | pause | resume | cancel), +2 timer id,
--       +3 request id, +4 kind (o one-shot | c cron), +5 due ms (one-shot due, or first
--       cron occurrence), +6 stored definition ('' keeps the current one on update),
--       +7 cron spec (JSON), +8 misfire (once | all | skip), +9 max fires (''),
--       +10 materialised through ms, +11 next materialisation ms ('' when the schedule is
--       exhausted), +12 origin ms (resume), +13 application, +14 most live timers the
--       application may have in the partition ('' no limit), +15 number of cron
--       occurrences that follow, +16.. the occurrences to materialise
-- Returns {'fenced'} (also when Redis is behind ARGV[4]: it lost writes), or per command {code, version, state, due, reason} flattened; code
-- is accepted | duplicate | rejected.
-- Invariants:
-- * the version of a timer is the offset of the last command that changed it, so every
--   fire member "version:due:id" of an older version is stale and never claimed;
-- * a command at or below the timer's version, or repeating its last request id, is a
--   duplicate: a replayed batch changes nothing; the record that made the timer's
--   current version, applied again, answers accepted again (and changes nothing);
-- * a scheduled one-shot timer has exactly one member (in a slice or in flight); cron
--   members of older versions are dropped lazily when their minute is claimed;
-- * the applied offset only grows; it is the highest offset of the batch once applied;
-- * a timer belongs to the application that created it (field a): a command of another
--   application is rejected and changes nothing;
-- * KEYS[9] counts each application's live (scheduled or paused) timers: a create that
--   makes a timer live adds one, every change to a done state (complete(), cancel, a
--   fire acknowledged, ...) takes one; a create over the limit is rejected;
-- * a slice index entry names a minute whose slice has members: a command that empties a
--   slice removes its entry (claim.lua only looks a bounded way past empty ones);
-- * a cron timer whose fires reached its maximum (through an update or a resume) is
--   completed, never left scheduled with nothing to fire;
-- * every timer an accepted command changed is in the dirty set, so the next checkpoint
--   writes its state to the state topic; a new one-shot timer due within the defer time
--   goes straight to the deferred sets instead (checkpoint.lua).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced'}
end
if tonumber(redis.call('GET', KEYS[2]) or '-1') < tonumber(ARGV[4]) then
  return {'fenced'}
end
local OPS = {create = 1, update = 1, pause = 1, resume = 1, cancel = 1}
local out = {}
local top = -1
local soon = tonumber(ARGV[5]) + tonumber(ARGV[6])
-- Set by a create whose timer is deferred rather than dirty.
local deferred = false

local function slice_add(d, member)
  local minute = math.floor(tonumber(d) / 60000)
  redis.call('ZADD', ARGV[3] .. minute, d, member)
  redis.call('ZADD', KEYS[3], minute, minute)
end

local function slice_remove(d, member)
  local minute = math.floor(tonumber(d) / 60000)
  local skey = ARGV[3] .. minute
  if redis.call('ZREM', skey, member) == 1 and redis.call('EXISTS', skey) == 0 then
    redis.call('ZREM', KEYS[3], minute)
  end
end

-- Whether a cron timer has fired as often as it may.
local function fired_out(tkey)
  local t = redis.call('HMGET', tkey, 'n', 'mx')
  return t[2] and tonumber(t[1] or '0') >= tonumber(t[2])
end

-- Stores the schedule of the command whose group starts at ARGV[a] in `tkey` (timer
-- `id`, version `off`); materialises it when `live`.
local function install(tkey, a, id, off, live)
  local due_arg = ARGV[a + 5]
  if ARGV[a + 4] == 'o' then
    redis.call('HSET', tkey, 'k', 'o', 'due', due_arg)
    redis.call('HDEL', tkey, 'sc', 'mp', 'mx', 'hz', 'lst', 'fin', 'n')
    redis.call('ZREM', KEYS[5], id)
    if live then
      slice_add(due_arg, off .. ':' .. due_arg .. ':' .. id)
    end
    return
  end
  redis.call('HSET', tkey, 'k', 'c', 'sc', ARGV[a + 7], 'mp', ARGV[a + 8], 'hz', ARGV[a + 10],
    'due', due_arg)
  redis.call('HDEL', tkey, 'fin', 'lst')
  if ARGV[a + 9] ~= '' then
    redis.call('HSET', tkey, 'mx', ARGV[a + 9])
  else
    redis.call('HDEL', tkey, 'mx')
  end
  if fired_out(tkey) then
    complete(tkey, id, ARGV[2], KEYS[5], KEYS[6], KEYS[9])
    return
  end
  if not live then
    return
  end
  local last
  for i = a + 16, a + 15 + tonumber(ARGV[a + 15]) do
    slice_add(ARGV[i], off .. ':' .. ARGV[i] .. ':' .. id)
    last = ARGV[i]
  end
  if last then
    redis.call('HSET', tkey, 'lst', last)
  end
  if ARGV[a + 11] == '' then
    redis.call('ZREM', KEYS[5], id)
    if last then
      redis.call('HSET', tkey, 'fin', last)
    end
  else
    redis.call('ZADD', KEYS[5], ARGV[a + 11], id)
  end
end

-- Applies the command whose group starts at ARGV[a] to the timer hash `tkey`; returns
-- code, reason and, when it knows them without a read, the timer's version, state and due
-- (otherwise they are read back after).
local function apply_one(tkey, a)
  local off, op, id, rq_arg = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local noff = tonumber(off)
  if noff > top then
    top = noff
  end
  if not OPS[op] then
    return 'rejected', 'unknown operation ' .. op
  end
  local app = ARGV[a + 13]
  local t = redis.call('HMGET', tkey, 'v', 'st', 'rq', 'due', 'k', 'a')
  local v, st, rq, due, kind = t[1], t[2], t[3], t[4], t[5]
  if v and t[6] and t[6] ~= app then
    return 'rejected', 'timer belongs to another application'
  end
  if v then
    if rq == rq_arg and tonumber(v) == noff then
      -- This very record, applied again (a reply lost to a client timeout, or a replay):
      -- it answers what it answered the first time.
      return 'again', ''
    end
    if rq == rq_arg then
      return 'duplicate', 'request ' .. rq .. ' was applied already'
    end
    if noff <= tonumber(v) then
      return 'duplicate', 'the timer is at version ' .. v .. ', newer than this command'
    end
  end
  local live = st == 'scheduled' or st == 'paused'
  if op == 'create' then
    if live then
      return 'rejected', 'a timer with this id is ' .. st .. '; update or cancel it first'
    end
    local most = ARGV[a + 14]
    if most ~= '' and tonumber(redis.call('HGET', KEYS[9], app) or '0') >= tonumber(most) then
      return 'rejected', 'pending timer limit: the application has ' .. most ..
        ' timers not yet done in this partition'
    end
    redis.call('HINCRBY', KEYS[9], app, 1)
    local persisted
    if v then
      -- A timer whose state was written keeps owing its record (field p).
      persisted = redis.call('HGET', tkey, 'p')
      redis.call('DEL', tkey)
      if persisted then
        redis.call('HSET', tkey, 'p', persisted)
      end
    end
    local due_arg = ARGV[a + 5]
    if ARGV[a + 4] == 'o' then
      -- The common case in one call: a new one-shot timer.
      redis.call('HSET', tkey, 'v', off, 'st', 'scheduled', 'rq', rq_arg, 'd', ARGV[a + 6],
        'k', 'o', 'due', due_arg, 'a', app)
      slice_add(due_arg, off .. ':' .. due_arg .. ':' .. id)
      if not persisted and tonumber(due_arg) <= soon then
        redis.call('ZADD', KEYS[7], due_arg, id)
        redis.call('ZADD', KEYS[8], 'LT', off, id)
        deferred = true
      end
    else
      redis.call('HSET', tkey, 'v', off, 'st', 'scheduled', 'rq', rq_arg, 'd', ARGV[a + 6],
        'n', 0, 'a', app)
      install(tkey, a, id, off, true)
    end
    -- What a read-back would answer, without the read.
    return 'accepted', '', off, 'scheduled', due_arg
  end
  if not v then
    return 'rejected', 'unknown timer'
  end
  if op == 'cancel' and st == 'cancelled' then
    return 'duplicate', 'the timer was cancelled already'
  end
  if op == 'pause' and st == 'paused' then
    return 'duplicate', 'the timer is paused already'
  end
  if op == 'resume' and st == 'scheduled' then
    return 'duplicate', 'the timer is not paused'
  end
  if not live then
    return 'rejected', 'the timer is ' .. st .. '; create it again'
  end
  -- Removes the pending member of a scheduled one-shot timer (cron members go lazily).
  if st == 'scheduled' and kind ~= 'c' and due then
    local member = v .. ':' .. due .. ':' .. id
    slice_remove(due, member)
    redis.call('ZREM', KEYS[4], member)
  end
  redis.call('HSET', tkey, 'v', off, 'rq', rq_arg)
  if op == 'update' then
    if ARGV[a + 6] ~= '' then
      redis.call('HSET', tkey, 'd', ARGV[a + 6])
    end
    install(tkey, a, id, off, st == 'scheduled')
    if redis.call('HGET', tkey, 'st') == 'completed' then
      return 'accepted', 'the timer has fired max_fires times: completed'
    end
  elseif op == 'pause' then
    redis.call('HSET', tkey, 'st', 'paused')
    redis.call('ZREM', KEYS[5], id)
  elseif op == 'resume' then
    redis.call('HSET', tkey, 'st', 'scheduled')
    if kind == 'c' and fired_out(tkey) then
      complete(tkey, id, ARGV[2], KEYS[5], KEYS[6], KEYS[9])
      return 'accepted', 'the timer has fired max_fires times: completed'
    elseif kind == 'c' then
      -- Occurrences from the resume on; the migrator materialises them at once.
      redis.call('HSET', tkey, 'hz', tonumber(ARGV[a + 12]) - 1)
      redis.call('HDEL', tkey, 'fin', 'due')
      redis.call('ZADD', KEYS[5], 0, id)
    else
      slice_add(due, off .. ':' .. due .. ':' .. id)
    end
  elseif op == 'cancel' then
    done(tkey, KEYS[9])
    redis.call('HSET', tkey, 'st', 'cancelled')
    redis.call('ZREM', KEYS[5], id)
    redis.call('PEXPIRE', tkey, ARGV[2])
  end
  return 'accepted', ''
end

local a = 7
local i = 10
while a <= #ARGV do
  local tkey = KEYS[i]
  deferred = false
  local code, reason, v, st, due = apply_one(tkey, a)
  if code == 'again' then
    code = 'accepted'
  elseif code == 'accepted' and not deferred then
    redis.call('ZADD', KEYS[6], 'LT', ARGV[a], ARGV[a + 2])
  end
  if not v then
    local r = redis.call('HMGET', tkey, 'v', 'st', 'due')
    v, st, due = r[1] or '', r[2] or '', r[3] or ''
  end
  out[#out + 1] = code
  out[#out + 1] = v
  out[#out + 1] = st
  out[#out + 1] = due
  out[#out + 1] = reason
  a = a + 16 + tonumber(ARGV[a + 15])
  i = i + 1
end
if top > tonumber(redis.call('GET', KEYS[2]) or '-1') then
  redis.call('SET', KEYS[2], top)
end
return out
