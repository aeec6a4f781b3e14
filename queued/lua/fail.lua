-- fail.lua: record a failed job in retry or dead and drop its reservation, in one step, so a
-- crash can never leave both or neither. Does nothing if the reservation is already gone
-- (another master recovered it after a lease expiry): the job is back in a queue then, and
-- writing a retry too would run it twice.
--
-- KEYS[1]  reserved zset of the slot
-- KEYS[2]  target zset: retry or dead (ignored for drop)
-- ARGV[1]  reserved member
-- ARGV[2]  kind: retry | dead | drop
-- ARGV[3]  score (float epoch seconds)
-- ARGV[4]  payload JSON to store
-- ARGV[5]  dead trim: remove scores <= this (now - dead_timeout_in_seconds)
-- ARGV[6]  dead trim: keep this many newest (Sidekiq: ZREMRANGEBYRANK dead 0 -max)
-- Returns 1 if written, 0 if the reservation was gone.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if ARGV[2] == 'retry' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
elseif ARGV[2] == 'dead' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[5])
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -tonumber(ARGV[6]))
end
return 1
