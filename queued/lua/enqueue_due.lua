-- enqueue_due.lua: move due jobs from schedule/retry to their queues, each exactly once even
-- with many masters polling: a job is pushed only by the caller whose ZREM removed it.
--
-- KEYS[1]       the zset (schedule, retry)
-- KEYS[2]       the queues set
-- KEYS[3]       dead zset (for a job whose queue key is not a list)
-- KEYS[4..]     destination keys, one per job (queue:<q>, or dead for unusable payloads)
-- ARGV          triples per job: old member, new payload, queue name ('' = to dead: ZADD at
--               the score given in ARGV[1])
-- ARGV[1]       score for dead entries; triples start at ARGV[2]
-- Returns {number moved, then the queue name of each job sent to dead because its queue key
-- holds another type}: LPUSH fails with WRONGTYPE there, and with redis.call that error
-- aborted the script on every poll, so nothing due moved any more. Such a job goes to dead
-- as it was (its enqueued_at set) instead of staying due and failing every poll.
local moved = 0
local out = {0}
local i = 2
local k = 4
while i <= #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    if ARGV[i + 2] == '' then
      redis.call('ZADD', KEYS[k], ARGV[1], ARGV[i + 1])
    else
      local ok = redis.pcall('LPUSH', KEYS[k], ARGV[i + 1])
      if type(ok) == 'table' and ok.err then
        redis.call('ZADD', KEYS[3], ARGV[1], ARGV[i + 1])
        out[#out + 1] = ARGV[i + 2]
      else
        redis.call('SADD', KEYS[2], ARGV[i + 2])
      end
    end
    moved = moved + 1
  end
  i = i + 3
  k = k + 1
end
out[1] = moved
return out
