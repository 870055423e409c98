-- Acknowledges delivered one-shot fires whose done record ktimer built (the fire path's
-- lean acknowledgement, src/store/done.rs): for each, the timer's own key must still hold
-- exactly the record the claim read (so nothing changed the timer since); then it is
-- replaced by the done record ktimer sent, expiring after the retention, its in-flight
-- member removed, and the timer leaves the deferred set (its state was never written) or
-- enters the dirty set scored REC_TOMB (it owes a tombstone, record.lua); its counts
-- move from scheduled to fired
-- (rec_tally, record.lua, prepended). No record is decoded here: Rust decided, Redis
-- compares and stores.
-- A fire whose key holds anything else (a timer changed, moved to a bucket, gone) is
-- answered back untouched: ktimer acknowledges it through ack.lua, which decides.
-- KEYS: 1 epoch, 2 in-flight set, 3 dirty set, 4 deferred (by first offset),
--       5 acknowledgement counter, 6 live timers per application
-- ARGV: 1 expected epoch, 2 the partition's key prefix, 3 retention ms, then groups of
--       fires of one application whose states were all written or all not: the
--       application, '1' when written (else ''), the number of fires n, then per fire 4
--       values: in-flight member, timer id, record read, done record
-- Returns {-1} when fenced, else {members removed, in-flight member per fire answered
-- back...}.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {-1}
end
redis.call('INCR', KEYS[5])
rec_init(ARGV[2], ARGV[3], KEYS[6])
local tprefix = ARGV[2] .. 't:'
-- Fires swapped per application (their counts move once per application).
local gone, dirty, undefer, back, fired = {}, {}, {}, {}, {}
local g = 4
while g <= #ARGV do
  local app, written, n = ARGV[g], ARGV[g + 1] == '1', tonumber(ARGV[g + 2])
  for i = g + 3, g + 4 * n - 1, 4 do
    local id = ARGV[i + 1]
    local key = tprefix .. id
    if redis.call('GET', key) == ARGV[i + 2] then
      redis.call('SET', key, ARGV[i + 3], 'PX', ARGV[3])
      gone[#gone + 1] = ARGV[i]
      fired[app] = (fired[app] or 0) + 1
      if written then
        dirty[#dirty + 1] = REC_TOMB
        dirty[#dirty + 1] = id
      else
        undefer[#undefer + 1] = id
      end
    else
      back[#back + 1] = ARGV[i]
    end
  end
  g = g + 3 + 4 * n
end
for app, k in pairs(fired) do
  rec_tally(app, 'scheduled', 'fired', k)
end
local n = 0
for i = 1, #gone, 1000 do
  n = n + redis.call('ZREM', KEYS[2], unpack(gone, i, math.min(i + 999, #gone)))
end
for i = 1, #dirty, 1000 do
  redis.call('ZADD', KEYS[3], 'NX', unpack(dirty, i, math.min(i + 999, #dirty)))
end
for i = 1, #undefer, 1000 do
  redis.call('ZREM', KEYS[4], unpack(undefer, i, math.min(i + 999, #undefer)))
end
rec_flush()
local out = {n}
for i = 1, #back do
  out[#out + 1] = back[i]
end
return out
