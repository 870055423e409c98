-- Tombstones owed by written one-shot timers whose fires landed (landed.lua), no command
-- since: one entry per acknowledgement call in a list (keys.rs `owed`), not one write
-- per timer: "COUNT TIME N\nid\n...\nid" (the call's acknowledgement count, when its
-- last fire was produced, the number of ids). A checkpoint page moves whole entries to
-- the taken list (kept until its records are confirmed) and answers them as they are.
-- Invariants:
-- * a command that makes such a timer live again notes it in the revived set, scored by
--   the acknowledgement count then (owed_revive): a tombstone of an entry whose count is
--   at most that score no longer holds (the timer's new state is written instead);
-- * a revived member is kept while an entry of a count at most its score is owed or
--   taken (owed_trim);
-- * a record is deleted only after the retention (the checkpoint's sweep, or its
--   expiry): an entry older than half of it (clocks may differ) is answered timer by
--   timer from the records (a timer created again over a deleted record is not revived).

-- Appends the entry of ids `args[first..last]`, acknowledged in call `count` whose last
-- fire was produced at `time`, to list `key`.
local function owed_push(key, count, time, args, first, last)
  if last >= first then
    redis.call('RPUSH', key, count .. ' ' .. time .. ' ' .. (last - first + 1) .. '\n'
      .. table.concat(args, '\n', first, last))
  end
end

-- Notes that timer `id` was made live again now (acknowledgement counter `acks`).
local function owed_revive(revived, acks, id)
  redis.call('ZADD', revived, redis.call('GET', acks) or '0', id)
end

-- The acknowledgement count, the time and the number of ids of entry `e` (numbers).
local function owed_head(e)
  local c, t, n = string.match(e, '^(%d+) (%d+) (%d+)')
  return tonumber(c), tonumber(t), tonumber(n)
end

-- The ids of entry `e` (after its first line, one per line as writing.lua's).
local function owed_ids(e)
  return writing_ids(string.sub(e, string.find(e, '\n', 1, true) + 1))
end

-- Moves whole entries from `key` to the end of `taken` until they hold `want` ids (the
-- last may pass it); answers them and their number of ids.
local function owed_take(key, taken, want)
  local out, n = {}, 0
  while n < want do
    local e = redis.call('LMOVE', key, taken, 'LEFT', 'RIGHT')
    if not e then
      break
    end
    out[#out + 1] = e
    n = n + select(3, owed_head(e))
  end
  return out, n
end

-- The ids of entry `e` whose tombstones still hold (none revived since its count).
local function owed_holding(revived, e)
  local ids, count = owed_ids(e), owed_head(e)
  if redis.call('EXISTS', revived) == 0 then
    return ids
  end
  local kept = {}
  for i = 1, #ids, 1000 do
    local j = math.min(i + 999, #ids)
    local scores = redis.call('ZMSCORE', revived, unpack(ids, i, j))
    for k = i, j do
      local s = scores[k - i + 1]
      if not s or tonumber(s) < count then
        kept[#kept + 1] = ids[k]
      end
    end
  end
  return kept
end

-- Forgets the revived members no owed entry (list `owed`) needs any more: the taken
-- list was just confirmed and emptied.
local function owed_trim(owed, revived)
  local head = redis.call('LINDEX', owed, 0)
  if head then
    redis.call('ZREMRANGEBYSCORE', revived, '-inf', '(' .. owed_head(head))
  else
    redis.call('DEL', revived)
  end
end
