-- finish.lua: the ends of jobs of one task that succeeded, in one step (issue 18): each one's
-- ack (the end of its reservation) and its move to finished in the task, then one completion
-- check for all of them. A worker sends it as it sends its acks (with its next reserve call,
-- before a job that may run long, before it waits), so a task's short jobs pay one script
-- call per batch, not one per job. fail.lua ends one job of a task otherwise (a failure, a
-- release, and these ends when this script refuses them). (The library, task.lua, comes
-- before this.)
--
-- KEYS[1]       reserved zset of the slot
-- KEYS[2]       the queues set (a callback's queue is added there)
-- KEYS[3..12]   the task's keys (Keys.task_keys)
-- ARGV[1]       the task's id
-- ARGV[2]       the namespace's key prefix (callback queues)
-- ARGV[3..]     pairs: the job's reserved member, its jid
-- Returns {reservations found (a job whose reservation is gone was recovered by another
-- master after a lease expiry: nothing is written for it, it runs again), {jids of the jobs
-- found that the task has no record of (pushed by another language's producer with only the
-- task's id, and never marked working: the worker writes their records)}}; or -1 with
-- nothing written but a mark on the reservations (score -1, as fail.lua refuses: reserve.lua
-- does not hand them out again) when the task is sealed, a callback is due, and its queue
-- key or the queues set holds another Redis type: the worker then ends each job with
-- fail.lua, which knows whether that end completes the task.
local CHUNK = 1000  -- unpack() is bounded by Lua's C stack
local function each_chunk(list, fn)
  for i = 1, #list, CHUNK do fn(unpack(list, i, math.min(i + CHUNK - 1, #list))) end
end
local t = task_keys(3)
local tid, prefix = ARGV[1], ARGV[2]
local members, jids = {}, {}
for i = 3, #ARGV, 2 do
  members[#members + 1] = ARGV[i]
  jids[#jids + 1] = ARGV[i + 1]
end

local m = redis.call('HMGET', t.meta, 'sealed', 'completed_at', 'succeeded_at', 'on_complete',
                     'on_success', 'ttl_success', 'ttl_idle', 'touched_at')
if m[6] and m[1] == '1' then
  for i = 1, 2 do
    local stored = m[3 + i]
    if stored and not m[1 + i] and (not task_fits(prefix .. 'queue:' .. cjson.decode(stored)[1],
                                                  'list') or not task_fits(KEYS[2], 'set')) then
      for _, member in ipairs(members) do
        if redis.call('ZSCORE', KEYS[1], member) then
          redis.call('ZADD', KEYS[1], 'XX', -1, member)
        end
      end
      return -1
    end
  end
end

-- (one ZREM each: its reply says whether the reservation was there; ZMSCORE would say it
-- with a score, which Redis formats as text and Lua parses back, at twice the cost)
local done = {}
for i, member in ipairs(members) do
  if redis.call('ZREM', KEYS[1], member) == 1 then done[#done + 1] = jids[i] end
end

local missing = {}
if #done == 0 or not m[6] then  -- (nothing of ours to move, or the task is gone)
  return {#done, missing}
end
-- Each job is in one state's set: as a rule (pushed by task.py, short, never marked
-- working) in enqueued, and one SREM takes them all out of it.
local enqueued, elsewhere = 0, {}
each_chunk(done, function(...)
  for i, listed in ipairs(redis.call('SMISMEMBER', t.enqueued, ...)) do
    if listed == 1 then enqueued = enqueued + 1 else elsewhere[#elsewhere + 1] = i end
  end
end)
for _, i in ipairs(elsewhere) do
  if redis.call('HEXISTS', t.jobs, done[i]) == 0 then missing[#missing + 1] = done[i] end
end
for _, s in ipairs(TASK_STATES) do
  if s ~= 'finished' and (s == 'enqueued' and enqueued > 0 or s ~= 'enqueued' and #elsewhere > 0)
  then
    each_chunk(done, function(...) redis.call('SREM', t[s], ...) end)
  end
end
local added = 0
each_chunk(done, function(...) added = added + redis.call('SADD', t.finished, ...) end)
if added > 0 then task_ttl(t, t.finished) end
-- The completion check (task_settle) once: it cannot complete while jobs are enqueued, and
-- then only the idle TTL is due now and then, as task_settle gives it.
if m[1] == '1' and redis.call('SCARD', t.enqueued) == 0 then
  task_settle(t, tid, prefix, KEYS[2])
else
  local now = task_now()
  if now - tonumber(m[8] or 0) >= TASK_TOUCH_EVERY then
    task_expire(t, tonumber(m[7]))
    redis.call('HSET', t.meta, 'touched_at', task_time(now))
  end
end
return {#done, missing}
