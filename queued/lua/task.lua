-- task.lua: the library of every script that moves a job of a task (queued/tracking.py puts it
-- in front of them). A task's state is one set of jids per job state, so each count is an
-- SCARD, and a job that runs twice (at-least-once, after a kill) moves between sets instead of
-- being counted twice: no count can drift or go negative, as Sidekiq Pro's pending counter does
-- when a job re-runs after a hard shutdown (sidekiq #2268, #6852).
--
-- A task's keys (Keys.task_keys), from KEYS[b]:
--   b          hash: description, created_at, sealed, on_complete/on_success (callback payload
--              pieces, task.py), ttl_success/ttl_failure/ttl_idle, touched_at, completed_at,
--              succeeded_at
--   b+1..b+6   sets of jids: enqueued, working, finished, failed, retry (an error waiting for
--              its retry), error (a final error: dead, dropped or buried)
--   b+7        hash jid -> record JSON {class, queue, args[, at]}
--   b+8        hash jid -> last error JSON
--   b+9        hash jid -> message lines, one JSON [time, text] per line (Job.say)
local TASK_STATES = {'enqueued', 'working', 'finished', 'failed', 'retry', 'error'}
local TASK_FINAL = {finished = true, failed = true, error = true}
-- A running task's keys get their idle TTL again at most this often (seconds).
local TASK_TOUCH_EVERY = 3600

local function task_keys(b)
  local t = {meta = KEYS[b], jobs = KEYS[b + 7], errors = KEYS[b + 8], log = KEYS[b + 9],
             all = {}}
  for i, s in ipairs(TASK_STATES) do t[s] = KEYS[b + i] end
  for i = 0, 9 do t.all[i + 1] = KEYS[b + i] end
  return t
end

local function task_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- Times go out as text with microseconds: a Lua number given to redis.call is written with
-- 14 significant digits, which cuts an epoch to a tenth of a millisecond.
local function task_time(now)
  return string.format('%.6f', now)
end

-- A key a script creates takes the task's remaining time to live, so nothing outlives its
-- task (the hash's TTL is set when the task is created, refreshed while its jobs move and
-- replaced when it completes).
local function task_ttl(t, key)
  if redis.call('PTTL', key) == -1 then
    local left = redis.call('PTTL', t.meta)
    if left > 0 then redis.call('PEXPIRE', key, left) end
  end
end

-- Move a job to a state: out of every other state's set, into this one's. The error (JSON or
-- '') becomes its last error; the record (JSON or '') is written if it has none (a job a
-- foreign producer pushed into the task carrying only the task's id). Nothing is written if
-- the task is gone (expired or deleted): a late job must not bring back keys without a TTL.
local function task_move(t, jid, state, err, record)
  if redis.call('EXISTS', t.meta) == 0 then return false end
  for _, s in ipairs(TASK_STATES) do
    if s ~= state then redis.call('SREM', t[s], jid) end
  end
  if redis.call('SADD', t[state], jid) == 1 then task_ttl(t, t[state]) end
  if err ~= '' then
    redis.call('HSET', t.errors, jid, err)
    task_ttl(t, t.errors)
  end
  if record ~= '' and redis.call('HSETNX', t.jobs, jid, record) == 1 then
    task_ttl(t, t.jobs)
  end
  return true
end

local function task_counts(t)
  local c = {total = 0}
  for _, s in ipairs(TASK_STATES) do
    c[s] = redis.call('SCARD', t[s])
    c.total = c.total + c[s]
  end
  return c
end

local function task_expire(t, seconds)
  for _, key in ipairs(t.all) do redis.call('EXPIRE', key, seconds) end
end

-- Push a callback job. Its payload was made by the producer (task.py) and stored in pieces
-- around the parts only known now: {queue, text before the args, before the jid, before
-- created_at, before enqueued_at, after}. Its jid is made from the task's id and the kind, so
-- the callback of one task has one jid whoever pushes it.
local function task_callback(stored, kind, tid, summary, now, prefix, queues_key)
  local p = cjson.decode(stored)
  local jid = string.sub(redis.sha1hex(tid .. ':' .. kind), 1, 24)
  local at = task_time(now)
  local payload = p[2] .. cjson.encode({tid, summary}) .. p[3] .. '"' .. jid .. '"' .. p[4]
                  .. at .. p[5] .. at .. p[6]
  redis.call('SADD', queues_key, p[1])
  redis.call('LPUSH', prefix .. 'queue:' .. p[1], payload)
end

-- Whether a key can take a write of this type (missing, or already of it).
local function task_fits(key, want)
  local kind = redis.call('TYPE', key)['ok']
  return kind == 'none' or kind == want
end

-- Before the first write of a move that may complete the task (fail.lua, task_mark.lua;
-- task_seal.lua with jid nil): the key a callback would then be pushed into (its queue, or
-- the queues set) if it holds another Redis type, else nil. The caller then writes nothing.
-- Redis does not roll a script back: task_settle wrote completed_at and then failed on the
-- callback's LPUSH, and the end run again found the task complete and pushed nothing: the
-- callback was lost for good (issue 16.1.5). Cheap first (no callback due, or its keys fine:
-- one HMGET and a TYPE or two); the task's counts after the move are read only when a key is
-- wrong, to tell whether this move completes the task. ``expected``: a seal's new total.
local function task_blocked(t, jid, state, prefix, queues_key, expected)
  if jid and not TASK_FINAL[state] then return nil end
  local m = redis.call('HMGET', t.meta, 'sealed', 'completed_at', 'succeeded_at',
                       'on_complete', 'on_success', 'expected', 'ttl_success')
  if not m[7] or (jid and m[1] ~= '1') then return nil end
  local blocked = {}
  for i, kind in ipairs({'complete', 'success'}) do
    local stored = m[3 + i]
    if stored and not m[1 + i] then
      local key = prefix .. 'queue:' .. cjson.decode(stored)[1]
      if not task_fits(key, 'list') then blocked[kind] = key
      elseif not task_fits(queues_key, 'set') then blocked[kind] = queues_key end
    end
  end
  if not blocked.complete and not blocked.success then return nil end
  local c = task_counts(t)
  if jid then
    for _, s in ipairs(TASK_STATES) do
      if redis.call('SISMEMBER', t[s], jid) == 1 then
        c[s], c.total = c[s] - 1, c.total - 1
      end
    end
    c[state], c.total = c[state] + 1, c.total + 1
  end
  local total = tonumber(expected or m[6] or '')
  if c.enqueued + c.working + c.retry > 0 or (total and c.total < total) then return nil end
  if blocked.complete then return blocked.complete end
  if c.failed + c.error == 0 then return blocked.success end
  return nil
end

-- After a job reached a final state, or the task was sealed: is the task complete (sealed,
-- and every job final)? Then each callback is pushed once, ever: its mark (completed_at,
-- succeeded_at) is written by the same script that pushes it, and Redis runs scripts one at a
-- time, so two jobs ending at once on two hosts cannot both see the task complete without the
-- mark. A job that runs again after that (a kill, an operator's retry of a dead job) moves
-- between sets; on_complete never comes back, and on_success comes when the task turns
-- successful, once. Returns the counts, or nil if the task is gone.
local function task_settle(t, tid, prefix, queues_key)
  local m = redis.call('HMGET', t.meta, 'sealed', 'completed_at', 'succeeded_at',
                       'on_complete', 'on_success', 'ttl_success', 'ttl_failure', 'ttl_idle',
                       'touched_at', 'description', 'expected')
  if not m[6] then return nil end
  local now = task_now()
  local c = task_counts(t)
  -- (expected: the total its sealer announced; jobs pushed by another language's producer
  -- with only the payload field join the task as they start: until then they are not counted)
  if m[1] ~= '1' or c.enqueued + c.working + c.retry > 0
      or (m[11] and c.total < tonumber(m[11])) then
    if now - tonumber(m[9] or 0) >= TASK_TOUCH_EVERY then
      task_expire(t, tonumber(m[8]))
      redis.call('HSET', t.meta, 'touched_at', task_time(now))
    end
    return c
  end
  local success = c.failed + c.error == 0
  local summary = {task_id = tid, description = m[10] or '', total = c.total,
                   finished = c.finished, failed = c.failed, error = c.error,
                   complete = true, success = success}
  if not m[2] then
    redis.call('HSET', t.meta, 'completed_at', task_time(now))
    if m[4] then task_callback(m[4], 'complete', tid, summary, now, prefix, queues_key) end
  end
  if success and not m[3] then
    redis.call('HSET', t.meta, 'succeeded_at', task_time(now))
    if m[5] then task_callback(m[5], 'success', tid, summary, now, prefix, queues_key) end
  end
  task_expire(t, tonumber(success and m[6] or m[7]))
  return c
end
