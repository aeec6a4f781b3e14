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
-- Guard when ARGV[1] ~= '': the lease must be gone and the master still registered, else
-- nothing happens ({-1, 0}), so two masters reaping at once never requeue a job twice.
-- Returns {jobs requeued, jobs sent to dead}.
--
-- A job whose queue key holds another type (SET queue:x by mistake) cannot be pushed back:
-- RPUSH fails with WRONGTYPE. With redis.call that error aborted the script, so the slot was
-- never emptied and recovery failed for ever (and the slot was never reused). It goes to
-- dead instead, as it was, at Redis's current time, so it can be retried from there.
local owner = ARGV[1]
local q = tonumber(ARGV[2])
if owner ~= '' then
  if redis.call('EXISTS', KEYS[2]) == 1 then return {-1, 0} end
  if redis.call('HEXISTS', KEYS[1], owner) == 0 then return {-1, 0} end
end
local t = redis.call('TIME')
local now = t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
local qkey = {}
for j = 1, q do qkey[ARGV[2 + j]] = KEYS[3 + j] end
local moved = 0
local dead = 0
local function put_back(dest, payload)
  local ok = redis.pcall('RPUSH', dest, payload)
  if type(ok) == 'table' and ok.err then
    redis.call('ZADD', KEYS[3], now, payload)
    dead = dead + 1
  else
    moved = moved + 1
  end
end
local k = 4 + q
while k <= #KEYS do
  -- Latest reservation first, so the earliest one ends up at the far right and runs next.
  local members = redis.call('ZREVRANGE', KEYS[k], 0, -1)
  for _, m in ipairs(members) do
    local s = string.find(m, '\0', 1, true)
    local e = string.find(m, '\0', s + 1, true)
    local queue = string.sub(m, 1, s - 1)
    put_back(qkey[queue] or KEYS[4], string.sub(m, e + 1))
  end
  redis.call('DEL', KEYS[k])
  for j = 1, q do
    -- RPOP + RPUSH is LMOVE RIGHT RIGHT, with the push's error caught.
    local landed = redis.call('RPOP', KEYS[k + j])
    while landed do
      put_back(KEYS[3 + j], landed)
      landed = redis.call('RPOP', KEYS[k + j])
    end
  end
  k = k + 1 + q
end
if owner ~= '' then redis.call('HDEL', KEYS[1], owner) end
return {moved, dead}
