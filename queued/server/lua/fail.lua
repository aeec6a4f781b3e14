-- fail.lua: end a job's reservation other than with a batched ack (a failure to retry or dead,
-- a drop, a release by the job itself to later or to its queue, the end of a job of a task),
-- in one step, so a crash can never leave both or neither. For a job of a task the same step
-- moves it to its new state in the task (queued/lua/task.lua, put in front of this script). Does nothing if the reservation is already gone (another master
-- recovered it after a lease expiry): the job is back in a queue then, and writing it
-- somewhere too would run it twice.
--
-- KEYS[1]  reserved zset of the slot
-- KEYS[2]  target: the retry, dead or schedule zset, or the job's queue list (ignored for drop
--          and done)
-- KEYS[3]  the queues set (kind queue, and a task's callbacks)
-- KEYS[4..13]  a job of a task: the task's keys (Keys.task_keys); absent otherwise
-- ARGV[1]  reserved member
-- ARGV[2]  kind: retry | dead | drop | later (ZADD schedule) | queue (LPUSH its queue) |
--          done (a job of a task that succeeded: its ack, written with its state)
-- ARGV[3]  score (float epoch seconds)
-- ARGV[4]  payload JSON to store
-- ARGV[5]  dead trim: remove scores <= this (now - dead_timeout_in_seconds)
-- ARGV[6]  dead trim: ZREMRANGEBYRANK dead 0 ARGV[6] (-dead_max_jobs: Sidekiq's trim)
-- ARGV[7]  the queue's name (kind queue)
-- ARGV[8..12]  a job of a task: jid, its new state, its error JSON or '', the task's id, the
--          namespace's key prefix (tracking.Move.args)
-- Returns 1 if written, 0 if the reservation was gone, -1 if the target key holds another
-- Redis type (SET retry oops by mistake), or so does the queue of a callback this end would
-- push (the job of a task whose end completes it: task.lua's task_blocked).
--
-- The target's type is checked before the first write. Redis does not roll a script back, and
-- this script used to ZREM the reservation and then fail on the ZADD with WRONGTYPE: the job
-- was in neither place. Now nothing is written but a mark: the reservation's score becomes -1,
-- so reserve.lua does not hand it out again while the caller keeps retrying the write (it
-- stays reserved, and goes back to its queue if the caller dies).
local function refuse()
  if redis.call('ZSCORE', KEYS[1], ARGV[1]) == false then return 0 end
  redis.call('ZADD', KEYS[1], 'XX', -1, ARGV[1])
  return -1
end
if ARGV[2] ~= 'drop' and ARGV[2] ~= 'done'
    and not task_fits(KEYS[2], ARGV[2] == 'queue' and 'list' or 'zset') then
  return refuse()
end
-- The same for the callback a job of a task pushes when its end completes the task
-- (task.lua: task_blocked), so the end written again once the key is fixed pushes it.
if #KEYS > 3 and task_blocked(task_keys(4), ARGV[8], ARGV[9], ARGV[12], KEYS[3]) then
  return refuse()
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if ARGV[2] == 'retry' or ARGV[2] == 'later' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
elseif ARGV[2] == 'queue' then
  redis.call('LPUSH', KEYS[2], ARGV[4])
  redis.call('SADD', KEYS[3], ARGV[7])
elseif ARGV[2] == 'dead' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[5])
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, ARGV[6])
end
if #KEYS > 3 then
  local t = task_keys(4)
  if task_move(t, ARGV[8], ARGV[9], ARGV[10], '') and TASK_FINAL[ARGV[9]] then
    task_settle(t, ARGV[11], ARGV[12], KEYS[3])
  end
end
return 1
