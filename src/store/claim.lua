-- Claims the fires of a partition that are due up to a bound: moves them from their
-- minute slices into the in-flight set, in one atomic step, so a crash between claim and
-- delivery never loses them (whoever owns the partition next re-drives the in-flight set).
-- KEYS: 1 epoch, 2 slice index, 3 in-flight set, 4 cron index, 5 dirty set,
--       6 checkpoint sequence, 7 live timers per application
-- ARGV: 1 expected epoch, 2 claim fires due <= this ms, 3 max fires, 4 slice key prefix,
--       5 timer key prefix, 6 occurrences due before this ms were missed, 7 now ms,
--       8 retention ms, 9 the oldest checkpoint sequence Redis may hold
-- Returns {next due ms or '', member, definition, member, definition, ...}, or {'fenced'}.
-- Members of timers that were paused, cancelled or changed (older version) are dropped.
-- Cron members also obey the timer's maximum number of fires and its misfire policy
-- (misfire.lua, prepended).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced'}
end
-- Redis back from data older than that: its slices hold fires acknowledged since.
-- Nothing is claimed; the owner rebuilds the partition.
if tonumber(redis.call('GET', KEYS[6]) or '0') < tonumber(ARGV[9]) then
  return {'fenced'}
end
local upto = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local missed_before = tonumber(ARGV[6])
local out = {''}
local n = 0
-- (score, member) pairs to add to the in-flight set.
local flight = {}

-- Whether a valid cron member is delivered; counts it when it is.
local function cron_take(tkey, t, due, id)
  local d = tonumber(due)
  local take
  if t[6] and tonumber(t[5] or '0') >= tonumber(t[6]) then
    take = false
  elseif d < missed_before then
    take = missed_fires(tkey, t, d, ARGV[7])
  else
    take = true
  end
  if take then
    redis.call('HINCRBY', tkey, 'n', 1)
  elseif t[9] == due then
    -- The last occurrence of the schedule was dropped: nothing more will fire.
    complete(tkey, id, ARGV[8], KEYS[4], KEYS[5], KEYS[7])
  end
  return take
end

local minutes = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', math.floor(upto / 60000))
for _, m in ipairs(minutes) do
  local skey = ARGV[4] .. m
  local items = redis.call('ZRANGEBYSCORE', skey, '-inf', ARGV[2], 'LIMIT', 0, limit - n)
  -- One ZREM per slice and one ZADD per call, not one per member (a call from Lua costs
  -- about as much as the work it does).
  for i = 1, #items, 1000 do
    redis.call('ZREM', skey, unpack(items, i, math.min(i + 999, #items)))
  end
  for _, member in ipairs(items) do
    n = n + 1
    local c1 = string.find(member, ':', 1, true)
    local c2 = string.find(member, ':', c1 + 1, true)
    local ver = string.sub(member, 1, c1 - 1)
    local due = string.sub(member, c1 + 1, c2 - 1)
    local id = string.sub(member, c2 + 1)
    local tkey = ARGV[5] .. id
    local t = redis.call('HMGET', tkey, unpack(TIMER_FIELDS))
    if t[1] == ver and t[2] == 'scheduled' and (t[4] ~= 'c' or cron_take(tkey, t, due, id)) then
      flight[#flight + 1] = due
      flight[#flight + 1] = member
      out[#out + 1] = member
      out[#out + 1] = t[3]
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
return out
