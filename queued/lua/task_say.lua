-- task_say.lua: append one line to a job's message log in its task (Job.say). The log of one
-- job is bounded: past the cap, lines are dropped and one last line says so.
--
-- KEYS[1] the task's hash, KEYS[2] the task's jid -> message lines hash
-- ARGV[1] jid, ARGV[2] the line (JSON [time, text] and a newline), ARGV[3] the cap in bytes,
-- ARGV[4] the line that says later lines were dropped
-- Returns 1 if written, 0 if the task is gone, -1 if over the cap.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local old = redis.call('HGET', KEYS[2], ARGV[1]) or ''
local cap = tonumber(ARGV[3])
if #old > 0 and string.sub(old, -#ARGV[4]) == ARGV[4] then return -1 end
local line = ARGV[2]
if #old + #line > cap then line = ARGV[4] end
redis.call('HSET', KEYS[2], ARGV[1], old .. line)
if redis.call('PTTL', KEYS[2]) == -1 then
  local left = redis.call('PTTL', KEYS[1])
  if left > 0 then redis.call('PEXPIRE', KEYS[2], left) end
end
return 1
