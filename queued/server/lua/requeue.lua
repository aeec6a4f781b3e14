-- requeue.lua: put every job a worker slot holds back at the head (right end) of its queue,
-- each exactly once. Used by the master the moment a worker exits, and by any master for all
-- slots of a master whose lease has expired (its host died).
--
-- KEYS[1]                     queued:masters hash
-- KEYS[2]                     the owner's lease key
-- KEYS[3]                     dead zset (for a job whose queue key is not a list)
-- KEYS[4..3+Q]                queue lists of the owner's queues
-- then per slot, 1+Q keys:    reserved zset, then one landing list per queue (same order)
-- ARGV[1]  owner identity when reaping an expired master, or '' for a single exited worker
-- ARGV[2]  Q
-- ARGV[3..2+Q] queue names, in KEYS order
-- then     R, followed by R pairs (reserved member, payload to push instead of its own): the
--          job the worker died under goes back carrying its crash count (recovery.py)
-- then     K, followed by K reserved members to leave where they are (a failure the master
--          could not write yet, and retries: recovery.py)
-- Guard when ARGV[1] ~= '': the lease must be gone and the master still registered, else
-- nothing happens ({-1, 0, 0}), so two masters reaping at once never requeue a job twice.
-- Returns {jobs requeued, jobs sent to dead, jobs left in place because neither their queue
-- key nor dead is usable}.
--
-- A job whose queue key holds another type (SET queue:x by mistake) cannot be pushed back
-- (RPUSH: WRONGTYPE), so it goes to dead instead, as it was, at Redis's current time, so it can
-- be retried from there. If dead holds another type as well, the job stays in the slot: types
-- are checked before each job's first write, because Redis does not roll a script back and a
-- failing write in the middle left some jobs pushed and still reserved (pushed twice by the
-- next attempt) and the slot never emptied. A registration with jobs left in place is kept,
-- so the reap is tried again.
local owner = ARGV[1]
local q = tonumber(ARGV[2])
if owner ~= '' then
  if redis.call('EXISTS', KEYS[2]) == 1 then return {-1, 0, 0} end
  if redis.call('HEXISTS', KEYS[1], owner) == 0 then return {-1, 0, 0} end
end
local a = 3 + q
local replace = {}
for j = 1, tonumber(ARGV[a]) do
  replace[ARGV[a + 2 * j - 1]] = ARGV[a + 2 * j]
end
a = a + 1 + 2 * tonumber(ARGV[a])
local keep = {}
for j = 1, tonumber(ARGV[a]) do keep[ARGV[a + j]] = true end

local t = redis.call('TIME')
local now = t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
local function usable(key, want)
  local kind = redis.call('TYPE', key)['ok']
  return kind == 'none' or kind == want
end
local dead_ok = usable(KEYS[3], 'zset')
local qkey = {}
for j = 1, q do qkey[ARGV[2 + j]] = KEYS[3 + j] end
local moved, dead, stuck = 0, 0, 0
-- Push one job back, or to dead; false if it has nowhere to go (it must stay where it is).
local function put_back(dest, payload)
  if usable(dest, 'list') then
    redis.call('RPUSH', dest, payload)
    moved = moved + 1
  elseif dead_ok then
    redis.call('ZADD', KEYS[3], now, payload)
    dead = dead + 1
  else
    stuck = stuck + 1
    return false
  end
  return true
end
local k = 4 + q
while k <= #KEYS do
  -- Latest reservation first, so the earliest one ends up at the far right and runs next.
  -- (A slot key clobbered by hand is left alone, and counted as one stuck job.)
  local members = {}
  if usable(KEYS[k], 'zset') then
    members = redis.call('ZREVRANGE', KEYS[k], 0, -1)
  else
    stuck = stuck + 1
  end
  for _, m in ipairs(members) do
    if not keep[m] then
      local s = string.find(m, '\0', 1, true)
      local e = string.find(m, '\0', s + 1, true)
      local queue = string.sub(m, 1, s - 1)
      if put_back(qkey[queue] or KEYS[4], replace[m] or string.sub(m, e + 1)) then
        redis.call('ZREM', KEYS[k], m)
      end
    end
  end
  for j = 1, q do
    -- The oldest landed job is at the right end: push it back first. LINDEX before RPOP, so
    -- a job with nowhere to go stays in its landing list.
    local landed = false
    if usable(KEYS[k + j], 'list') then
      landed = redis.call('LINDEX', KEYS[k + j], -1)
    else
      stuck = stuck + 1
    end
    while landed and put_back(KEYS[3 + j], landed) do
      redis.call('RPOP', KEYS[k + j])
      landed = redis.call('LINDEX', KEYS[k + j], -1)
    end
  end
  k = k + 1 + q
end
if owner ~= '' and stuck == 0 then redis.call('HDEL', KEYS[1], owner) end
return {moved, dead, stuck}
