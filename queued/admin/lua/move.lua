-- move.lua: act on jobs of a sorted set (schedule, retry, dead) one by one, each only if it is
-- still there: the ZREM (or ZADD XX) that finds it decides, so two admins acting on the same job,
-- or an admin and the scheduler moving it, never act twice and never leave it in two places.
--
-- KEYS[1]     the zset the jobs are in
-- KEYS[2]     the queues set
-- KEYS[3]     dead zset
-- KEYS[4..]   one key per job: its queue list (action "queue"), else any key (not written)
-- ARGV[1]     action: queue (push to its queue now) | dead (kill: ZADD dead) | delete | score
--             (reschedule: the job stays, at a new score)
-- ARGV[2]     score for dead entries (now)
-- ARGV[3]     dead trim: remove scores <= this; ARGV[4]: ZREMRANGEBYRANK dead 0 ARGV[4]
-- then        per job: the member as it is in KEYS[1], the payload to write (queue, dead) or
--             the new score (score), the queue name
-- Returns {jobs acted on, jobs left because their destination holds another Redis type, the
-- positions (1-based) of the jobs removed (delete, dead) whose member names a task_id: the
-- caller tells their tasks (taskmarks.py), the positions of the jobs removed whose member
-- names unique_for: the caller gives their unique locks up (locks.py, issue 21)}.
--
-- Destinations are type-checked before each job's first write (no rollback in a script).
local action = ARGV[1]
local known = {}  -- key -> usable (each destination's type is looked up once per call)
local function usable(key, want)
  if known[key] == nil then
    local kind = redis.call('TYPE', key)['ok']
    known[key] = kind == 'none' or kind == want
  end
  return known[key]
end
if action == 'dead' and not usable(KEYS[3], 'zset') then
  return {0, (#ARGV - 4) / 3}
end
local done, left = 0, 0
local tasks = {}  -- positions of removed jobs of a task
local uniques = {}  -- positions of removed unique jobs
local added = {}  -- queue names SADDed to the queues set in this call
local k = 4
for i = 5, #ARGV, 3 do
  local member, data, queue = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if action == 'score' then
    if redis.call('ZADD', KEYS[1], 'XX', 'CH', data, member) == 1 then done = done + 1 end
  elseif action == 'queue' and not usable(KEYS[k], 'list') then
    left = left + 1
  elseif redis.call('ZREM', KEYS[1], member) == 1 then
    if action == 'queue' then
      redis.call('LPUSH', KEYS[k], data)
      if not added[queue] then
        redis.call('SADD', KEYS[2], queue)
        added[queue] = true
      end
    elseif action == 'dead' then
      redis.call('ZADD', KEYS[3], ARGV[2], data)
    end
    if action ~= 'queue' and string.find(member, '"task_id"', 1, true) then
      tasks[#tasks + 1] = (i - 2) / 3
    end
    if action ~= 'queue' and string.find(member, '"unique_for"', 1, true) then
      uniques[#uniques + 1] = (i - 2) / 3
    end
    done = done + 1
  end
  k = k + 1
end
if action == 'dead' and done > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[3])
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, ARGV[4])
end
return {done, left, tasks, uniques}
