-- find_in_list.lua: the elements of a list, from an index on, whose "jid" is a given jid, read
-- inside Redis a chunk at a time: a queue of a million jobs is searched without sending it over
-- the network, and no call holds Redis for more than one chunk. (LPOS finds only a whole
-- element, and a job's bytes are not known before it is found.) An element is looked at only
-- if it holds one of the jid's spellings as a JSON string, quotes included (admin/entries.py
-- jid_spellings: PHP writes "ab\/cd"), and it is a match only if its parsed "jid" is the jid:
-- a job whose arguments hold the text is passed over here, not returned to the caller, so a
-- short or mistyped jid costs one read of the list like any other (red team RT1, finding 3: it
-- returned every element holding the text, and the caller read 10,000 again after each).
--
-- KEYS[1]   the list (queue:<name>)
-- ARGV[1]   the jid (its bytes, as cjson gives a JSON string's)
-- ARGV[2]   the index to start at (0: the head, where LPUSH adds)
-- ARGV[3]   how many elements to read in this call
-- ARGV[4..] the jid's spellings as JSON strings
-- Returns {the index to go on from (-1: the list has been read to its end), the list's length,
-- then index, element for each match in this chunk, head first}. An element holding a spelling
-- that cjson cannot parse (nested too deep, say) is returned too: the caller's parser decides.
local jid, start, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local length = redis.call('LLEN', KEYS[1])
local chunk = redis.call('LRANGE', KEYS[1], start, start + count - 1)
local reply = {start + count >= length and -1 or start + count, length}
for i, element in ipairs(chunk) do
  for n = 4, #ARGV do
    if string.find(element, ARGV[n], 1, true) then
      local ok, doc = pcall(cjson.decode, element)
      if not ok or (type(doc) == 'table' and doc['jid'] == jid) then
        reply[#reply + 1] = start + i - 1
        reply[#reply + 1] = element
      end
      break
    end
  end
end
return reply
