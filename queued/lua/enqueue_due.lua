-- enqueue_due.lua: move due jobs from schedule/retry to their queues, each exactly once even
-- with many masters polling: a job is pushed only by the caller whose ZREM removed it.
--
-- KEYS[1]       the zset (schedule, retry)
-- KEYS[2]       the queues set
-- KEYS[3..]     destination keys, one per job (queue:<q>, or dead for unusable payloads)
-- ARGV          triples per job: old member, new payload, queue name ('' = to dead: ZADD at
--               the score given in ARGV[1])
-- ARGV[1]       score for dead entries; triples start at ARGV[2]
-- Returns the number moved.
local moved = 0
local i = 2
local k = 3
while i <= #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    if ARGV[i + 2] == '' then
      redis.call('ZADD', KEYS[k], ARGV[1], ARGV[i + 1])
    else
      redis.call('SADD', KEYS[2], ARGV[i + 2])
      redis.call('LPUSH', KEYS[k], ARGV[i + 1])
    end
    moved = moved + 1
  end
  i = i + 3
  k = k + 1
end
return moved
