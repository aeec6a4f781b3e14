-- task_push.lua: the jobs of one chunk of a producer's block (task.py), each pushed with its
-- record and its enqueued state, in push order; a job whose jid the task already has (its
-- record is there) is not pushed: the same jid is the same job (a fixed jid is how producers
-- make a job idempotent), and the task keeps one state per jid, so a second copy would run on
-- after the task had completed on the first (issue 16.1.9). Runs inside the block's MULTI,
-- after the task's hash is made, so a worker never sees a job of the task before its record.
--
-- KEYS[1]  the task's jid -> record hash     KEYS[2]  the task's enqueued set
-- KEYS[3]  the queues set                    KEYS[4]  the schedule zset
-- KEYS[5..]  the queue lists the chunk's jobs go to
-- ARGV[1]  n, the number of jobs; then 5 per job: jid, record JSON, where (0: the schedule,
--          i: the i-th queue of KEYS[5..]), score (the schedule's; '' for a queue), payload;
--          then the queue names of KEYS[5..], in order (for the queues set)
-- Returns the number of jobs not pushed (their jid already in the task, or earlier in the
-- chunk).
local n = tonumber(ARGV[1])
local queues = #KEYS - 4
local skipped = 0
local used = {}
for i = 0, n - 1 do
  local b = 2 + i * 5
  if redis.call('HSETNX', KEYS[1], ARGV[b], ARGV[b + 1]) == 0 then
    skipped = skipped + 1
  else
    redis.call('SADD', KEYS[2], ARGV[b])
    local where = tonumber(ARGV[b + 2])
    if where == 0 then
      redis.call('ZADD', KEYS[4], ARGV[b + 3], ARGV[b + 4])
    else
      redis.call('LPUSH', KEYS[4 + where], ARGV[b + 4])
      used[where] = true
    end
  end
end
for i = 1, queues do
  if used[i] then redis.call('SADD', KEYS[3], ARGV[1 + n * 5 + i]) end
end
return skipped
