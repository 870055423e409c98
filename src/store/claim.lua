-- Claims the fires of a partition that are due up to a bound: moves them from their
-- minute slices into the in-flight set, in one atomic step, so a crash between claim and
-- delivery never loses them (whoever owns the partition next re-drives the in-flight set).
-- KEYS: 1 epoch, 2 slice index, 3 in-flight set, 4 cron index, 5 dirty set,
--       6 checkpoint sequence, 7 live timers per application, 8 replay fence
-- ARGV: 1 expected epoch, 2 claim fires due <= this ms, 3 max fires, 4 slice key prefix,
--       5 the partition's key prefix (timer records, record.lua), 6 occurrences due
--       before this ms were missed, 7 now ms, 8 retention ms, 9 the oldest checkpoint
--       sequence Redis may hold
-- Returns {next due ms or '', vanished, member, definition, member, definition, ...}, or
-- {'fenced'}; a member is the in-flight member "version:due:id"; `vanished` counts slice
-- members whose timer record was gone (evicted, or deleted outside ktimer): lost fires.
-- Members of timers that were paused, cancelled or changed (older version, or a one-shot
-- timer now due in another minute) are dropped.
-- Cron members also obey the timer's maximum number of fires and its misfire policy
-- (misfire.lua, prepended).
-- A member the replay fence covers (a command replayed after a rebuild, its fire
-- acknowledged before Redis lost the partition) is dropped, its one-shot timer fired.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced'}
end
-- Redis back from data older than that: its slices hold fires acknowledged since.
-- Nothing is claimed; the owner rebuilds the partition.
if tonumber(redis.call('GET', KEYS[6]) or '0') < tonumber(ARGV[9]) then
  return {'fenced'}
end
rec_init(ARGV[5], ARGV[8], KEYS[7])
local upto = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local missed_before = tonumber(ARGV[6])
local out = {'', '0'}
local n = 0
local vanished = 0
-- (score, member) pairs to add to the in-flight set.
local flight = {}

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
  local take
  if t.mx and tonumber(t.n or '0') >= tonumber(t.mx) then
    take = false
  elseif d < missed_before then
    take = missed_fires(t, d, ARGV[7])
  else
    take = true
  end
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

-- The in-flight member of slice member `member` of minute `m` and the timer's definition
-- when it fires, else nil.
local function take(member, m)
  if string.byte(member, 1) ~= 1 then
    -- A one-shot timer: read raw (the hot path).
    local a, where, h = rec_raw(member)
    if not a then
      vanished = vanished + 1
      return nil
    end
    local due = a[REC_DUE]
    if due and a[REC_ST] == 1 and not a[REC_K] and due <= upto and math.floor(due / 60000) == tonumber(m) then
      local f = a[REC_V] .. ':' .. due .. ':' .. member
      if acked_before(tonumber(a[REC_V]), due, f) then
        if a[REC_P] then
          redis.call('ZADD', KEYS[5], 'NX', 'inf', member)
        end
        rec_done_raw(member, rec_app_raw(a), a, where, h, 'fired', nil)
        return nil
      end
      return f, rec_def(a[REC_D])
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
      return string.sub(member, 2), rec_def(a[REC_D])
    end
    return nil
  end
  local t = rec_get(id)
  if not t then
    vanished = vanished + 1
    return nil
  end
  if t.v == ver and t.st == 'scheduled' and t.k == 'c' and cron_take(t, due, id) then
    return string.sub(member, 2), t.d
  end
  return nil
end

local minutes = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', math.floor(upto / 60000))
for _, m in ipairs(minutes) do
  local skey = ARGV[4] .. m
  local items = redis.call('ZRANGEBYSCORE', skey, '-inf', ARGV[2], 'WITHSCORES', 'LIMIT', 0, limit - n)
  -- One removal per slice and one ZADD per call, not one per member (a call from Lua
  -- costs about as much as the work it does).
  -- The members read are the slice's first ones: removed by rank, in one call.
  if #items > 0 then
    redis.call('ZREMRANGEBYRANK', skey, 0, #items / 2 - 1)
  end
  for i = 1, #items, 2 do
    n = n + 1
    local member, def = take(items[i], m)
    if member then
      flight[#flight + 1] = items[i + 1]
      flight[#flight + 1] = member
      out[#out + 1] = member
      out[#out + 1] = def
    end
  end
  if redis.call('EXISTS', skey) == 0 then
    redis.call('ZREM', KEYS[2], m)
  end
  if n >= limit then
    break
  end
end
for i = 1, #flight, 1000 do
  redis.call('ZADD', KEYS[3], unpack(flight, i, math.min(i + 999, #flight)))
end
-- The next due time: the first member of the first non-empty slice. Commands remove
-- the entries of the slices they empty, so empty entries are rare; should more than a
-- bounded number lead, the answer is 'look again now' rather than 'nothing is due'.
for i = 1, 257 do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #first == 0 then
    break
  end
  if i == 257 then
    out[1] = ARGV[2]
    break
  end
  local head = redis.call('ZRANGE', ARGV[4] .. first[1], 0, 0, 'WITHSCORES')
  if #head > 0 then
    out[1] = head[2]
    break
  end
  redis.call('ZREM', KEYS[2], first[1])
end
rec_flush()
out[2] = tostring(vanished)
return out
