-- Timer records, part 2 of 2 (after record.lua): where a record lives.
-- * a live (scheduled) one-shot timer due after the promoted minute (meta `pm`) is one
--   field of the partition's bucket, the hash `BASE r` (field: the timer id), so a timer
--   pending for hours costs a hash entry instead of a key of its own. One hash, not
--   many small ones: past `hash-max-listpack-entries` Redis keeps it as a hash table,
--   whose reads and writes cost the same at any size, with no hashing of ids in Lua and
--   no buckets to split as it grows (about 55 bytes more per pending timer than small
--   listpack buckets split by linear hashing, and a quarter to a third less Redis CPU per
--   create);
-- * every other timer is a string key of its own, `BASE t:ID`: one-shot timers due
--   soon, cron timers, paused timers, and done timers (fired, cancelled, completed,
--   dead_lettered; these expire after the retention: a look-up and the duplicate check
--   still find them). The fire path reads and writes these with one call each;
-- * promote.lua moves the records of the next minutes from the bucket to their own
--   keys ahead of time and advances `pm` (pc: its cursor in the next minute's slice);
--   `BASE bm` counts the bucket records due in each minute, so it skips minutes with
--   none (a burst created shortly before its due is in own keys already).
-- Invariants:
-- * a timer is in one place at a time (rec_put moves it);
-- * the placement is a matter of cost only: rec_get and rec_raw look in both places.

local function rec_meta()
  if not REC.meta then
    local m = redis.call('HMGET', REC.base .. 'rb', 'pm', 'pc')
    REC.meta = {pm = tonumber(m[1] or '-1'), pc = tonumber(m[2] or '0')}
  end
  return REC.meta
end

-- One more (`d` = 1) or one fewer (-1) bucket record due in `minute` (`BASE bm`,
-- promote.lua skips minutes with none); written by rec_flush.
local function rec_count(minute, d)
  REC.minutes[minute] = (REC.minutes[minute] or 0) + d
end

-- Whether the partition is fenced for a command call: Redis holds another epoch than
-- `expected` (key `epoch`), or an applied offset (key `offset`) below `floor`, what this
-- owner applied before (Redis lost writes). apply.lua and create.lua.
local function rec_fenced(epoch, expected, offset, floor)
  return redis.call('GET', epoch) ~= expected
    or tonumber(redis.call('GET', offset) or '-1') < tonumber(floor)
end

-- Adds `member`, due `d` (a decimal string; `nd` the same as a number), to the slice of
-- its minute (key `prefix` .. minute) and the minute to slice index `index`, once per
-- call (REC.slice.indexed: the minutes entered). The minute is formatted once per run of
-- members due in it (each string.format is a printf; Lua and Redis would format a
-- number %.14g or %.17g).
local function rec_slice_add(prefix, index, d, nd, member)
  local S = REC.slice
  local m = math.floor(nd / 60000)
  if m ~= S.m then
    S.m, S.ms = m, string.format('%d', m)
    S.key = prefix .. S.ms
  end
  redis.call('ZADD', S.key, d, member)
  if not S.indexed[S.ms] then
    redis.call('ZADD', index, S.ms, S.ms)
    S.indexed[S.ms] = true
  end
end

-- The due time (a string) of the first member of the first non-empty slice (slice index
-- `index`, slice key `prefix` .. minute), or '' when none; drops the index entries of
-- empty slices it meets. Commands remove the entries of the slices they empty, so empty
-- entries are rare; should more than a bounded number lead, it answers `upto` (the
-- claim's bound: 'look again now') rather than 'nothing is due'. (claim.lua.)
local function rec_slice_next(index, prefix, upto)
  for _ = 1, 256 do
    local first = redis.call('ZRANGE', index, 0, 0)
    if #first == 0 then
      return ''
    end
    local head = redis.call('ZRANGE', prefix .. first[1], 0, 0, 'WITHSCORES')
    if #head > 0 then
      return head[2]
    end
    redis.call('ZREM', index, first[1])
  end
  return redis.call('ZCARD', index) > 0 and upto or ''
end

-- The largest record a claim answers (and so records as fired, below): a larger one
-- (a large payload) is held beside its definition and sent back; ack.lua decides for it.
local REC_SWAP_MAX = 1024

-- The last fire of a one-shot fire due `due` delivered at `at` (ms), attempt 1.
local function rec_claimed_fire(due, at)
  return {HIST_FIRE, math.max(due, at), due, 1, HIST_OUTCOMES.delivered}
end

-- Implied fires. A claim writes nothing to a one-shot timer whose record it answers
-- (from its own key, up to REC_SWAP_MAX bytes, not a parked fire: claim.lua), nor does
-- its acknowledgement (landed.lua): the record stays as it was, scheduled, and is *read*
-- as fired (rec_view) once its id left its slice: while its member `v:due:id` is in the
-- in-flight set, the fire is under way (it is delivered whatever comes, commands are
-- refused, a checkpoint reads the timer as before the claim); once it is in none of the
-- slice, the in-flight set and its application's parked set, it was delivered. A
-- scheduled one-shot timer is otherwise always in one of them (its id in the slice of its
-- due's minute or in a parked set, or its member in flight: apply.lua), so the rule
-- holds without a write per fire. Such a fire's last fire reads as released at its due
-- (a claim takes fires ahead of it), or at its claim when the claim was late (the
-- late-claim sets below). Every reader goes through rec_raw, so every script
-- sees what a written done record would say; the first write of the timer writes it so
-- (and it then expires after the retention). The checkpoint deletes the records landed
-- more than the retention ago (checkpoint.lua, in the order of the fired queue `BASE
-- firedq`, one entry per landed.lua call). A parked fire's in-flight score is its due
-- plus 0.5: its record is not read as fired while in flight (ack.lua writes it).

-- Fire entry `fire` (a history entry) becomes the last fire of raw record `a` (a
-- scheduled one-shot timer has none yet: the fields before it are filled with false).
local function rec_set_last_fire(a, fire)
  for i = #a + 1, REC_LX - 1 do
    a[i] = false
  end
  a[REC_LX] = cmsgpack.pack(fire)
end

-- Raw record `a` (packed `s`) of one-shot timer `id` read as what its fire made it:
-- fired (its last fire the delivered one) when its fire was taken by a claim as above;
-- else `a`.
local function rec_view(id, a, s)
  if a[REC_ST] ~= 1 or a[REC_K] or not a[REC_DUE] then
    return a
  end
  local due = a[REC_DUE]
  local minute = string.format('%d', math.floor(due / 60000))
  if redis.call('ZSCORE', REC.base .. 's:' .. minute, id) then
    return a
  end
  local f = redis.call('ZSCORE', REC.base .. 'inflight', string.format('%d:%d:%s', a[REC_V], due, id))
  if f and (#s > REC_SWAP_MAX or string.find(f, '.', 1, true)) then
    return a
  end
  if not f and redis.call('ZCARD', REC.base .. 'pk') > 0
    and redis.call('ZSCORE', REC.base .. 'pk:' .. (rec_app_raw(a) or ''), id) then
    return a
  end
  a[REC_ST] = REC_STATE_CODE.fired
  rec_set_last_fire(a, rec_claimed_fire(due, rec_late_claim(minute, due, id) or due))
  return a
end

-- The fire path's fast read of timer `id`: its packed array (positions above; the state
-- as its code, a one-shot kind as false) and where it is ('own' or 'bucket'); nil when
-- Redis has no record of it. No field table is built. From its own key, the packed
-- record follows (third value). `own`: the own key's value when the caller read it
-- already (false: none), so it is not read twice. `stored`: the record as stored, not
-- as its fire made it (rec_view; only the claim, which takes fires, reads it so).
local function rec_raw(id, own, stored)
  local s = own
  if s == nil then
    s = redis.call('GET', REC.base .. 't:' .. id)
  end
  if s then
    local a = cmsgpack.unpack(s)
    if stored then
      return a, 'own', s
    end
    return rec_view(id, a, s), 'own', s
  end
  s = redis.call('HGET', REC.bucket, id)
  if s then
    return cmsgpack.unpack(s), 'bucket'
  end
  return nil
end

-- Live timer `id` of application `app` (raw record `a` found at `where`, rec_raw) is
-- done in state `st` after fire `fire` (a history entry, or nil): its own key,
-- unchanged but for the state and the fire, expiring after the retention.
local function rec_done_raw(id, app, a, where, st, fire)
  if where == 'bucket' then
    redis.call('HDEL', REC.bucket, id)
    rec_count(math.floor(a[REC_DUE] / 60000), -1)
  end
  rec_tally(app, REC_STATES[a[REC_ST]], st)
  a[REC_ST] = REC_STATE_CODE[st]
  if fire then
    rec_set_last_fire(a, fire)
  end
  redis.call('SET', REC.base .. 't:' .. id, cmsgpack.pack(a), 'PX', REC.retention)
end

-- The MessagePack unsigned integer whose first byte is `b` (a positive fixint, or a
-- uint of 1, 2, 4 or 8 bytes after its marker): its bytes; nil for anything else.
local function rec_uint_width(b)
  return (b < 0x80 and 1) or (b == 0xcc and 2) or (b == 0xcd and 3) or (b == 0xce and 5)
    or (b == 0xcf and 9) or nil
end

-- Whether one-shot timer `id` at version `v` has its fire due `due` claimed and not yet
-- acknowledged (`inflight`: the partition's in-flight set): a record read as fired then
-- tells of a fire under way (rec_view).
local function rec_under_way(inflight, id, v, due)
  return redis.call('ZSCORE', inflight, string.format('%d:%d:%s', v, due, id)) ~= false
end

-- The fields of timer `id` from what rec_raw answered for it (nil when Redis has none).
-- Marks: `_own` (a live timer's own key), `_done` (a done timer's key), `_bucket` (a
-- bucket field, due in minute `_m`).
local function rec_from_raw(id, a, where)
  if not a then
    return nil
  end
  local t = rec_fields(id, a)
  t._st0 = t.st
  if where == 'bucket' then
    t._bucket, t._m = true, math.floor(tonumber(t.due) / 60000)
  elseif REC_LIVE[t.st] then
    t._own = true
  else
    t._done = true
  end
  return t
end

-- The fields of timer `id` (nil when Redis has none).
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

-- Writes timer `id` (fields `t`, strings, with rec_get's marks) where it belongs: a
-- scheduled one-shot timer due after the promoted minute into its bucket, any other into
-- its own key (a done one expiring after the retention). A new timer carries none of
-- the marks.
local function rec_put(id, t)
  rec_tally(t.a, t._st0, t.st)
  t._st0 = t.st
  local tkey = REC.base .. 't:' .. id
  local due = tonumber(t.due or '')
  local minute = due and math.floor(due / 60000)
  if t.st == 'scheduled' and t.k ~= 'c' and minute and minute > rec_meta().pm then
    redis.call('HSET', REC.bucket, id, rec_pack(id, t))
    if t._own or t._done then
      redis.call('DEL', tkey)
      t._own, t._done = nil, nil
    end
    if not t._bucket then
      t._bucket = true
      rec_count(minute, 1)
    elseif t._m ~= minute then
      rec_count(t._m, -1)
      rec_count(minute, 1)
    end
    t._m = minute
    return
  end
  if t._bucket then
    redis.call('HDEL', REC.bucket, id)
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

-- The header of a MessagePack string of `n` bytes, and a non-negative integer (below
-- 65536), as cmsgpack writes them.
local function rec_mp_hdr(n)
  if n < 32 then
    return string.char(160 + n)
  elseif n < 256 then
    return '\217' .. string.char(n)
  elseif n < 65536 then
    return '\218' .. string.char(math.floor(n / 256), n % 256)
  end
  return '\219' .. string.char(math.floor(n / 16777216), math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256)
end
local function rec_mp_uint(n)
  if n < 128 then
    return string.char(n)
  elseif n < 256 then
    return '\204' .. string.char(n)
  end
  return '\205' .. string.char(math.floor(n / 256), n % 256)
end

-- Writes new scheduled one-shot timer `id` of application `app` (due `due` ms), whose
-- record the owner packed (src/store/fresh.rs): `head`, then definition `d` as rec_pack
-- writes it (its prefix numbered), then `tail`. What rec_put does for such a timer,
-- without a field table; the record in one concatenation (each string built on the way
-- would be allocated and hashed).
local function rec_put_fresh(id, due, app, head, d, tail)
  local x = rec_def_pack(d)
  if type(x) == 'table' then
    x = head .. '\146' .. rec_mp_uint(x[1]) .. rec_mp_hdr(#x[2]) .. x[2] .. tail
  else
    x = head .. rec_mp_hdr(#x) .. x .. tail
  end
  rec_tally(app, nil, 'scheduled')
  local minute = math.floor(due / 60000)
  if minute > rec_meta().pm then
    redis.call('HSET', REC.bucket, id, x)
    rec_count(minute, 1)
  else
    redis.call('SET', REC.base .. 't:' .. id, x)
  end
end

-- Stores the record count and the live counts that moved (call before returning).
local function rec_flush()
  -- (Numbers passed to redis.call as integer strings: Redis would printf them as %.17g.)
  local int = function(x) return string.format('%d', x) end
  for app, n in pairs(REC.moved) do
    if n ~= 0 then
      redis.call('HINCRBY', REC.apps, app, int(n))
    end
  end
  REC.moved = {}
  for app, per in pairs(REC.tally) do
    for st, n in pairs(per) do
      if n ~= 0 then
        redis.call('HINCRBY', REC.base .. 'ac', st .. ':' .. app, int(n))
      end
    end
  end
  REC.tally = {}
  for minute, n in pairs(REC.minutes) do
    local m = int(minute)
    if n ~= 0 and redis.call('HINCRBY', REC.base .. 'bm', m, int(n)) <= 0 then
      redis.call('HDEL', REC.base .. 'bm', m)
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
