-- limit_window.lua: take one unit of a window limiter: SIZE in any rolling interval of SECONDS
-- (a grant at t counts until t + SECONDS), every process on the Redis together.
--
-- KEYS[1]  the limiter's hash     KEYS[2]  its state zset (grants, scored by their time)
-- KEYS[3]  the index of limiters
-- ARGV[1]  size    ARGV[2]  the interval in seconds    ARGV[3]  now or ''
-- ARGV[4]  ms waited so far, or ''    ARGV[5]  ms the caller may still wait
-- ARGV[6]  the definition (JSON)      ARGV[7]  the name    ARGV[8]  this take's token
-- Returns {1, 0} granted, or {0, ms until the oldest grant leaves the window}.
local now = limit_now(ARGV[3])
local size, length = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', limit_time(now - length))
local granted = redis.call('ZCARD', KEYS[2]) < size
local wait_ms = 0
if granted then
  redis.call('ZADD', KEYS[2], limit_time(now), ARGV[8])
  redis.call('PEXPIRE', KEYS[2], math.ceil(length * 1000) + 1000)
else
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  wait_ms = math.max(1, math.ceil((tonumber(oldest[2]) + length - now) * 1000))
end
limit_count(KEYS[1], KEYS[3], ARGV[7], ARGV[6], now, granted, ARGV[4], ARGV[5], wait_ms)
return {granted and 1 or 0, wait_ms}
