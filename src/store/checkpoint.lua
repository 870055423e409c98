-- Takes one page of a partition's checkpoint: moves up to a number of timers from the
-- dirty set (changed since the last checkpoint) to the pending set, which keeps them
-- until their state records are confirmed in the state topic (a page lost with its
-- producer is taken again), and answers their fields. Also answers the fire watermark:
-- every fire due at or before it was acknowledged, except the in-flight members listed.
-- KEYS: 1 epoch, 2 dirty set, 3 pending set, 4 slice index, 5 in-flight set,
--       6 applied offset
-- ARGV: 1 expected epoch, 2 timer key prefix, 3 slice key prefix, 4 now ms, 5 most
--       timers per page, 6 most in-flight members listed
-- Returns {'fenced'}, or {left, acked through ms, applied offset, m, m in-flight members,
-- then per timer: id, n, n field/value pairs}; left is the number of timers still dirty
-- (a checkpoint is complete only with a page that leaves none); n = -1 is a tombstone
-- (the timer can never fire again).
-- Invariants:
-- * a timer that ended before any of its states was written owes no tombstone (field p
--   marks a timer whose state was written);
-- * the watermark is at most now, below the first pending slice member, and below the
--   first in-flight member not listed.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced'}
end
local TERMINAL = {fired = 1, completed = 1, cancelled = 1, dead_lettered = 1}
local want = tonumber(ARGV[5]) - redis.call('SCARD', KEYS[3])
if want > 0 then
  local ids = redis.call('SPOP', KEYS[2], want)
  for i = 1, #ids, 1000 do
    redis.call('SADD', KEYS[3], unpack(ids, i, math.min(i + 999, #ids)))
  end
end
local through = tonumber(ARGV[4])
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
local listed = tonumber(ARGV[6])
local flight = redis.call('ZRANGE', KEYS[5], 0, listed, 'WITHSCORES')
local m = math.min(#flight / 2, listed)
if #flight / 2 > listed then
  through = math.min(through, tonumber(flight[#flight]) - 1)
end
local out = {redis.call('SCARD', KEYS[2]), through, redis.call('GET', KEYS[6]) or '-1', m}
for i = 1, m do
  out[#out + 1] = flight[2 * i - 1]
end
for _, id in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local tkey = ARGV[2] .. id
  local h = redis.call('HGETALL', tkey)
  local st, p
  for i = 1, #h, 2 do
    if h[i] == 'st' then
      st = h[i + 1]
    elseif h[i] == 'p' then
      p = true
    end
  end
  if #h == 0 or (TERMINAL[st] and p) then
    out[#out + 1] = id
    out[#out + 1] = -1
  elseif not TERMINAL[st] then
    if not p then
      redis.call('HSET', tkey, 'p', 1)
      h[#h + 1] = 'p'
      h[#h + 1] = '1'
    end
    out[#out + 1] = id
    out[#out + 1] = #h / 2
    for i = 1, #h do
      out[#out + 1] = h[i]
    end
  end
end
return out
