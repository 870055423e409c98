-- Promotes the one-shot timers of the next minutes from the bucket to keys of their
-- own (record.lua), ahead of their fires: a fire then costs one read and one write. Walks
-- the slice index from the promoted minute (meta pm) on, one slice page after the other,
-- moving each record's packed string unchanged, and advances pm when a minute is done: a
-- minute with no bucket records (`BASE bm`) at once, another once all of them moved.
-- KEYS: 1 epoch, 2 slice index, 3 the bucket's meta (place.lua)
-- ARGV: 1 expected epoch, 2 the partition's key prefix, 3 slice key prefix, 4 promote
--       the minutes up to this instant (ms), 5 most slice members looked at
-- Returns 1 when the budget ran out before the target minute (call again), 0 when
-- promoted through it, -1 when fenced.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
rec_init(ARGV[2], 0, nil)
local m = rec_meta()
local pm, pc = m.pm, m.pc
local target = math.floor(tonumber(ARGV[4]) / 60000)
local budget = tonumber(ARGV[5])
local seen = 0
while true do
  local next = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. m.pm, target, 'LIMIT', 0, 1)
  if #next == 0 then
    if target > m.pm then
      m.pm, m.pc = target, 0
    end
    break
  end
  if seen >= budget then
    break
  end
  local minute = tonumber(next[1])
  -- Bucket records due in that minute (none: nothing to look at).
  local left = tonumber(redis.call('HGET', ARGV[2] .. 'bm', minute) or '0') + (REC.minutes[minute] or 0)
  local want = budget - seen
  local page = {}
  if left > 0 then
    page = redis.call('ZRANGE', ARGV[3] .. minute, m.pc, m.pc + want - 1)
  end
  seen = seen + 1
  for _, member in ipairs(page) do
    -- Cron members ("\1...") belong to timers that have their own keys already.
    if left > 0 and string.byte(member, 1) ~= 1 then
      local s = redis.call('HGET', REC.bucket, member)
      if s then
        redis.call('SET', ARGV[2] .. 't:' .. member, s)
        redis.call('HDEL', REC.bucket, member)
        rec_count(minute, -1)
        left = left - 1
      end
    end
    seen = seen + 1
  end
  if left <= 0 or #page < want then
    m.pm, m.pc = minute, 0
  else
    m.pc = m.pc + #page
  end
end
-- Written only when it moved (the migrator calls every second).
if m.pm ~= pm or m.pc ~= pc then
  redis.call('HSET', KEYS[3], 'pm', m.pm, 'pc', m.pc)
end
rec_flush()
if seen >= budget then
  return 1
end
return 0
