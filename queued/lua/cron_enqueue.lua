-- cron_enqueue.lua: push one periodic job; for a tick, at most once whatever the number of
-- masters racing for it (the claim and the push are one step: no master can claim a tick and
-- die before pushing it, and no two can both push it).
--
-- KEYS[1]  cron_job:<name>            hash (sidekiq-cron's layout): status, queued_last_tick, ...
-- KEYS[2]  cron_job:<name>:enqueued   zset tick ISO 8601 -> tick epoch (sidekiq-cron's dedupe)
-- KEYS[3]  cron_job:<name>:jid_history list of {"jid","enqueued"} JSON, newest first
-- KEYS[4]  queue:<q>                  the job's queue
-- KEYS[5]  queues                     set of queue names
-- ARGV[1]  the tick (epoch seconds), or '' for a push now (queuedctl cron enqueue): no claim
-- ARGV[2]  the tick's member in KEYS[2]
-- ARGV[3]  the payload   ARGV[4] queue name   ARGV[5] last_enqueue_time text
-- ARGV[6]  the jid_history entry   ARGV[7] entries kept   ARGV[8] ticks older than this forgotten
-- ARGV[9]  how far (seconds) a tick may be ahead of Redis's clock
-- Returns 'enqueued', 'done' (this tick or a later one was pushed), 'disabled', 'missing'
-- (no such schedule), 'wrongtype' (KEYS[4] is not a list; nothing written) or 'ahead' (the
-- tick is more than ARGV[9] s ahead of Redis's clock; nothing written).
--
-- The claim is a compare-and-set on queued_last_tick (ticks only move forward: a master whose
-- clock lags cannot push an older tick after a newer one) plus ZADD NX on sidekiq-cron's own
-- set, which a Ruby sidekiq-cron poller on the same Redis also consults.
--
-- Ticks are judged by Redis's clock (TIME), the one clock every master shares: a master whose
-- host clock is fast offered ticks minutes early, the compare-and-set recorded them, and once
-- its clock was corrected every master's ticks were "not newer" and none was pushed until real
-- time caught up (issue 16.1.6). A tick ahead of Redis's clock is refused ('ahead': the master
-- then follows Redis's clock, server/periodic.py), and a last tick recorded ahead of it (by
-- such a master before this check) does not hold later ticks back.if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
local kind = redis.call('TYPE', KEYS[4])['ok']
if kind ~= 'none' and kind ~= 'list' then return 'wrongtype' end
if ARGV[1] ~= '' then
  local t = redis.call('TIME')
  local horizon = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[9])
  if tonumber(ARGV[1]) > horizon then return 'ahead' end
  if redis.call('HGET', KEYS[1], 'status') ~= 'enabled' then return 'disabled' end
  local last = tonumber(redis.call('HGET', KEYS[1], 'queued_last_tick') or '')
  if last and last >= tonumber(ARGV[1]) and last <= horizon then return 'done' end
  redis.call('HSET', KEYS[1], 'queued_last_tick', ARGV[1])
  if redis.call('ZADD', KEYS[2], 'NX', ARGV[1], ARGV[2]) == 0 then return 'done' end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[8])
end
redis.call('LPUSH', KEYS[4], ARGV[3])
redis.call('SADD', KEYS[5], ARGV[4])
redis.call('HSET', KEYS[1], 'last_enqueue_time', ARGV[5])
redis.call('LPUSH', KEYS[3], ARGV[6])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[7]) - 1)
return 'enqueued'
