-- reserve.lua: ack the jobs the worker finished and take up to N more for its slot, in one
-- round trip, atomically, under Redis's clock. Each job is popped from the RIGHT end of its
-- queue (producers LPUSH, so FIFO) and added to the slot's reserved zset. Jobs a blocked
-- worker BLMOVEd into its landing list come first.
--
-- KEYS[1]          reserved zset of the slot (member: queue NUL token NUL payload)
-- KEYS[2]          landing list of the slot for the queue named in ARGV[3] (may be empty)
-- KEYS[3]          queued:masters hash (the registrations)
-- KEYS[4]          paused set (queue names nobody takes from: Sidekiq Pro's key)
-- KEYS[5..4+Q]     queue lists, in the same order as the names in ARGV
-- ARGV[1]          N, the most jobs to reserve
-- ARGV[2]          Q, the number of queues
-- ARGV[3]          name of the queue KEYS[2] belongs to
-- ARGV[4]          the identity of the worker's master
-- ARGV[5]          1: adopt (see Adoption below); 0: the worker holds jobs running now (a
--                  worker of many jobs at once), so the zset's other members are not lost ones
-- ARGV[6]          A, the number of acks that follow
-- ARGV[7..6+A]     reserved members the worker finished (ZREM)
-- ARGV[7+A..6+A+Q] queue names for KEYS[5..]
-- then             N fetch orders of Q 1-based queue indexes each: job i tries its own order,
--                  so weighted random order is drawn per job exactly as Sidekiq draws per fetch
-- Returns one flat array {acked, adopted, landed, registered, nbad, npaused, member...,
-- bad..., paused...}: the acks that found their reservation, the number of adopted members,
-- the number taken from the landing list, 1 if the master is registered (else 0, and nothing
-- taken), then how many names of queues whose key is not a list (bad) and of queues paused
-- now follow the members. Members come earliest first (adopted ones first, then the landed
-- ones, then the queues'). Scores grow by 1 us per job so ZRANGE 0 0 is the job the worker
-- runs first. Flat, not nested (issue 18): Redis 7.0 builds each Lua table reply with a
-- deferred length, so every nested table split the reply into more buffers (one writev of 4
-- pieces per call, where a flat reply is one write of one buffer).
--
-- A queue key of another type (SET queue:x by mistake) is skipped and named in the reply:
-- RPOP on it is a WRONGTYPE error, and with redis.call that error aborted the whole script,
-- so one broken queue stopped every fetch of every worker (they crash-looped).
--
-- Adoption: the worker calls this holding nothing but the acks it sends (and failures it could
-- not write yet, scored -1 by fail.lua and skipped here). Any other member of
-- its reserved zset was reserved by a call whose reply it never read: Redis ran the script and
-- the connection broke before the reply arrived (Redis shut down right after it, a socket
-- timeout while Redis was frozen, or the slot's previous worker was SIGKILLed with the call in
-- flight and Redis ran it after the master had emptied the slot). Nobody else would ever run
-- or release such a job while this worker lives, so it is handed to the worker now.
--
-- Our own keys are checked before the first write (no script is rolled back: an error after
-- the acks' ZREM would leave them applied and the batch untaken). Clobbered by hand, they make
-- the call fail whole, and the worker backs off and says so.
for _, key in ipairs({KEYS[1], KEYS[2]}) do
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'none' and kind ~= (key == KEYS[1] and 'zset' or 'list') then
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not queued\'s')
  end
end
local t = redis.call('TIME')
local n = tonumber(ARGV[1])
local q = tonumber(ARGV[2])
local adopt = ARGV[5] == '1'
local a = tonumber(ARGV[6])
local names = 6 + a
-- Commands take many arguments at once (one ZREM for the acks, one RPOP with a count per
-- queue where the order is fixed, one ZADD for the batch): each redis.call costs about as
-- much as the command itself, so a batch of 8 cost ~14 us of Redis time per job one by one.
local CHUNK = 1000  -- unpack() is bounded by Lua's C stack
local function variadic(cmd, key, list, first, last)
  local total = 0
  for i = first, last, CHUNK do
    total = total + redis.call(cmd, key, unpack(list, i, math.min(i + CHUNK - 1, last)))
  end
  return total
end
local registered = redis.call('HEXISTS', KEYS[3], ARGV[4]) == 1  -- (read before any write)
local acked = variadic('ZREM', KEYS[1], ARGV, 7, names)
local bad = {}
local paused = {}
local out = {acked, 0, 0, 1, 0, 0}
local head = #out  -- (the members' tokens and scores count from here: keep it at 6)

-- A master whose registration is gone was reaped: its lease expired (it was frozen, or cut
-- off from Redis) and another master put back what its slots held. Its workers went on
-- reserving meanwhile, into slots nobody would ever recover if the host died before the master
-- woke and registered again. So: take nothing while unregistered, and put back what the slot
-- holds beyond the acks (a lost reply's jobs, a landed job) at the head of its queue. (Without
-- adoption the zset holds jobs running now: only the landed ones go back; the master's next
-- beat registers it again, well before those end.)
if not registered then
  local qkey = {}
  for j = 1, q do qkey[ARGV[names + j]] = KEYS[4 + j] end
  local function back(queue, payload)
    local key = qkey[queue]
    local kind = key and redis.call('TYPE', key)['ok']
    if kind == 'list' or kind == 'none' then
      redis.call('RPUSH', key, payload)
      return true
    end
    return false
  end
  for _, m in ipairs(adopt and redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf') or {}) do
    local s = string.find(m, '\0', 1, true)
    local e = string.find(m, '\0', s + 1, true)
    if back(string.sub(m, 1, s - 1), string.sub(m, e + 1)) then
      redis.call('ZREM', KEYS[1], m)
    end
  end
  local landed = redis.call('LINDEX', KEYS[2], -1)
  while landed and back(ARGV[3], landed) do
    redis.call('RPOP', KEYS[2])
    landed = redis.call('LINDEX', KEYS[2], -1)
  end
  out[4] = 0
  return out
end

-- (from score 0: a job whose failure could not be written yet is marked -1 by fail.lua and
-- stays with the worker that keeps retrying the write)
for _, m in ipairs(adopt and redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf') or {}) do
  out[#out + 1] = m
end
out[2] = #out - head
local adds = {}
-- A job's token is TIME.#out and its score TIME + #out microseconds, both made with no
-- floating-point formatting (issue 18): a Lua number made a string is a %.14g sprintf (the
-- token's #out), and a number passed to ZADD is Redis's %.17g sprintf, then its strtod; that
-- was ~7k of Redis's ~55k instructions per job, and this saves ~2.5k (docs/benchmarks.md).
-- Places up to 40 come from a literal table (prefetch is 32 by default; 6 come first); ZADD reads
-- the decimal string as the time to the microsecond, so the order is the order taken.
local sec, usec = tonumber(t[1]), tonumber(t[2])
local prefix = t[1] .. '.' .. t[2] .. '.'
local IDX = {'1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15',
  '16', '17', '18', '19', '20', '21', '22', '23', '24', '25', '26', '27', '28', '29', '30',
  '31', '32', '33', '34', '35', '36', '37', '38', '39', '40'}
local function keep(queue, payload)
  local k = #out
  local member = queue .. '\0' .. prefix .. (IDX[k] or string.format('%d', k)) .. '\0' .. payload
  local us = usec + k
  adds[#adds + 1] = string.format('%d.%06d', sec + math.floor(us / 1000000), us % 1000000)
  adds[#adds + 1] = member
  out[#out + 1] = member
end
local landed = redis.call('RPOP', KEYS[2])
while landed do
  keep(ARGV[3], landed)
  landed = redis.call('RPOP', KEYS[2])
end
out[3] = #out - head - out[2]
-- A paused queue is passed over (its jobs stay put; a job that landed before the pause is
-- run). One EXISTS when nothing is paused.
local broken = {}
if redis.call('EXISTS', KEYS[4]) == 1 then
  for j = 1, q do
    if redis.call('SISMEMBER', KEYS[4], ARGV[names + j]) == 1 then
      broken[j] = true
      paused[#paused + 1] = ARGV[names + j]
    end
  end
end
local function pop(idx, count)
  if broken[idx] then return nil end
  local got = redis.pcall('RPOP', KEYS[4 + idx], count)
  if type(got) == 'table' and got.err then
    broken[idx] = true
    bad[#bad + 1] = ARGV[names + idx]
    return nil
  end
  return got
end
local first = names + q
if #ARGV == first + q then
  -- One order for every job (strict, or a single queue): take what each queue has, in turn.
  for j = 1, q do
    local want = n - (#out - head)
    if want <= 0 then break end
    local idx = tonumber(ARGV[first + j])
    for _, payload in ipairs(pop(idx, want) or {}) do
      keep(ARGV[names + idx], payload)
    end
  end
else
  -- Weighted: every job draws its own order, as Sidekiq draws one per fetch.
  local order = first
  while #out - head < n do
    local got = false
    for j = 1, q do
      local idx = tonumber(ARGV[order + j])
      local payload = pop(idx, 1)
      if payload then
        keep(ARGV[names + idx], payload[1])
        got = true
        break
      end
    end
    if not got then break end
    order = order + q
    if order + q > #ARGV then order = first end
  end
end
if #adds > 0 then
  for i = 1, #adds, CHUNK do
    redis.call('ZADD', KEYS[1], unpack(adds, i, math.min(i + CHUNK - 1, #adds)))
  end
end
out[5] = #bad
out[6] = #paused
for _, name in ipairs(bad) do out[#out + 1] = name end
for _, name in ipairs(paused) do out[#out + 1] = name end
return out
