-- due.lua: list the jobs of the retry and schedule zsets whose time has come, by Redis's
-- clock, in one call (the scheduler leader makes this call many times a second).
-- Read-only; enqueue_due.lua moves them, so a crash between the two loses nothing.
--
-- KEYS[1..]  zsets, in the order to serve them (retry, then schedule: Sidekiq's order)
-- ARGV[1]    the most members to return per zset
-- ARGV[2..]  per zset, how many due members to pass over first (those the caller could not
--            move in this round: see enqueue_due.lua), in KEYS order
-- Returns {now, next_score_or_false, {names of KEYS that are not zsets}, count for KEYS[1],
-- members of KEYS[1]..., count for KEYS[2], members...}: next_score is the earliest score
-- still in the future over all the zsets, so the scheduler can sleep exactly until then.
--
-- A key of another type (SET retry oops by mistake) is passed over and named in the reply:
-- ZRANGEBYSCORE on it is a WRONGTYPE error, which aborted the whole call, so a broken retry
-- key stopped schedule from being served as well.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local limit = tonumber(ARGV[1])
local bad = {}
local out = {tostring(now), false, bad}
local soonest = nil
for i, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key)['ok']
  local due = {}
  if kind == 'zset' then
    due = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', tonumber(ARGV[1 + i]), limit)
    local nxt = redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if nxt[2] and (soonest == nil or tonumber(nxt[2]) < soonest) then
      soonest = tonumber(nxt[2])
    end
  elseif kind ~= 'none' then
    bad[#bad + 1] = key
  end
  out[#out + 1] = #due
  for _, m in ipairs(due) do out[#out + 1] = m end
end
if soonest then out[2] = tostring(soonest) end
return out
