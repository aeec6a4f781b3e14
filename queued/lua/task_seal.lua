-- task_seal.lua: the producer says every job of the task has been pushed: from now on it is
-- complete as soon as every job is final (at once, if they are already). (The library,
-- task.lua, comes before this.)
--
-- KEYS[1..10]  the task's keys (Keys.task_keys); KEYS[11] the queues set
-- ARGV[1] task id, ARGV[2] the namespace's key prefix, ARGV[3] the total of jobs the task
-- will have, or '' (then the jobs it has now are all of them)
-- Returns 1, or 0 if the task does not exist (expired, deleted, never made), or -1 (nothing
-- written) if sealing would complete it and a callback's queue key holds another Redis type.
local t = task_keys(1)
if redis.call('EXISTS', t.meta) == 0 then return 0 end
if task_blocked(t, nil, nil, ARGV[2], KEYS[11], ARGV[3] ~= '' and ARGV[3] or nil) then
  return -1
end
redis.call('HSET', t.meta, 'sealed', '1')
if ARGV[3] ~= '' then redis.call('HSET', t.meta, 'expected', ARGV[3]) end
task_settle(t, ARGV[1], ARGV[2], KEYS[11])
return 1
