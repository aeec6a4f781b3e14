-- expired.lua: a job taken past its expires_at is dropped unrun (queued/server/guards.py): count
-- it, and give up its unique lock if it still holds one (as its jid, or "<jid>:<nonce>": see
-- unique_release.lua). Its reservation ends by fail.lua
-- ("drop", with its move to error in its task), sent right after this.
--
-- KEYS[1]  the expired counter (Keys.counter)
-- KEYS[2]  the job's unique lock (Keys.unique), when it is a unique job
-- ARGV[1]  the job's jid
-- Returns 1.
redis.call('INCR', KEYS[1])
if KEYS[2] then
  local holder = redis.call('GET', KEYS[2])
  if holder and (holder == ARGV[1] or string.sub(holder, 1, #ARGV[1] + 1) == ARGV[1] .. ':') then
    redis.call('DEL', KEYS[2])
  end
end
return 1
