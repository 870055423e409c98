-- Takes over in-flight fires of a partition (claimed, not yet acknowledged), one page of
-- members read with ZSCAN, so an owner re-drives them (a one-shot fire the claim took as
-- fired too); drops those whose timer was paused, cancelled or changed meanwhile, and
-- missed cron occurrences the timer's misfire policy drops (misfire.lua, prepended).
-- Members no longer in flight (acknowledged since the scan) are skipped.
-- KEYS: 1 epoch, 2 in-flight set, 3 cron index, 4 dirty set, 5 live timers per application
-- ARGV: 1 expected epoch, 2 the partition's key prefix (record.lua), 3 occurrences due before this ms were
--       missed, 4 now ms, 5 retention ms, 6.. members
-- Returns {member, definition, ...}, or {'fenced'}.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'fenced'}
end
rec_init(ARGV[2], ARGV[5], KEYS[5])
local missed_before = tonumber(ARGV[3])
local out = {}
for i = 6, #ARGV do
  local member = ARGV[i]
  if redis.call('ZSCORE', KEYS[2], member) then
    local c1 = string.find(member, ':', 1, true)
    local c2 = string.find(member, ':', c1 + 1, true)
    local due = string.sub(member, c1 + 1, c2 - 1)
    local id = string.sub(member, c2 + 1)
    local t = rec_get(id)
    -- 'completed': the last fire of a cron timer was acknowledged before earlier ones;
    -- 'fired' (a one-shot timer): read fired while in flight (rec_view, place.lua).
    local keep = t and t.v == string.sub(member, 1, c1 - 1) and (t.st == 'scheduled'
      or t.st == 'completed' or (t.st == 'fired' and t.k ~= 'c'))
    -- An extra fire (FIRE_NOW, a negative version) is re-driven whatever the state.
    local extra = t and string.byte(member, 1) == 45
    if extra then
      keep = true
    end
    if keep and not extra and t.k == 'c' and tonumber(due) < missed_before and not missed_fires(t, tonumber(due), ARGV[4]) then
      -- Counted when claimed; it will not fire after all.
      t.n = string.format('%d', tonumber(t.n or '0') - 1)
      if t.fin == due and t.st == 'scheduled' then
        complete(t, id, KEYS[3], KEYS[4])
      else
        rec_put(id, t)
      end
      keep = false
    end
    if keep then
      out[#out + 1] = member
      out[#out + 1] = t.d
    else
      redis.call('ZREM', KEYS[2], member)
    end
  end
end
rec_flush()
return out
