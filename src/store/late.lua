-- Late claims (a helper of every script, after record.lua; place.lua's rec_view reads
-- them). A claim more than a second after a fire's due (a backlog) writes no record
-- either: per due minute it took late fires of, it adds one entry to that minute's
-- late-claim set (zset, lexical): the key of its first such fire, then its own time (ms).
-- Claims take a minute's fires in the slice's order, (due, id), as rec_late_key orders
-- them, so the greatest entry up to a fire's key is the claim that took it, or one at
-- most a second before its claim (rec_view). (A timer created overdue behind a backlog's
-- progress is taken out of that order: the fires between it and where its claim rejoins
-- read that claim.) The set expires LATE_KEEP ms after the retention from its last entry.
local LATE_KEEP = 60000

-- The late-claim set of due minute `minute` (a string).
local function rec_late_set(minute)
  return REC.base .. 'late:' .. minute
end

-- The key of one-shot fire `id` due `due` (ms, a number) in a late-claim set.
local function rec_late_key(due, id)
  return string.format('%013d:%s', due, id)
end

-- Notes late claims made at `now` (a string, ms): `late` maps due minutes (integer
-- numbers) to the key of the first fire taken late in them.
local function rec_late_note(late, now)
  for m, first in pairs(late) do
    local set = rec_late_set(string.format('%d', m))
    redis.call('ZADD', set, 0, first .. '\n' .. now)
    redis.call('PEXPIRE', set, tonumber(REC.retention) + LATE_KEEP)
  end
end

-- When the claim of one-shot fire `id` due `due` in minute `minute` (a string) took it,
-- if late (rec_late_note), else nil.
local function rec_late_claim(minute, due, id)
  local bound = '[' .. rec_late_key(due, id) .. '\n\255'
  local e = redis.call('ZREVRANGEBYLEX', rec_late_set(minute), bound, '-', 'LIMIT', 0, 1)[1]
  return e and tonumber(string.match(e, '\n(%d+)$'))
end
