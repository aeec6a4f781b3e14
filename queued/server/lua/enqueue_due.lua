-- enqueue_due.lua: move due jobs from schedule/retry to their queues, each exactly once even
-- with many masters polling: a job is pushed only by the caller whose ZREM removed it.
--
-- KEYS[1]       the zset (schedule, retry)
-- KEYS[2]       the queues set
-- KEYS[3]       dead zset (for a job that cannot go to its queue)
-- KEYS[4..]     one key per job: its queue list (push), else dead
-- ARGV[1]       score for dead entries; the jobs' quadruples start at ARGV[2]:
-- ARGV          per job: old member, new payload, action, queue name. Actions: 'push' (to the
--               queue), 'dead' (an unusable payload, as it is: ZADD dead at ARGV[1]), 'drop'
--               (a client middleware cancelled the push, as Sidekiq's Client.push returning
--               nil drops a due job: ZREM only)
-- Returns {number moved, {queue names of jobs sent to dead because their queue key holds
-- another type}, number left where they were}.
--
-- Every destination's type is checked before that job's first write. Redis does not roll a
-- script back: a ZREM followed by a push that fails with WRONGTYPE lost the job. A job whose
-- queue key holds another type goes to dead as it was (its enqueued_at set), rather than
-- staying due and failing every poll; if dead holds another type too, the job is left in the
-- zset, still due, and counted in the reply so the caller can pass over it and report it.
local function usable(key, want)
  local kind = redis.call('TYPE', key)['ok']
  return kind == 'none' or kind == want
end
local dead_ok = usable(KEYS[3], 'zset')
local moved = 0
local to_dead = {}
local left = 0
local i = 2
local k = 4
while i <= #ARGV do
  local action = ARGV[i + 2]
  local queue = ARGV[i + 3]
  local wrong_queue = action == 'push' and not usable(KEYS[k], 'list')
  if wrong_queue then action = 'dead' end
  if action == 'dead' and not dead_ok then
    left = left + 1
  elseif redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    if action == 'push' then
      redis.call('LPUSH', KEYS[k], ARGV[i + 1])
      redis.call('SADD', KEYS[2], queue)
    elseif action == 'dead' then
      redis.call('ZADD', KEYS[3], ARGV[1], ARGV[i + 1])
      if wrong_queue then to_dead[#to_dead + 1] = queue end
    end
    moved = moved + 1
  end
  i = i + 4
  k = k + 1
end
return {moved, to_dead, left}
