-- limit_leaky.lua: take one unit of a leaky bucket: it holds SIZE units and drains SIZE per
-- SECONDS, continuously (a burst of SIZE, then one every SECONDS / SIZE), every process on the
-- Redis together.
--
-- KEYS[1]  the limiter's hash     KEYS[2]  its state hash (level, at)
-- KEYS[3]  the index of limiters
-- ARGV[1]  size    ARGV[2]  seconds to drain SIZE    ARGV[3]  now or ''
-- ARGV[4]  ms waited so far, or ''    ARGV[5]  ms the caller may still wait
-- ARGV[6]  the definition (JSON)      ARGV[7]  the name
-- Returns {1, 0} granted, or {0, ms until one unit has drained}.
local now = limit_now(ARGV[3])
local size, length = tonumber(ARGV[1]), tonumber(ARGV[2])
local rate = size / length
local state = redis.call('HMGET', KEYS[2], 'level', 'at')
local level = 0
if state[1] then
  level = math.max(0, tonumber(state[1]) - math.max(0, now - tonumber(state[2])) * rate)
end
-- (a level within a microsecond's drain of the brim counts as room: float sums are not exact)
local granted = level + 1 <= size + rate / 1000000
local wait_ms = 0
if granted then level = level + 1 else
  wait_ms = math.max(1, math.ceil((level + 1 - size) / rate * 1000))
end
redis.call('HSET', KEYS[2], 'level', string.format('%.9f', level), 'at', limit_time(now))
redis.call('PEXPIRE', KEYS[2], math.ceil(length * 1000) + 1000)
limit_count(KEYS[1], KEYS[3], ARGV[7], ARGV[6], now, granted, ARGV[4], ARGV[5], wait_ms)
return {granted and 1 or 0, wait_ms}
