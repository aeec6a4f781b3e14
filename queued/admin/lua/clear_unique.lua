-- clear_unique.lua: the members of a range of a cleared queue's or set's copy (snapshot.py)
-- that name unique_for, so the caller gives their locks up without reading every job over the
-- network (locks.py).
--
-- KEYS[1]  the copy (Keys.snapshot)
-- ARGV[1]  its type: list or zset    ARGV[2]  the first index    ARGV[3]  the last index
-- Returns those members.
local members
if ARGV[1] == 'list' then
  members = redis.call('LRANGE', KEYS[1], ARGV[2], ARGV[3])
else
  members = redis.call('ZRANGE', KEYS[1], ARGV[2], ARGV[3])
end
local out = {}
for _, m in ipairs(members) do
  if string.find(m, '"unique_for"', 1, true) then out[#out + 1] = m end
end
return out
