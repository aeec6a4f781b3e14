-- due.lua: list the jobs of a schedule or retry zset whose time has come, by Redis's clock.
-- Read-only; enqueue_due.lua moves them, so a crash between the two loses nothing.
--
-- KEYS[1]  zset (schedule or retry)
-- ARGV[1]  the most members to return
-- Returns {now, next_score_or_false, member...}: next_score is the earliest score still in
-- the future, so the scheduler can sleep exactly until then.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local nxt = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local out = {tostring(now), nxt[2] or false}
for _, m in ipairs(due) do out[#out + 1] = m end
return out
