-- The checkpoint's sweep of the fired queue (keys.rs `fired_queue`).
-- The fires that landed more than the retention ago (landed.lua; place.lua, rec_view),
-- from the head of the fired queue, about SWEEP per call: the records still as the claim
-- read them (scheduled, at the member's version and due, out of their slice) are
-- deleted, as a written done record would have expired; any other (written since, or
-- created again) is left.
local SWEEP = 512
-- Sweeps members `first` to `last` of `members` (of a fired queue's entry).
local function sweep_members(slices, members, first, last)
  assert(REC_V == 1 and REC_ST == 2 and REC_DUE == 5)
  local keys, vd = {}, {}
  for i = first, last do
    local v, due, id = string.match(members[i], '^(%d+):(%d+):(.*)$')
    local j = #keys + 1
    keys[j], vd[j] = REC.base .. 't:' .. id, {tonumber(v), tonumber(due), id}
  end
  local gone = {}
  for i, s in ipairs(redis.call('MGET', unpack(keys))) do
    local head = s and string.byte(s, 1)
    if head and head >= 0x95 and head <= 0x9f then
      local _, v, st, _, k, due = cmsgpack.unpack_limit(s, 5, 1)
      if st == 1 and not k and v == vd[i][1] and due == vd[i][2]
        and not redis.call('ZSCORE', slices .. string.format('%d', math.floor(due / 60000)), vd[i][3]) then
        gone[#gone + 1] = keys[i]
      end
    end
  end
  if #gone > 0 then
    redis.call('DEL', unpack(gone))
  end
end
-- Sweeps the partition's fired queue at `now` (ms), slice key prefix `slices`, retention
-- `retention` ms.
local function fired_sweep(slices, now, retention)
  local queue, swept = REC.base .. 'firedq', 0
  while swept < SWEEP do
    local head = redis.call('LINDEX', queue, 0)
    local t = head and tonumber(string.match(head, '^[^\n]*'))
    if not t or t > now - retention then
      return
    end
    redis.call('LPOP', queue)
    local members = {}
    for m in string.gmatch(head, '\n([^\n]+)') do
      members[#members + 1] = m
    end
    for i = 1, #members, 1000 do
      sweep_members(slices, members, i, math.min(i + 999, #members))
    end
    swept = swept + #members
  end
end
