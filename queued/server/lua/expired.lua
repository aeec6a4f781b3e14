-- expired.lua: a job taken past its expires_at is dropped unrun (queued/server/guards.py): count
-- it, and give up its unique lock if it still holds one. Its reservation ends by fail.lua
-- ("drop", with its move to error in its task), sent right after this.
--
-- KEYS[1]  the expired counter (Keys.counter)
-- KEYS[2]  the job's unique lock (Keys.unique), when it is a unique job
-- ARGV[1]  the job's jid
-- Returns 1.
redis.call('INCR', KEYS[1])
if KEYS[2] and redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
