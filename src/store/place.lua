-- Timer records, part 2 of 2 (after record.lua): where a record lives.
-- * a live (scheduled) one-shot timer due after the promoted minute (meta `pm`) is one
--   field of a bucket hash `BASE r:B` (field: the timer id), so a timer pending for hours
--   costs a few dozen bytes instead of a key of its own. Buckets grow by linear hashing
--   (`BASE rb`: level L, split pointer s, bucket records n): on average a bucket holds
--   at most 2 * REC_LOAD records, few enough for Redis's compact (listpack) encoding;
-- * every other timer is a string key of its own, `BASE t:ID`: one-shot timers due
--   soon, cron timers, paused timers, and done timers (fired, cancelled, completed,
--   dead_lettered; these expire after the retention: a look-up and the duplicate check
--   still find them). The fire path reads and writes these with one call each;
-- * promote.lua moves the records of the next minutes from their buckets to their own
--   keys ahead of time and advances `pm` (pc: its cursor in the next minute's slice);
--   `BASE bm` counts the bucket records due in each minute, so it skips minutes with
--   none (a burst created shortly before its due is in own keys already).
-- Invariants:
-- * a timer is in one place at a time (rec_put moves it);
-- * a record's bucket is the bucket of its id's hash under the meta in Redis: a split
--   writes the meta in the same step that moves the records;
-- * the placement is a matter of cost only: rec_get and rec_raw look in both places.

local function rec_hash(id)
  return tonumber(string.sub(redis.sha1hex(id), 1, 8), 16)
end

local function rec_meta()
  if not REC.meta then
    local m = redis.call('HMGET', REC.base .. 'rb', 'L', 's', 'n', 'pm', 'pc')
    local L = tonumber(m[1] or '0')
    REC.meta = {L = L, s = tonumber(m[2] or '0'), n = tonumber(m[3] or '0'),
      size = REC_BUCKETS * 2 ^ L, pm = tonumber(m[4] or '-1'), pc = tonumber(m[5] or '0')}
  end
  return REC.meta
end

-- One more (`d` = 1) or one fewer (-1) bucket record due in `minute`: the record count
-- (splits) and the per-minute count (`BASE bm`, promote.lua skips minutes with none).
-- Both are written by rec_flush.
local function rec_count(minute, d)
  local m = rec_meta()
  m.n = m.n + d
  REC.counted = true
  REC.minutes[minute] = (REC.minutes[minute] or 0) + d
end

-- The bucket key of a record whose id hashes to `h`.
local function rec_bucket(h)
  local m = REC.meta or rec_meta()
  local b = h % m.size
  if b < m.s then
    b = h % (2 * m.size)
  end
  return REC.rprefix .. b
end

-- The fire path's fast read of timer `id`: its packed array (positions above; the state
-- as its code, a one-shot kind as false), where it is ('own' or 'bucket') and, from a
-- bucket, the id's hash; nil (and the hash) when Redis has no record of it. No field
-- table is built. From its own key, the packed record follows (fourth value).
local function rec_raw(id)
  local s = redis.call('GET', REC.base .. 't:' .. id)
  if s then
    return cmsgpack.unpack(s), 'own', nil, s
  end
  local h = rec_hash(id)
  s = redis.call('HGET', rec_bucket(h), id)
  if s then
    return cmsgpack.unpack(s), 'bucket', h
  end
  return nil, nil, h
end

-- Live timer `id` of application `app` (raw record `a` found at `where` with hash `h`,
-- rec_raw) is done in state `st` after fire `fire` (a history entry, or nil): its own
-- key, unchanged but for the state and the fire, expiring after the retention.
local function rec_done_raw(id, app, a, where, h, st, fire)
  if where == 'bucket' then
    redis.call('HDEL', rec_bucket(h), id)
    rec_count(math.floor(a[REC_DUE] / 60000), -1)
  end
  rec_tally(app, REC_STATES[a[REC_ST]], st)
  a[REC_ST] = REC_STATE_CODE[st]
  if fire then
    -- A scheduled one-shot timer has no last fire (a create folds an earlier one in).
    for i = #a + 1, REC_LX - 1 do
      a[i] = false
    end
    a[REC_LX] = cmsgpack.pack(fire)
  end
  redis.call('SET', REC.base .. 't:' .. id, cmsgpack.pack(a), 'PX', REC.retention)
end

-- The fields of timer `id` from what rec_raw answered for it (nil when Redis has none)
-- and, when computed, the id's hash.
-- Marks: `_own` (a live timer's own key), `_done` (a done timer's key), `_bucket` (a
-- bucket field, due in minute `_m`); `_h` caches the hash.
local function rec_from_raw(id, a, where, h)
  if not a then
    return nil, h
  end
  local t = rec_fields(id, a)
  t._st0 = t.st
  if where == 'bucket' then
    t._bucket, t._h, t._m = true, h, math.floor(tonumber(t.due) / 60000)
  elseif REC_LIVE[t.st] then
    t._own = true
  else
    t._done = true
  end
  return t
end

-- The fields of timer `id` (nil when Redis has none) and, when computed, the id's hash
-- (rec_from_raw).
local function rec_get(id)
  return rec_from_raw(id, rec_raw(id))
end

-- Appends the fields of `t` to `out` as field/value pairs (rec_get's marks left out);
-- returns how many.
local function rec_emit(t, out)
  local n = 0
  for f, v in pairs(t) do
    if string.byte(f, 1) ~= 95 then
      out[#out + 1] = f
      out[#out + 1] = v
      n = n + 1
    end
  end
  return n
end

-- Splits the next bucket when the records outgrow the buckets (linear hashing).
local function rec_split()
  local m = rec_meta()
  local size = m.size
  if m.n <= REC_LOAD * (size + m.s) then
    return
  end
  local from = m.s
  local to = from + size
  local fkey = REC.rprefix .. from
  local all = redis.call('HGETALL', fkey)
  local moved, gone = {}, {}
  for i = 1, #all, 2 do
    if rec_hash(all[i]) % (2 * size) == to then
      moved[#moved + 1] = all[i]
      moved[#moved + 1] = all[i + 1]
      gone[#gone + 1] = all[i]
    end
  end
  if #gone > 0 then
    redis.call('HSET', REC.rprefix .. to, unpack(moved))
    redis.call('HDEL', fkey, unpack(gone))
  end
  m.s = from + 1
  if m.s == size then
    m.L, m.s, m.size = m.L + 1, 0, 2 * size
  end
  redis.call('HSET', REC.base .. 'rb', 'L', m.L, 's', m.s, 'n', m.n)
  REC.counted = false
end

-- Writes timer `id` (fields `t`, strings, with rec_get's marks) where it belongs: a
-- scheduled one-shot timer due after the promoted minute into its bucket, any other into
-- its own key (a done one expiring after the retention). A new timer carries none of
-- the marks (`_h` may be given).
local function rec_put(id, t)
  rec_tally(t.a, t._st0, t.st)
  t._st0 = t.st
  local tkey = REC.base .. 't:' .. id
  local due = tonumber(t.due or '')
  local minute = due and math.floor(due / 60000)
  if t.st == 'scheduled' and t.k ~= 'c' and minute and minute > rec_meta().pm then
    t._h = t._h or rec_hash(id)
    redis.call('HSET', rec_bucket(t._h), id, rec_pack(id, t))
    if t._own or t._done then
      redis.call('DEL', tkey)
      t._own, t._done = nil, nil
    end
    if not t._bucket then
      t._bucket = true
      rec_count(minute, 1)
      rec_split()
    elseif t._m ~= minute then
      rec_count(t._m, -1)
      rec_count(minute, 1)
    end
    t._m = minute
    return
  end
  if t._bucket then
    redis.call('HDEL', rec_bucket(t._h or rec_hash(id)), id)
    t._bucket = nil
    rec_count(t._m, -1)
  end
  if REC_LIVE[t.st] then
    redis.call('SET', tkey, rec_pack(id, t))
    t._own, t._done = true, nil
  else
    redis.call('SET', tkey, rec_pack(id, t), 'PX', REC.retention)
    t._own, t._done = nil, true
  end
end

-- A MessagePack string and a non-negative integer (below 65536) as cmsgpack writes them.
local function rec_mp_str(x)
  local n = #x
  if n < 32 then
    return string.char(160 + n) .. x
  elseif n < 256 then
    return '\217' .. string.char(n) .. x
  elseif n < 65536 then
    return '\218' .. string.char(math.floor(n / 256), n % 256) .. x
  end
  return '\219' .. string.char(math.floor(n / 16777216), math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256) .. x
end
local function rec_mp_uint(n)
  if n < 128 then
    return string.char(n)
  elseif n < 256 then
    return '\204' .. string.char(n)
  end
  return '\205' .. string.char(math.floor(n / 256), n % 256)
end

-- Writes new scheduled one-shot timer `id` of application `app` (its id's hash `h`, due
-- `due` ms), whose record the owner packed (src/store/fresh.rs): `head`, then definition
-- `d` as rec_pack writes it (its prefix numbered), then `tail`. What rec_put does for
-- such a timer, without a field table.
local function rec_put_fresh(id, h, due, app, head, d, tail)
  local x = rec_def_pack(d)
  if type(x) == 'table' then
    x = '\146' .. rec_mp_uint(x[1]) .. rec_mp_str(x[2])
  else
    x = rec_mp_str(x)
  end
  rec_tally(app, nil, 'scheduled')
  local minute = math.floor(due / 60000)
  if minute > rec_meta().pm then
    redis.call('HSET', rec_bucket(h or rec_hash(id)), id, head .. x .. tail)
    rec_count(minute, 1)
    rec_split()
  else
    redis.call('SET', REC.base .. 't:' .. id, head .. x .. tail)
  end
end

-- Stores the record count and the live counts that moved (call before returning).
local function rec_flush()
  if REC.counted then
    redis.call('HSET', REC.base .. 'rb', 'n', REC.meta.n)
    REC.counted = false
  end
  for app, n in pairs(REC.moved) do
    if n ~= 0 then
      redis.call('HINCRBY', REC.apps, app, n)
    end
  end
  REC.moved = {}
  for app, per in pairs(REC.tally) do
    for st, n in pairs(per) do
      if n ~= 0 then
        redis.call('HINCRBY', REC.base .. 'ac', st .. ':' .. app, n)
      end
    end
  end
  REC.tally = {}
  for minute, n in pairs(REC.minutes) do
    if n ~= 0 and redis.call('HINCRBY', REC.base .. 'bm', minute, n) <= 0 then
      redis.call('HDEL', REC.base .. 'bm', minute)
    end
  end
  REC.minutes = {}
end

-- The state record owed for timer `id` (fields `t` after a change, nil when gone),
-- appended to `out` as id, n, n field/value pairs, or id, -1 for a tombstone; false when
-- nothing is owed (it ended before any state of it was written). A live timer is marked
-- `p` (its state was written: it owes a tombstone when it ends). checkpoint.lua and
-- apply.lua answer states this one way.
local REC_TERMINAL = {fired = true, completed = true, cancelled = true, dead_lettered = true}
local function rec_state_answer(id, t, out)
  if not t or (REC_TERMINAL[t.st] and t.p) then
    out[#out + 1] = id
    out[#out + 1] = -1
    return true
  end
  if REC_TERMINAL[t.st] then
    return false
  end
  if not t.p then
    t.p = '1'
    rec_put(id, t)
  end
  local at = #out + 2
  out[#out + 1] = id
  out[#out + 1] = 0
  out[at] = rec_emit(t, out)
  return true
end
