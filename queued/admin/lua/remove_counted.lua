-- remove_counted.lua: remove from a queue jobs an operator counted (a copy of the queue taken when
-- the question was asked: admin/snapshot.py), a chunk at a time, the oldest first: each job of the
-- chunk still in the queue is removed once (by its exact bytes); a job pushed since is never
-- removed, however many there are (red team RT1, finding 7: "delete 3 jobs?" must not delete
-- 203). Producers push at the head and workers take from the tail, so the jobs counted that are
-- still there sit at the tail, behind at most the few pushed to that end since (a crash's jobs
-- put back, a job moved by Run next): the queue is read from its tail, ARGV[1] elements at most,
-- and rewritten from the last job removed to the tail in one step. A job of the chunk not found
-- there was taken by a worker (or moved far into the queue: it is left, never guessed at).
--
-- KEYS[1]   the queue (a list)
-- KEYS[2]   the queues set
-- ARGV[1]   how many elements to read from the tail, at most
-- ARGV[2]   the queue's name (its member of the queues set: removed when the queue is left empty)
-- ARGV[3..] the jobs to remove, as stored, the oldest first
-- Returns {the positions (1-based, in ARGV[3..]) of the jobs removed, how many elements were
-- read}.
local want, left = {}, 0
for i = 3, #ARGV do
  local slots = want[ARGV[i]]
  if not slots then
    slots = {}
    want[ARGV[i]] = slots
  end
  slots[#slots + 1] = i - 2
  left = left + 1
end
local window = math.min(tonumber(ARGV[1]), redis.call('LLEN', KEYS[1]))
local seen, removed = {}, {}  -- seen[n]: the n-th element from the tail (false: removed)
local read, cut = 0, 0        -- cut: how far from the tail the last removed element was
while read < window and left > 0 do
  local n = math.min(1000, window - read)
  local piece = redis.call('LRANGE', KEYS[1], -(read + n), -(read + 1))
  local i = #piece
  while i >= 1 and left > 0 do
    local slots = want[piece[i]]
    read = read + 1
    if slots and #slots > 0 then
      removed[#removed + 1] = table.remove(slots)
      left = left - 1
      cut = read
      seen[read] = false
    else
      seen[read] = piece[i]
    end
    i = i - 1
  end
end
if cut > 0 then
  redis.call('LTRIM', KEYS[1], 0, -(cut + 1))
  local keep = {}
  for j = cut - 1, 1, -1 do
    if seen[j] then keep[#keep + 1] = seen[j] end
  end
  for j = 1, #keep, 1000 do
    redis.call('RPUSH', KEYS[1], unpack(keep, j, math.min(j + 999, #keep)))
  end
end
if redis.call('LLEN', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[2])
end
return {removed, read}
