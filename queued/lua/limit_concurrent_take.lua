-- limit_concurrent_take.lua: try to take one unit of a concurrent limiter (a semaphore shared by
-- every process on the Redis). A unit is a lease in a zset, scored by when it ends (Redis's
-- clock + lock_timeout): a holder that crashed never gives its unit back, so a lease past its
-- end is taken back here (and on every release), and a waiter woken for it. The caller that
-- gets nothing waits on the wake list (BLPOP: no polling) until a release pushes to it, or
-- until the earliest lease ends, whichever comes first. Units taken back wake as many waiters
-- and parked jobs as stay free once this take has its own: a parked job woken at a crashed
-- holder's lease end (limit_park.lua) takes that unit here, and must not wake another parked
-- job for it (that one would find no unit, and spend a reschedule).
--
-- KEYS[1]  the limiter's hash     KEYS[2]  its leases zset    KEYS[3]  its wake list
-- KEYS[4]  its parked zset        KEYS[5]  the schedule zset  KEYS[6]  the index of limiters
-- ARGV[1]  size         ARGV[2]  this take's token    ARGV[3]  lock_timeout in ms
-- ARGV[4]  now or ''    ARGV[5]  ms waited so far, or '' on a first try
-- ARGV[6]  ms the caller may still wait   ARGV[7]  the definition (JSON)   ARGV[8]  the name
-- ARGV[9]  seconds of jitter for a parked job woken here
-- Returns {1, 0} granted, or {0, ms until the earliest lease ends}.
local now = limit_now(ARGV[4])
local size = tonumber(ARGV[1])
local back = limit_take_back(KEYS[1], KEYS[2], now)
local granted = redis.call('ZCARD', KEYS[2]) < size
local wait_ms = 0
if granted then
  local ttl = tonumber(ARGV[3])
  redis.call('ZADD', KEYS[2], limit_time(now + ttl / 1000), ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ttl + 60000)
end
if back > 0 then
  limit_wake(KEYS[3], KEYS[4], KEYS[5], size, now, tonumber(ARGV[9]),
             math.min(back, size - redis.call('ZCARD', KEYS[2])))
end
if not granted then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  wait_ms = math.max(1, math.ceil((tonumber(first[2]) - now) * 1000))
end
limit_count(KEYS[1], KEYS[6], ARGV[8], ARGV[7], now, granted, ARGV[5], ARGV[6],
            granted and 0 or -1)
return {granted and 1 or 0, wait_ms}
