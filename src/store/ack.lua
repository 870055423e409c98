-- Acknowledges fires the broker accepted (or that were dropped before delivery because
-- their timer changed): removes them from the in-flight set; marks one-shot timers fired
-- and cron timers completed after their last fire (kept for look-up until the retention
-- expires). An acknowledgement is `member`, `member\tfired ms\tattempt` when the fire was
-- produced (an entry of the timer's history and its last fire, record.lua), and
-- `!member\tfired ms\tattempt\nreason` when it went to the dead-letter topic instead of
-- its callback topic after its delivery attempts ran out: a one-shot timer becomes
-- dead_lettered; a cron timer counts it (`dl`, last one's due `dlr`, reason `dlx`) and
-- goes on; `#member` forgets a fire whose acknowledgement fails every time. Every timer whose fields change is added to the dirty set (the next checkpoint
-- writes its state, or its tombstone).
-- A one-shot timer whose state was never written owes nothing: it only leaves the
-- deferred set.
-- Every call counts in the acknowledgement counter (a checkpoint is due after fires).
-- A timer that is done leaves its application's live count (rec_tally, record.lua).
-- KEYS: 1 epoch, 2 in-flight set, 3 cron index, 4 dirty set, 5 deferred (by first
--       offset), 6 acknowledgement counter, 7 live timers per application
-- ARGV: 1 expected epoch, 2 the partition's key prefix (timer records, record.lua),
--       3 retention ms, 4 history entries kept per timer, 5 history TTL ms,
--       6.. acknowledgements
-- Returns the number of members removed, or -1 when fenced.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
rec_init(ARGV[2], ARGV[3], KEYS[7])
rec_history(ARGV[4], ARGV[5])
redis.call('INCR', KEYS[6])
local n = 0
-- Members to remove from the in-flight set, timers to add to the dirty set and to
-- remove from the deferred set: each list written in one call at the end.
local gone, dirty, undefer = {}, {}, {}
-- Acknowledges one line (see the top).
local function ack_line(line)
  local member, reason, fire = line, nil, nil
  local dead = string.byte(member, 1) == 33
  if dead then
    local nl = string.find(member, '\n', 2, true)
    reason = string.sub(member, nl + 1)
    member = string.sub(member, 2, nl - 1)
  end
  -- version:due:id, then when and in which attempt it was produced (one match).
  local m, vs, due, id, fired, attempt = string.match(member, '^(([^:]*):([^:]*):([^\t]*))\t?(%d*)\t?(%d*)$')
  member = m
  if fired ~= '' then
    fire = {HIST_FIRE, tonumber(fired), tonumber(due), tonumber(attempt),
      dead and HIST_OUTCOMES.dead_lettered or HIST_OUTCOMES.delivered, reason}
  end
  gone[#gone + 1] = member
  local ver = tonumber(vs)
  local a, where = rec_raw(id)
  local t
  if a and not a[REC_K] and a[REC_V] == ver and a[REC_ST] == REC_STATE_CODE.fired
    and redis.call('ZSCORE', KEYS[2], member) then
    -- Read fired while in flight (rec_view; a fire re-driven after a take-over, or
    -- dead-lettered): decided as a scheduled timer's, its last fire the one given here
    -- (its counts moved at the claim: `_st0` stays fired).
    t = rec_from_raw(id, a, where)
    t.st, t.lx = 'scheduled', nil
    a = nil
  elseif a and not reason and not a[REC_K] and a[REC_ST] == 1 and a[REC_V] == ver then
    -- A one-shot timer delivered (the hot path): fired, without a field table.
    if a[REC_P] then
      dirty[#dirty + 1] = REC_TOMB
      dirty[#dirty + 1] = id
    else
      undefer[#undefer + 1] = id
    end
    rec_done_raw(id, rec_app_raw(a), a, where, 'fired', fire)
    a = nil
  end
  t = t or (a and rec_from_raw(id, a, where))
  if t and fire then
    rec_fire_push(t, fire)
  end
  if t and t.v == vs and t.st == 'scheduled' then
    if t.p or t.k == 'c' then
      dirty[#dirty + 1] = 'inf'
      dirty[#dirty + 1] = id
    else
      undefer[#undefer + 1] = id
    end
    if reason then
      t.dl = string.format('%d', tonumber(t.dl or '0') + 1)
      t.dlr, t.dlx = due, reason
    end
    if t.k ~= 'c' then
      t.st = reason and 'dead_lettered' or 'fired'
      rec_put(id, t)
    else
      t.last = due
      if t.fin == due or fired_out(t) then
        complete(t, id, KEYS[3], KEYS[4])
      else
        rec_put(id, t)
      end
    end
  elseif t and fire and redis.call('ZSCORE', KEYS[2], member) then
    -- Produced for a version since changed (or a timer done meanwhile): history only
    -- (once: an acknowledgement sent again finds the member gone).
    rec_put(id, t)
  end
end

for i = 6, #ARGV do
  if string.byte(ARGV[i], 1) == 35 then
    -- '#member': a fire whose acknowledgement made this function fail every time (its
    -- record cannot be read): it leaves the in-flight set, and its timer the deferred
    -- and dirty sets (nothing more can be written of it), untouched otherwise.
    local member = string.sub(ARGV[i], 2)
    local id = string.match(member, '^[^:]*:[^:]*:(.*)$')
    gone[#gone + 1] = member
    undefer[#undefer + 1] = id
    redis.call('ZREM', KEYS[4], id)
  else
    ack_line(ARGV[i])
  end
end
for i = 1, #gone, 1000 do
  n = n + redis.call('ZREM', KEYS[2], unpack(gone, i, math.min(i + 999, #gone)))
end
for i = 1, #dirty, 1000 do
  redis.call('ZADD', KEYS[4], 'NX', unpack(dirty, i, math.min(i + 999, #dirty)))
end
for i = 1, #undefer, 1000 do
  redis.call('ZREM', KEYS[5], unpack(undefer, i, math.min(i + 999, #undefer)))
end
rec_flush()
return n
