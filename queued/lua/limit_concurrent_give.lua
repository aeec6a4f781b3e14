-- limit_concurrent_give.lua: give back one unit of a concurrent limiter: its lease goes, a
-- token goes to the wake list for a waiter (BLPOP), and the job parked longest on this limiter
-- (an OverLimit reschedule) is woken: its schedule entry brought forward to now.
--
-- KEYS[1]  the limiter's hash     KEYS[2]  its leases zset    KEYS[3]  its wake list
-- KEYS[4]  its parked zset        KEYS[5]  the schedule zset
-- ARGV[1]  the token of the take  ARGV[2]  size   ARGV[3]  now or ''
-- ARGV[4]  seconds of jitter for a parked job woken here
-- Returns 1, or 0 if the lease was gone (held past lock_timeout and taken back meanwhile).
local now = limit_now(ARGV[3])
local size = tonumber(ARGV[2])
local gave = redis.call('ZREM', KEYS[2], ARGV[1])
if gave == 1 then limit_wake(KEYS[3], KEYS[4], KEYS[5], size, now, tonumber(ARGV[4]), 1) end
limit_reclaim(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], size, now, tonumber(ARGV[4]))
return gave
