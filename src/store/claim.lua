-- Claims the fires of a partition that are due up to a bound: moves them from their
-- minute slices into the in-flight set, in one atomic step, so a crash between claim and
-- delivery never loses them (whoever owns the partition next re-drives the in-flight set).
-- KEYS: 1 epoch, 2 slice index, 3 in-flight set, 4 cron index, 5 dirty set,
--       6 checkpoint sequence, 7 live timers per application, 8 replay fence,
--       9 parked index (applications with parked members, by their first due; the
--       parked members of application APP are in zset KEYS[9] .. ':' .. APP)
-- ARGV: 1 expected epoch, 2 claim fires due <= this ms, 3 max members read, 4 slice key prefix,
--       5 the partition's key prefix (timer records, record.lua), 6 occurrences due
--       before this ms were missed, 7 now ms, 8 retention ms, 9 the oldest checkpoint
--       sequence Redis may hold, 10 most bytes of definitions to answer, 11.. pairs of
--       application and the most fires of it to take (its quota; others: no quota)
-- Returns an array (not cmsgpack: 2,000 instructions per fire less) {next due ms or '',
-- vanished, full, n, k, member, definition, record, ..., then n pairs of application
-- and parked members due left, then k pairs of definition prefix number and prefix},
-- or {'fenced'}; a member is the in-flight member "version:due:id"; `record` is the
-- packed record of a one-shot timer read from its own key (up to REC_SWAP_MAX bytes):
-- the claim took the fire as fired without writing it (rec_view, place.lua; landed.lua
-- takes it out of flight), its `definition` '' (the record's, src/store/record.rs, its
-- prefix among the k pairs: Redis neither joins nor sends it twice); '' for others;
-- `vanished` counts slice members whose timer record was gone (evicted, or deleted
-- outside ktimer): lost fires; `full` is '1' when the claim stopped at its limits.
-- Parking (a paced application's backlog stays in Redis, not in the trigger's memory):
-- a paced application's pending fires are in its parked set (apply.lua; scored by due,
-- members as in the slices), where a due slice member whose application's quota is used
-- up moves too; a claim takes each application's due parked members first, oldest
-- first, up to its quota (or the limit), in half of its room, validated as if taken from
-- their slice (one-shot: in the minute of the score). The next due time counts the parked
-- sets' first members not yet due; their due ones are counted in the reply instead (the
-- trigger claims them as its quota frees).
-- Members of timers paused, cancelled or changed (older version, or a one-shot timer now
-- due in another minute) are dropped; cron members obey max fires and misfire (misfire.lua).
-- A member the replay fence covers (a replayed command whose fire was acknowledged before
-- Redis lost the partition) is dropped, its one-shot timer fired.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced'}
end
-- Redis back from data older than that: its slices hold fires acknowledged since.
-- Nothing is claimed; the owner rebuilds the partition.
if tonumber(redis.call('GET', KEYS[6]) or '0') < tonumber(ARGV[9]) then
  return {'fenced'}
end
rec_init(ARGV[5], ARGV[8], KEYS[7])
local upto, now = tonumber(ARGV[2]), tonumber(ARGV[7])
-- A fire claimed more than LATE ms after its due (a backlog) is noted, its look-up then
-- reads released at the claim (rec_late_note, late.lua); one claimed earlier reads
-- released at its due (rec_view). Neither is written. `late`: due minute (a number) to
-- the key of the first fire taken late in it.
local LATE, late = 1000, {}
-- Notes that one-shot fire `id` due `due` of minute `m` (numbers) was claimed late.
local function late_claim(m, due, id)
  late[m] = late[m] or rec_late_key(due, id)
end
local limit, missed_before = tonumber(ARGV[3]), tonumber(ARGV[6])
-- `from_park` is set while parked members are taken (a parked cron occurrence was on time
-- when it was parked: only its delivery is paced, so its misfire policy does not apply);
-- the definitions' bytes left to answer; members read; members whose record was gone.
local from_park, bytes_left, n, vanished = false, tonumber(ARGV[10]), 0, 0
-- The reply (its head filled in at the end, the fires, the parked counts, the prefixes),
-- the definition prefixes of the records answered (numbers, record.lua), and the
-- (score, member) pairs to add to the in-flight set.
local out, prefixes, flight = {'', '0', '0', '0', '0'}, {}, {}
-- Quotas left per application; (score, member) pairs to park per application.
local quota, parked = {}, {}
for i = 11, #ARGV, 2 do
  quota[ARGV[i]] = tonumber(ARGV[i + 1])
end
-- Whether any application is paced (else no fire's application is looked at).
local pacing = next(quota) ~= nil

-- The quota left of `app`: its own, else the default (application '*'), else nil.
local function quota_of(app)
  if not app then
    return nil
  end
  local q = quota[app]
  if q == nil and quota['*'] then
    q = quota['*']
    quota[app] = q
  end
  return q
end

-- Whether a fire of `app` must be parked (its quota is used up).
local function over(app)
  local q = quota_of(app)
  return q ~= nil and q <= 0
end

-- Parks `member` (slice score `score`) of `app`.
local function park(app, score, member)
  local p = parked[app] or {}
  parked[app] = p
  p[#p + 1] = score
  p[#p + 1] = member
end

-- A fire of `app` was taken: one less in its quota.
local function took(app)
  if app and quota[app] then
    quota[app] = quota[app] - 1
  end
end

-- The replay fence a rebuild left (keys.rs replay_fence): the restored checkpoint's
-- applied offset and fire watermark.
local fence = redis.call('HMGET', KEYS[8], 'a', 'w')
local fence_a, fence_w = tonumber(fence[1]), tonumber(fence[2])

-- Whether in-flight member `m` (version `v`, a number; negative for an extra fire; due
-- `d`) was acknowledged before the rebuild: its command was applied when the
-- checkpoint's watermark was read, it was due by then, and it was not listed in flight.
local function acked_before(v, d, m)
  return fence_a ~= nil and math.abs(v) <= fence_a and d <= fence_w
    and redis.call('HEXISTS', KEYS[8], 'f:' .. m) == 0
end

-- Whether a valid cron member is delivered; counts it when it is (and writes `t`).
local function cron_take(t, due, id)
  local d = tonumber(due)
  -- (A late occurrence obeys its misfire policy.)
  local take = not fired_out(t)
    and (d >= missed_before or from_park or missed_fires(t, d, ARGV[7]))
  if take then
    t.n = string.format('%d', tonumber(t.n or '0') + 1)
    rec_put(id, t)
  elseif t.fin == due then
    -- The last occurrence of the schedule was dropped: nothing more will fire.
    complete(t, id, KEYS[4], KEYS[5])
  elseif t.lf then
    rec_put(id, t)
  end
  return take
end

-- The in-flight member of one-shot timer `id` at version `v`, due `due` (numbers), and
-- its in-flight score (the due as a string). An integer formatted costs a printf (so does
-- a score read): each version and due met is formatted once per call (`ints`).
local ints = {}
local function one_shot_flight(v, due, id)
  local vs, ds = ints[v] or string.format('%d', v), ints[due] or string.format('%d', due)
  ints[v], ints[due] = vs, ds
  return vs .. ':' .. ds .. ':' .. id, ds
end

-- Fires taken as fired per application (their counts move once per application), and the
-- application of each definition prefix met (number to name).
local claimed_n, app_by_dp = {}, {}

-- The lean take of one-shot member `member` of minute `m` whose own key `key` holds `s`
-- (the hot path: no application paced, no replay fence): reads the record's first six
-- fields and its definition's prefix number, and writes nothing (rec_view; a LATE claim
-- is noted, late_claim). Answers what take answers (the definition is the
-- record's: ''), nil when it does not fire, or false when the full take decides (no own
-- key, a record over REC_SWAP_MAX or with a last fire, a definition without a prefix).
assert(REC_V == 1 and REC_ST == 2 and REC_K == 4 and REC_DUE == 5 and REC_A == 6
  and REC_D == 7 and REC_LX == 10)
local function take_lean(member, m, s)
  local head = s and string.byte(s, 1)
  if not s or #s > REC_SWAP_MAX or head < 0x97 or head > 0x99 then
    return false
  end
  -- (unpack_limit: objects from a 0-based offset; answers the offset after them, or -1.)
  local od, v, st, _, k, due, app = cmsgpack.unpack_limit(s, 6, 1)
  if not (st == 1 and not k and due and due <= upto and math.floor(due / 60000) == m) then
    return nil
  end
  if od < 0 or string.byte(s, od + 1) ~= 0x92 then
    return false
  end
  local _, n = cmsgpack.unpack_limit(s, 1, od + 1)
  prefixes[n] = true
  if not app then
    app = app_by_dp[n] or rec_app_of(rec_dp_prefix(n))
    app_by_dp[n] = app
  end
  claimed_n[app] = (claimed_n[app] or 0) + 1
  local f, score = one_shot_flight(v, due, member)
  if now > due + LATE then
    late_claim(m, due, member)
  end
  return f, '', s, score
end

-- The in-flight member of slice member `member` of minute `m` (a number), the timer's
-- definition, its packed record (one-shot, from its own key; else '') and its in-flight
-- score when it fires, else nil (also when it was parked: with `score`, its score in a
-- parked set; nil: read from a slice).
local function take(member, m, score)
  if string.byte(member, 1) ~= 1 then
    -- A one-shot timer: read raw, its own key once.
    local own
    if not pacing and not fence_a then
      own = redis.call('GET', REC.base .. 't:' .. member)
      local f, def, rec, fscore = take_lean(member, m, own)
      if f ~= false then
        return f, def, rec, fscore
      end
    end
    local a, where, s = rec_raw(member, own, true)
    if not a then
      vanished = vanished + 1
      return nil
    end
    local app = pacing and rec_app_raw(a)
    local due = a[REC_DUE]
    if app and over(app) then
      park(app, score or string.format('%d', due or m * 60000), member)
      return nil
    end
    if due and a[REC_ST] == 1 and not a[REC_K] and due <= upto and math.floor(due / 60000) == m then
      -- (Integers formatted as such: Lua's own number to string is a %.14g printf.)
      local f, fscore = one_shot_flight(a[REC_V], due, member)
      if acked_before(tonumber(a[REC_V]), due, f) then
        if a[REC_P] then
          redis.call('ZADD', KEYS[5], 'NX', 'inf', member)
        end
        rec_done_raw(member, app or rec_app_raw(a), a, where, 'fired', nil)
        return nil
      end
      if app then
        took(app)
      end
      -- Taken as fired (rec_view; a parked fire, which may wait for its pace, stays
      -- scheduled: take_all marks its in-flight score).
      if s and #s <= REC_SWAP_MAX and not from_park then
        local d = a[REC_D]
        if type(d) == 'table' then
          prefixes[d[1]] = true
        end
        app = app or rec_app_raw(a)
        claimed_n[app] = (claimed_n[app] or 0) + 1
        if now > due + LATE then
          late_claim(m, due, member)
        end
        return f, '', s, fscore
      end
      return f, rec_def(a[REC_D]), '', fscore
    end
    return nil
  end
  local c1 = string.find(member, ':', 2, true)
  local c2 = string.find(member, ':', c1 + 1, true)
  local ver = string.sub(member, 2, c1 - 1)
  local due = string.sub(member, c1 + 1, c2 - 1)
  local id = string.sub(member, c2 + 1)
  if acked_before(tonumber(ver), tonumber(due), string.sub(member, 2)) then
    return nil
  end
  if string.byte(ver, 1) == 45 then
    -- An extra fire (FIRE_NOW): delivered whatever the timer's state, while Redis holds it.
    local a = rec_raw(id)
    if a and a[REC_D] then
      local app = pacing and rec_app_raw(a)
      if app and over(app) then
        park(app, score or due, member)
        return nil
      end
      if app then
        took(app)
      end
      return string.sub(member, 2), rec_def(a[REC_D]), '', due
    end
    return nil
  end
  local t = rec_get(id)
  if not t then
    vanished = vanished + 1
    return nil
  end
  if pacing and t.v == ver and t.st == 'scheduled' and over(t.a) then
    park(t.a, score or due, member)
    return nil
  end
  if t.v == ver and t.st == 'scheduled' and t.k == 'c' and cron_take(t, due, id) then
    if pacing then
      took(t.a)
    end
    return string.sub(member, 2), t.d, '', due
  end
  return nil
end

-- Takes the members of `items` until the limits: the first members of the slice of minute
-- `m` (a number; without scores, still in it), or, with m nil, (member, score) pairs read
-- from parked set `key`, removed from it (those left over go back). Answers how many it
-- went through (the caller removes them from the slice by rank: take never changes one).
local function take_all(items, key, m)
  local step = m and 1 or 2
  for i = 1, #items, step do
    if n >= limit or bytes_left <= 0 then
      for j = i, m and 0 or #items, 2 do
        redis.call('ZADD', key, items[j + 1], items[j])
      end
      return (i - 1) / step
    end
    n = n + 1
    local score = items[i + step - 1]
    local member, def, rec, fscore = take(items[i], m or math.floor(tonumber(score) / 60000),
      not m and score or nil)
    if member then
      bytes_left = bytes_left - #def - #rec
      -- (A parked fire's score is its due plus 0.5: not taken as fired, rec_view.)
      flight[#flight + 1] = from_park and fscore .. '.5' or fscore
      flight[#flight + 1] = member
      out[#out + 1] = member
      out[#out + 1] = def
      out[#out + 1] = rec
    end
  end
  return #items / step
end

-- Parked members first (due before what the slices hold of their application), in at
-- most half of the claim's room: every claim reads the slices too (other applications).
local slice_bytes, slice_n = math.floor(bytes_left / 2), math.floor(limit / 2)
bytes_left, limit = bytes_left - slice_bytes, limit - slice_n
for _, app in ipairs(redis.call('ZRANGE', KEYS[9], 0, -1)) do
  local pkey = KEYS[9] .. ':' .. app
  local q = math.min(quota_of(app) or limit, limit - n)
  if q > 0 and bytes_left > 0 then
    local items = redis.call('ZRANGEBYSCORE', pkey, '-inf', ARGV[2], 'WITHSCORES', 'LIMIT', 0, q)
    if #items > 0 then
      redis.call('ZREMRANGEBYRANK', pkey, 0, #items / 2 - 1)
    end
    from_park = true
    take_all(items, pkey, nil)
    from_park = false
  end
  local head = redis.call('ZRANGE', pkey, 0, 0, 'WITHSCORES')
  if #head > 0 then
    redis.call('ZADD', KEYS[9], head[2], app)
  else
    redis.call('ZREM', KEYS[9], app)
  end
end
local parked_full = n >= limit or bytes_left <= 0 -- (parked fires left at its half: full)
bytes_left, limit = bytes_left + slice_bytes, limit + slice_n
local minutes = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', math.floor(upto / 60000))
for _, m in ipairs(minutes) do
  if n >= limit or bytes_left <= 0 then
    break
  end
  local skey = ARGV[4] .. m
  -- Without scores: each one is a %.17g printf in Redis; take knows the due.
  local items = redis.call('ZRANGEBYSCORE', skey, '-inf', ARGV[2], 'LIMIT', 0, limit - n)
  -- One removal per slice and one ZADD per call, not one per member (a call from Lua
  -- costs about as much as the work it does).
  -- The members gone through are the slice's first ones: removed by rank, in one call.
  local through = take_all(items, skey, tonumber(m))
  if through > 0 then
    redis.call('ZREMRANGEBYRANK', skey, 0, through - 1)
  end
  if redis.call('EXISTS', skey) == 0 then
    redis.call('ZREM', KEYS[2], m)
  end
end
for app, p in pairs(parked) do
  local pkey = KEYS[9] .. ':' .. app
  for i = 1, #p, 1000 do
    redis.call('ZADD', pkey, unpack(p, i, math.min(i + 999, #p)))
  end
  redis.call('ZADD', KEYS[9], 'LT', p[1], app)
end
for i = 1, #flight, 1000 do
  redis.call('ZADD', KEYS[3], unpack(flight, i, math.min(i + 999, #flight)))
end
rec_late_note(late, ARGV[7])
local next_due = rec_slice_next(KEYS[2], ARGV[4], ARGV[2])
for app, k in pairs(claimed_n) do
  rec_tally(app, 'scheduled', 'fired', k)
end
rec_flush()
out[2] = tostring(vanished)
out[3] = (parked_full or n >= limit or bytes_left <= 0) and '1' or '0'
local apps = 0
for _, app in ipairs(redis.call('ZRANGE', KEYS[9], 0, -1)) do
  local pkey = KEYS[9] .. ':' .. app
  local due = redis.call('ZCOUNT', pkey, '-inf', ARGV[2])
  if due > 0 then
    apps = apps + 1
    out[#out + 1] = app
    out[#out + 1] = tostring(due)
  end
  local later = redis.call('ZRANGEBYSCORE', pkey, '(' .. ARGV[2], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #later > 0 and (next_due == '' or tonumber(later[2]) < tonumber(next_due)) then
    next_due = later[2]
  end
end
out[1] = next_due
out[4] = tostring(apps)
local k = 0
for n in pairs(prefixes) do
  k = k + 1
  out[#out + 1] = string.format('%d', n)
  out[#out + 1] = rec_dp_prefix(n)
end
out[5] = string.format('%d', k)
return out
