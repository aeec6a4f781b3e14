-- find_in_list.lua: the first element of a list, from an index on, that contains a text (a
-- jid), read inside Redis a chunk at a time: a queue of a million jobs is searched without
-- sending it over the network, and no call holds Redis for more than one chunk. (LPOS finds
-- only a whole element, and a job's bytes are not known before it is found.) The caller checks
-- the element it gets (the text may be in another job's arguments) and calls again from the
-- next index.
--
-- KEYS[1]  the list (queue:<name>)
-- ARGV[1]  the text to look for, as it is (no pattern)
-- ARGV[2]  the index to start at (0: the head, where LPUSH adds)
-- ARGV[3]  how many elements to read in this call
-- Returns {1, index, list length, element} for a match; else {0, the index to go on from,
-- list length}, that index -1 once the list has been read to its end.
local needle, start, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local length = redis.call('LLEN', KEYS[1])
local chunk = redis.call('LRANGE', KEYS[1], start, start + count - 1)
for i, element in ipairs(chunk) do
  if string.find(element, needle, 1, true) then
    return {1, start + i - 1, length, element}
  end
end
if start + count >= length then
  return {0, -1, length}
end
return {0, start + count, length}
