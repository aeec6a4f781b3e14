-- queue_front.lua: move one waiting job to the end of its queue that workers take next ("Run
-- next" on a queue's page), only if it is still there: the LREM that finds it decides, so a
-- job a worker took meanwhile is not pushed back (it would run twice), and two admins moving
-- it leave one copy.
--
-- KEYS[1]  the queue list (producers LPUSH, workers take from the right)
-- ARGV[1]  the job as it is stored (exact bytes)
-- Returns 1 moved, 0 no longer there.
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[1], ARGV[1])
return 1
