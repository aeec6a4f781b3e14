-- task_mark.lua: move one job of a task to a state outside the end of its reservation: working
-- when a worker starts it, retry when its worker was killed under it (the master puts it back
-- in its queue), error when an operator kills or deletes it. fail.lua moves it when a run
-- ends. (The library, task.lua, comes before this.)
--
-- KEYS[1..10]  the task's keys (Keys.task_keys)
-- KEYS[11]     the queues set (a callback's queue is added there)
-- ARGV[1] task id, ARGV[2] jid, ARGV[3] state, ARGV[4] error JSON or '', ARGV[5] record JSON or
-- '' (written if the job has none), ARGV[6] the namespace's key prefix (callback queues)
-- Returns 1 if the task exists, else 0; -1 (nothing written) if the move would complete the
-- task and a callback's queue key holds another Redis type (task.lua: task_blocked).
local t = task_keys(1)
if task_blocked(t, ARGV[2], ARGV[3], ARGV[6], KEYS[11]) then return -1 end
if not task_move(t, ARGV[2], ARGV[3], ARGV[4], ARGV[5]) then return 0 end
if TASK_FINAL[ARGV[3]] then task_settle(t, ARGV[1], ARGV[6], KEYS[11]) end
return 1
