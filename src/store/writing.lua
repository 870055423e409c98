-- The states the intake is writing itself (the partition's `writing` hash, keys.rs),
-- prepended to apply.lua, checkpoint.lua, written.lua and acquire.lua: one field per
-- apply call whose answered states are not confirmed yet, named by the offset of the
-- call's first command, its value the ids of the timers answered, one per line (an id
-- holds no control character, src/validate). One entry per call, not one per timer: the
-- call writes it and the confirmation deletes it whole.

-- The ids of entry `ids` (a field's value), as a list.
local function writing_ids(ids)
  local list = {}
  for id in string.gmatch(ids, '[^\n]+') do
    list[#list + 1] = id
  end
  return list
end

-- Every timer of hash `key`, as a set: id -> the offset naming its entry (as written).
local function writing_set(key)
  local set = {}
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    for _, id in ipairs(writing_ids(all[i + 1])) do
      set[id] = all[i]
    end
  end
  return set
end

-- The lowest offset naming an entry of hash `key`, or nil when it has none.
local function writing_oldest(key)
  local oldest = nil
  for _, f in ipairs(redis.call('HKEYS', key)) do
    local o = tonumber(f)
    if not oldest or o < oldest then
      oldest = o
    end
  end
  return oldest
end
