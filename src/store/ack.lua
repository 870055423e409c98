-- Acknowledges fires the broker accepted (or that were dropped before delivery because
-- their timer changed): removes them from the in-flight set; marks one-shot timers fired
-- and cron timers completed after their last fire (kept for look-up until the retention
-- expires). A member written `!member\nreason` went to the dead-letter topic instead of
-- its callback topic after its delivery attempts ran out: a one-shot timer becomes
-- dead_lettered; a cron timer counts it (`dl`, last one's due `dlr`, reason `dlx`) and
-- goes on. Every timer whose fields change is added to the dirty set (the next checkpoint
-- writes its state, or its tombstone).
-- A one-shot timer whose state was never written owes nothing: it only leaves the
-- deferred sets.
-- Every call counts in the acknowledgement counter (a checkpoint is due after fires).
-- A timer that is done leaves its application's live count (done/complete, misfire.lua,
-- prepended).
-- KEYS: 1 epoch, 2 in-flight set, 3 cron index, 4 dirty set, 5 deferred by due,
--       6 deferred by first offset, 7 acknowledgement counter, 8 live timers per
--       application
-- ARGV: 1 expected epoch, 2 timer key prefix, 3 retention ms, 4.. members
-- Returns the number of members removed, or -1 when fenced.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
redis.call('INCR', KEYS[7])
local n = 0
-- Members to remove from the in-flight set, removed together at the end.
local gone = {}
for i = 4, #ARGV do
  local member, reason = ARGV[i], nil
  if string.sub(member, 1, 1) == '!' then
    local nl = string.find(member, '\n', 2, true)
    reason = string.sub(member, nl + 1)
    member = string.sub(member, 2, nl - 1)
  end
  gone[#gone + 1] = member
  local c1 = string.find(member, ':', 1, true)
  local c2 = string.find(member, ':', c1 + 1, true)
  local due = string.sub(member, c1 + 1, c2 - 1)
  local id = string.sub(member, c2 + 1)
  local tkey = ARGV[2] .. id
  local t = redis.call('HMGET', tkey, 'v', 'st', 'k', 'n', 'mx', 'fin', 'p')
  if t[1] == string.sub(member, 1, c1 - 1) and t[2] == 'scheduled' then
    if t[7] or t[3] == 'c' then
      redis.call('ZADD', KEYS[4], 'NX', 'inf', id)
    else
      redis.call('ZREM', KEYS[5], id)
      redis.call('ZREM', KEYS[6], id)
    end
    if reason then
      redis.call('HINCRBY', tkey, 'dl', 1)
      redis.call('HSET', tkey, 'dlr', due, 'dlx', reason)
    end
    if t[3] ~= 'c' then
      done(tkey, KEYS[8])
      redis.call('HSET', tkey, 'st', reason and 'dead_lettered' or 'fired')
      redis.call('PEXPIRE', tkey, ARGV[3])
    else
      redis.call('HSET', tkey, 'last', due)
      if t[6] == due or (t[5] and tonumber(t[4] or '0') >= tonumber(t[5])) then
        complete(tkey, id, ARGV[3], KEYS[3], KEYS[4], KEYS[8])
      end
    end
  end
end
for i = 1, #gone, 1000 do
  n = n + redis.call('ZREM', KEYS[2], unpack(gone, i, math.min(i + 999, #gone)))
end
return n
