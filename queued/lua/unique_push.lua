-- unique_push.lua: push unique jobs, each only if its lock is free, taking the lock in the same
-- step (SET NX PX): a push can never take the lock and lose the job, or push the job without
-- the lock (queued/unique.py; Sidekiq Enterprise takes the lock in client middleware, a round
-- trip before the push, so a client killed between the two left a lock with no job behind it).
-- A job of a task is written with its record and its enqueued state, only if it was pushed: a
-- dropped duplicate is not counted in the task; and a job whose jid the task already has is
-- not pushed (nor locked): the same jid is the same job (task_push.lua says why).
--
-- KEYS[1]      queues set
-- KEYS[2]      schedule zset
-- KEYS[3]      the unique_dropped counter (Keys.counter)
-- KEYS[4..5]   a task's records hash and its enqueued set (only when ARGV[1] ~= '')
-- then         per job: its lock key, its queue list
-- ARGV[1]      a task's idle TTL in ms, or '' (no task)
-- ARGV[2]      N, the number of jobs
-- then         per job: jid, lock TTL in ms, payload, at ('' = to its queue now), queue name,
--              its record JSON in the task ('' without a task)
-- Returns one 1 (pushed) or 0 (dropped: its lock is held, or its jid is in the task) per job,
-- in order.
local task = ARGV[1] ~= ''
local k = task and 6 or 4
local out = {}
local queues = {}
for i = 0, tonumber(ARGV[2]) - 1 do
  local a = 3 + 6 * i
  local jid, payload, at = ARGV[a], ARGV[a + 2], ARGV[a + 3]
  local lock, queue = KEYS[k + 2 * i], KEYS[k + 2 * i + 1]
  if task and redis.call('HEXISTS', KEYS[4], jid) == 1 then
    out[#out + 1] = 0
  elseif redis.call('SET', lock, jid, 'NX', 'PX', ARGV[a + 1]) then
    if at == '' then
      redis.call('LPUSH', queue, payload)
      queues[ARGV[a + 4]] = true
    else
      redis.call('ZADD', KEYS[2], at, payload)
    end
    if task then
      redis.call('HSET', KEYS[4], jid, ARGV[a + 5])
      redis.call('SADD', KEYS[5], jid)
    end
    out[#out + 1] = 1
  else
    redis.call('INCR', KEYS[3])
    out[#out + 1] = 0
  end
end
for name in pairs(queues) do redis.call('SADD', KEYS[1], name) end
if task then
  redis.call('PEXPIRE', KEYS[4], ARGV[1])
  redis.call('PEXPIRE', KEYS[5], ARGV[1])
end
return out
