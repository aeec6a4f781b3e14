-- unique_start.lua: a unique job is about to start (the worker, queued/server/guards.py). It may
-- run if no other job holds its lock: it then holds the lock (taking it if it is free: a Ruby or
-- PHP producer pushed it without one), or, with unique_until "start", gives it up now. If
-- another jid holds it, a copy of this job is pending or running: this one must not run now.
-- A lock held by this jid is its own (taken at its push, or at an earlier start of this same
-- job before a retry or a crash): never a conflict. So is one held as "<jid>:<nonce>": a run
-- of this job from before it had a jid of its own (pushed without one: unique.run_holder).
--
-- KEYS[1]  the job's lock (Keys.unique)
-- KEYS[2]  the unique_deferred counter (Keys.counter)
-- ARGV[1]  what the lock holds for this run: the job's jid, or "<jid>:<nonce>"
-- ARGV[2]  the lock's TTL in ms, if it is taken here (unique_for)
-- ARGV[3]  "hold" (unique until success) or "start" (unique until start)
-- Returns 0: run it; else the ms the other holder's lock has left (-1: it has no TTL).
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1]
    and string.sub(holder, 1, #ARGV[1] + 1) ~= ARGV[1] .. ':' then
  redis.call('INCR', KEYS[2])
  return redis.call('PTTL', KEYS[1])
end
if ARGV[3] == 'start' then
  if holder then redis.call('DEL', KEYS[1]) end
elseif not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 0
