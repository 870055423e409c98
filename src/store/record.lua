-- Timer records, prepended to every script that reads or writes timers (one source).
-- A live timer (scheduled or paused) is one field of a bucket hash `BASE r:B` (field: the
-- timer id; value: its fields packed with cmsgpack in the order of REC_FIELDS), so a
-- pending timer costs a few dozen bytes instead of a key of its own. Buckets grow by
-- linear hashing (`BASE rb`: level L, split pointer s, live records n): on average a
-- bucket holds at most 2 * REC_LOAD records, few enough for Redis's compact (listpack)
-- hash encoding. A timer that is done (fired, cancelled, completed, dead_lettered) is a
-- hash of its own, `BASE t:ID`, with the same fields, expiring after the retention: a
-- look-up and the duplicate check still find it.
-- Invariants:
-- * a timer is in one place at a time: its bucket while live, its own hash once done;
-- * a record's bucket is bucket_of(id) under the meta in Redis: a split writes the meta
--   in the same step that moves the records;
-- * rec_get answers the fields as strings, as HMGET would (integers in decimal).
-- Every script that calls rec_put calls rec_flush before it returns (the record count;
-- should it be lost, only the next split comes later).
local REC_FIELDS = {'v', 'st', 'rq', 'k', 'due', 'a', 'd', 'p', 'sc', 'mp', 'mx', 'n', 'hz',
  'lst', 'fin', 'lf', 'lfd', 'last', 'dl', 'dlr', 'dlx'}
-- Fields packed as integers when they hold one (the others stay strings).
local REC_NUMERIC = {v = true, due = true, p = true, mx = true, n = true, hz = true,
  lst = true, fin = true, lf = true, lfd = true, last = true, dl = true, dlr = true}
local REC_STATES = {'scheduled', 'paused', 'fired', 'cancelled', 'completed', 'dead_lettered'}
local REC_STATE_CODE = {}
for i, s in ipairs(REC_STATES) do
  REC_STATE_CODE[s] = i
end
local REC_LIVE = {scheduled = true, paused = true}
-- Buckets at level 0, and the records per bucket that make the next split.
local REC_BUCKETS, REC_LOAD = 8, 40
-- base: the partition's key prefix `PREFIX:{topic:p}:`; meta: read once per call.
local REC = {base = nil, retention = nil, meta = nil, counted = false}

-- Sets the partition (`base`, its key prefix) and the retention of done timers (ms).
local function rec_init(base, retention)
  REC.base, REC.retention = base, retention
end

local function rec_hash(id)
  return tonumber(string.sub(redis.sha1hex(id), 1, 8), 16)
end

local function rec_meta()
  if not REC.meta then
    local m = redis.call('HMGET', REC.base .. 'rb', 'L', 's', 'n')
    REC.meta = {L = tonumber(m[1] or '0'), s = tonumber(m[2] or '0'), n = tonumber(m[3] or '0')}
  end
  return REC.meta
end

-- The bucket key of a record whose id hashes to `h`.
local function rec_bucket(h)
  local m = rec_meta()
  local size = REC_BUCKETS * 2 ^ m.L
  local b = h % size
  if b < m.s then
    b = h % (2 * size)
  end
  return REC.base .. 'r:' .. string.format('%d', b)
end

local function rec_pack(id, t)
  local a, last = {}, 0
  for i, f in ipairs(REC_FIELDS) do
    local v = t[f]
    if v == nil then
      a[i] = false
    else
      if f == 'st' then
        v = REC_STATE_CODE[v] or v
      elseif f == 'rq' and v == id then
        v = true
      elseif REC_NUMERIC[f] then
        local n = tonumber(v)
        if n and string.format('%d', n) == tostring(v) and math.abs(n) < 2 ^ 53 then
          v = n
        end
      end
      a[i] = v
      last = i
    end
  end
  for i = last + 1, #REC_FIELDS do
    a[i] = nil
  end
  return cmsgpack.pack(a)
end

local function rec_unpack(id, s)
  local a = cmsgpack.unpack(s)
  local t = {}
  for i, f in ipairs(REC_FIELDS) do
    local v = a[i]
    if v ~= nil and v ~= false then
      if v == true then
        v = id
      elseif f == 'st' and type(v) == 'number' then
        v = REC_STATES[v]
      elseif type(v) == 'number' then
        v = string.format('%d', v)
      end
      t[f] = v
    end
  end
  return t
end

-- The fields of timer `id`, or nil when Redis has none. `_live` marks a record read from
-- its bucket, `_done` one read from its own hash.
local function rec_get(id)
  local s = redis.call('HGET', rec_bucket(rec_hash(id)), id)
  if s then
    local t = rec_unpack(id, s)
    t._live = true
    return t
  end
  local f = redis.call('HGETALL', REC.base .. 't:' .. id)
  if #f == 0 then
    return nil
  end
  local t = {_done = true}
  for i = 1, #f, 2 do
    t[f[i]] = f[i + 1]
  end
  return t
end

-- Splits the next bucket when the records outgrow the buckets (linear hashing).
local function rec_split()
  local m = rec_meta()
  local size = REC_BUCKETS * 2 ^ m.L
  if m.n <= REC_LOAD * (size + m.s) then
    return
  end
  local from = m.s
  local to = from + size
  local fkey = REC.base .. 'r:' .. string.format('%d', from)
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
    redis.call('HSET', REC.base .. 'r:' .. string.format('%d', to), unpack(moved))
    redis.call('HDEL', fkey, unpack(gone))
  end
  m.s = from + 1
  if m.s == size then
    m.L, m.s = m.L + 1, 0
  end
  redis.call('HSET', REC.base .. 'rb', 'L', m.L, 's', m.s, 'n', m.n)
  REC.counted = false
end

-- Writes timer `id` (fields `t`, strings or integers): into its bucket while live, as a
-- hash of its own expiring after the retention once done.
local function rec_put(id, t)
  local tkey = REC.base .. 't:' .. id
  if REC_LIVE[t.st] then
    if t._done then
      redis.call('DEL', tkey)
      t._done = nil
    end
    redis.call('HSET', rec_bucket(rec_hash(id)), id, rec_pack(id, t))
    if not t._live then
      t._live = true
      local m = rec_meta()
      m.n = m.n + 1
      REC.counted = true
      rec_split()
    end
    return
  end
  if t._live then
    redis.call('HDEL', rec_bucket(rec_hash(id)), id)
    t._live = nil
    local m = rec_meta()
    m.n = m.n - 1
    REC.counted = true
  end
  local args = {}
  for _, f in ipairs(REC_FIELDS) do
    if t[f] then
      args[#args + 1] = f
      args[#args + 1] = t[f]
    end
  end
  if t._done then
    redis.call('DEL', tkey)
  end
  redis.call('HSET', tkey, unpack(args))
  redis.call('PEXPIRE', tkey, REC.retention)
  t._done = true
end

-- Deletes timer `id` wherever it is.
local function rec_del(id, t)
  if t and t._live then
    redis.call('HDEL', rec_bucket(rec_hash(id)), id)
    local m = rec_meta()
    m.n = m.n - 1
    REC.counted = true
  end
  redis.call('DEL', REC.base .. 't:' .. id)
end

-- Stores the record count when it moved (call before returning).
local function rec_flush()
  if REC.counted then
    redis.call('HSET', REC.base .. 'rb', 'n', REC.meta.n)
    REC.counted = false
  end
end
