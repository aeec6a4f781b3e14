-- limit_bucket.lua: take one unit of a bucket limiter: SIZE per calendar second, minute, hour or
-- day (UTC), every process on the Redis together.
--
-- KEYS[1]  the limiter's hash     KEYS[2]  its state hash (bucket, count)
-- KEYS[3]  the index of limiters
-- ARGV[1]  size    ARGV[2]  the bucket's length in seconds    ARGV[3]  now or ''
-- ARGV[4]  ms waited so far, or ''    ARGV[5]  ms the caller may still wait
-- ARGV[6]  the definition (JSON)      ARGV[7]  the name
-- Returns {1, 0} granted, or {0, ms until the next bucket starts}.
local now = limit_now(ARGV[3])
local size, length = tonumber(ARGV[1]), tonumber(ARGV[2])
local bucket = math.floor(now / length) * length
local state = redis.call('HMGET', KEYS[2], 'bucket', 'count')
local count = 0
if state[1] and tonumber(state[1]) == bucket then count = tonumber(state[2]) end
local granted = count < size
local wait_ms = 0
if granted then
  redis.call('HSET', KEYS[2], 'bucket', bucket, 'count', count + 1)
  redis.call('PEXPIRE', KEYS[2], math.ceil((bucket + length - now) * 1000) + 1000)
else
  wait_ms = math.max(1, math.ceil((bucket + length - now) * 1000))
end
limit_count(KEYS[1], KEYS[3], ARGV[7], ARGV[6], now, granted, ARGV[4], ARGV[5], wait_ms)
return {granted and 1 or 0, wait_ms}
