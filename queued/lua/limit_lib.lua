-- limit_lib.lua: what every limiter script shares (queued/limiter.py puts it in front of them).
--
-- A limiter's hash (Keys.limiter(name)) keeps its definition as its last user gave it ("def",
-- JSON: kind, size, interval, wait_timeout, lock_timeout, reschedule) and its counts: "held"
-- (units granted at once), "waited" (granted after waiting) and "wait_ms" (their waits),
-- "overlimit" (OverLimit raised: no unit within wait_timeout), "rescheduled" (jobs parked after
-- one), "reclaimed" (concurrent: units of holders past lock_timeout taken back). The index of
-- limiters (Keys.limiters) scores each name by its last use (to the minute); both live
-- LIMITER_TTL past it.
local LIMITER_TTL = 90 * 24 * 3600
local LIMITER_REFRESH = 60

-- The time in seconds: the caller's (an injected clock, in tests) or Redis's own.
local function limit_now(given)
  if given ~= '' then return tonumber(given) end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- Times go out as text with microseconds (a Lua number given to redis.call keeps 14 digits).
local function limit_time(x)
  return string.format('%.6f', x)
end

-- Record one take: the definition, the index, and what happened. ``waited`` is '' on a first
-- try, else the ms the caller has waited; ``left`` the ms it may still wait (a refusal with
-- no time left is an OverLimit). ``wait_ms``: when a unit comes (-1: unknown, concurrent).
local function limit_count(hash, index, name, def, now, granted, waited, left, wait_ms)
  -- (the definition, the index and their TTL are written at most once a minute per limiter:
  -- three writes a take were a third of a take's cost in Redis)
  local seen = redis.call('ZSCORE', index, name)
  seen = seen and tonumber(seen)
  if not seen or now - seen > LIMITER_REFRESH or now < seen then
    redis.call('HSET', hash, 'def', def)
    redis.call('EXPIRE', hash, LIMITER_TTL)
    redis.call('ZADD', index, limit_time(now), name)
  end
  if granted then
    if waited == '' then
      redis.call('HINCRBY', hash, 'held', 1)
    else
      redis.call('HINCRBY', hash, 'waited', 1)
      redis.call('HINCRBY', hash, 'wait_ms', math.floor(tonumber(waited)))
    end
  elseif (wait_ms < 0 and tonumber(left) <= 0) or (wait_ms >= 0 and wait_ms > tonumber(left)) then
    redis.call('HINCRBY', hash, 'overlimit', 1)
  end
end

-- Concurrent limiters. A released (or taken back) unit pushes one token per unit to the wake
-- list, which a waiter BLPOPs (kept to SIZE tokens, and briefly: a token nobody took is stale),
-- and wakes as many parked jobs: each one's schedule entry is brought forward to now (plus a
-- little jitter), only if it is still there and due later (ZADD XX LT): a parked job an operator
-- deleted, or one that already ran, is passed over.
local WAKE_TTL_MS = 5000
local function limit_wake(wake, parked, schedule, size, now, jitter, count)
  if count <= 0 then return end
  for _ = 1, count do redis.call('LPUSH', wake, '1') end
  redis.call('LTRIM', wake, 0, size - 1)
  redis.call('PEXPIRE', wake, WAKE_TTL_MS)
  local woken, tries = 0, 0
  while woken < count and tries < 10 * count do
    local top = redis.call('ZPOPMIN', parked)
    if not top[1] then break end
    tries = tries + 1
    if redis.call('ZADD', schedule, 'XX', 'LT', 'CH', limit_time(now + jitter), top[1]) == 1 then
      woken = woken + 1
    end
  end
end

-- Leases past their end belong to holders that crashed (or ran past lock_timeout): taken back.
-- The number taken back; the caller wakes waiters for them (limit_wake), or for those of them
-- it does not take itself (a take).
local function limit_take_back(hash, leases, now)
  local back = redis.call('ZREMRANGEBYSCORE', leases, '-inf', limit_time(now))
  if back > 0 then redis.call('HINCRBY', hash, 'reclaimed', back) end
  return back
end

local function limit_reclaim(hash, leases, wake, parked, schedule, size, now, jitter)
  local back = limit_take_back(hash, leases, now)
  limit_wake(wake, parked, schedule, size, now, jitter, back)
  return back
end
