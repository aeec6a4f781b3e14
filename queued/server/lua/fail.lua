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
-- ARGV[6]  dead trim: ZREMRANGEBYRANK dead 0 ARGV[6] (-dead_max_jobs: Sidekiq's trim)
-- Returns 1 if written, 0 if the reservation was gone, -1 if the target key holds another
-- Redis type (SET retry oops by mistake).
--
-- The target's type is checked before the first write. Redis does not roll a script back, and
-- this script used to ZREM the reservation and then fail on the ZADD with WRONGTYPE: the job
-- was in neither place. Now nothing is written but a mark: the reservation's score becomes -1,
-- so reserve.lua does not hand it out again while the caller keeps retrying the write (it
-- stays reserved, and goes back to its queue if the caller dies).
if ARGV[2] ~= 'drop' then
  local t = redis.call('TYPE', KEYS[2])['ok']
  if t ~= 'zset' and t ~= 'none' then
    if redis.call('ZSCORE', KEYS[1], ARGV[1]) == false then return 0 end
    redis.call('ZADD', KEYS[1], 'XX', -1, ARGV[1])
    return -1
  end
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if ARGV[2] == 'retry' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
elseif ARGV[2] == 'dead' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[5])
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, ARGV[6])
end
return 1
