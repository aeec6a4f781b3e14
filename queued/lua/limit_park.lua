-- limit_park.lua: a job whose limiter raised OverLimit is rescheduled. The worker has moved it
-- from its reservation to the schedule zset at its latest time first (fail.lua "later": Sidekiq
-- Enterprise's linear backoff, the cap, 300 * overrated + rand(300) + 1 seconds); this brings
-- it forward to when the limiter has room, so work does not wait minutes after capacity frees
-- (sidekiq #5118, #6010), and nothing polls:
-- - a concurrent limiter: the job is parked (its schedule member in the parked zset) and the
--   next release wakes the longest parked (limit_wake); if a unit is free right now (released
--   between the OverLimit and this call) it runs again at once. Because the job is in the
--   schedule before it is parked, a release can never pop it from the parked zset before its
--   schedule entry exists (a wake that found nothing was lost: the job slept until its cap
--   with the limiter idle). The k-th job parked runs at the latest when the k-th lease ends
--   (lock_timeout), so a crashed holder's unit wakes a parked job even with no other traffic:
--   its take then finds the lease expired and takes the unit back;
-- - a bucket, window or leaky limiter: room comes at a known time (the caller's wait). Jobs
--   parked on one limiter are spread out at its rate from then on (SECONDS / SIZE apart: the
--   hash's next_wake), so a backlog wakes a few at a time instead of all at the turn of the
--   window, and each waits its turn instead of spending its reschedules.
-- The schedule entry moves only forward (ZADD XX LT), and only if it is there: a job whose end
-- was not written (its reservation recovered meanwhile) is not added here.
--
-- KEYS[1]  the limiter's hash   KEYS[2]  its parked zset   KEYS[3]  its leases zset
-- KEYS[4]  the overlimit counter (Keys.counter)            KEYS[5]  the schedule zset
-- ARGV[1]  kind (concurrent, bucket, window, leaky)   ARGV[2]  now or ''
-- ARGV[3]  the cap in seconds    ARGV[4]  seconds until the limiter has room (-1: unknown)
-- ARGV[5]  seconds between two wakes (SECONDS / SIZE)  ARGV[6]  jitter in seconds
-- ARGV[7]  the job's payload as it is in the schedule zset   ARGV[8]  size
-- ARGV[9]  how long the parked zset is kept, in ms
-- Returns the time (epoch seconds, as text) the job is scheduled at now (its cap, or earlier).
local now = limit_now(ARGV[2])
local cap = now + tonumber(ARGV[3])
local jitter = tonumber(ARGV[6])
local wake = cap
if ARGV[1] == 'concurrent' then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', limit_time(now))
  if redis.call('ZCARD', KEYS[3]) < tonumber(ARGV[8]) then
    wake = math.min(cap, now + jitter)
  else
    redis.call('ZADD', KEYS[2], limit_time(now), ARGV[7])
    redis.call('PEXPIRE', KEYS[2], ARGV[9])
    local k = redis.call('ZCARD', KEYS[2])
    local lease = redis.call('ZRANGE', KEYS[3], k - 1, k - 1, 'WITHSCORES')
    if lease[2] then
      -- (a hundredth of a second past the lease's end: a scheduler whose clock runs a little
      -- ahead of Redis's must not wake the job before its take can take the lease back)
      wake = math.min(cap, tonumber(lease[2]) + 0.01 + jitter)
    end
  end
else
  local slot = math.max(now + math.max(0, tonumber(ARGV[4])),
                        tonumber(redis.call('HGET', KEYS[1], 'next_wake') or 0))
  if slot + jitter < cap then
    wake = slot + jitter
    redis.call('HSET', KEYS[1], 'next_wake', limit_time(slot + tonumber(ARGV[5])))
  end
end
if wake < cap then
  redis.call('ZADD', KEYS[5], 'XX', 'LT', limit_time(wake), ARGV[7])
end
redis.call('HINCRBY', KEYS[1], 'rescheduled', 1)
redis.call('INCR', KEYS[4])
return limit_time(wake)
