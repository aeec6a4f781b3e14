-- requeue.lua: put every job a worker slot holds back at the head (right end) of its queue,
-- each exactly once. Used by the master the moment a worker exits, and by any master for all
-- slots of a master whose lease has expired (its host died).
--
-- KEYS[1]                     queued:masters hash
-- KEYS[2]                     the owner's lease key
-- KEYS[3..2+Q]                queue lists of the owner's queues
-- then per slot, 1+Q keys:    reserved zset, then one landing list per queue (same order)
-- ARGV[1]  owner identity when reaping an expired master, or '' for a single exited worker
-- ARGV[2]  Q
-- ARGV[3..2+Q] queue names, in KEYS order
-- Guard when ARGV[1] ~= '': the lease must be gone and the master still registered, else
-- nothing happens (-1), so two masters reaping at once never requeue a job twice.
-- Returns the number of jobs requeued.
local owner = ARGV[1]
local q = tonumber(ARGV[2])
if owner ~= '' then
  if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
  if redis.call('HEXISTS', KEYS[1], owner) == 0 then return -1 end
end
local qkey = {}
for j = 1, q do qkey[ARGV[2 + j]] = KEYS[2 + j] end
local moved = 0
local k = 3 + q
while k <= #KEYS do
  -- Latest reservation first, so the earliest one ends up at the far right and runs next.
  local members = redis.call('ZREVRANGE', KEYS[k], 0, -1)
  for _, m in ipairs(members) do
    local s = string.find(m, '\0', 1, true)
    local e = string.find(m, '\0', s + 1, true)
    local queue = string.sub(m, 1, s - 1)
    local dest = qkey[queue] or KEYS[3]
    redis.call('RPUSH', dest, string.sub(m, e + 1))
    moved = moved + 1
  end
  redis.call('DEL', KEYS[k])
  for j = 1, q do
    while redis.call('LMOVE', KEYS[k + j], KEYS[2 + j], 'RIGHT', 'RIGHT') do
      moved = moved + 1
    end
  end
  k = k + 1 + q
end
if owner ~= '' then redis.call('HDEL', KEYS[1], owner) end
return moved
