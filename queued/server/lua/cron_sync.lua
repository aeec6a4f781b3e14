-- cron_sync.lua: write one schedule's definition (a master at start), keeping what the
-- operator set: the config file defines a schedule; its status is the operator's once set.
--
-- KEYS[1]  cron_job:<name> hash        KEYS[2]  cron_jobs set
-- ARGV[1]  the member of cron_jobs (cron_job:<name>, not namespaced: sidekiq-cron's)
-- ARGV[2]  the file's status for it ('enabled' or 'disabled')
-- ARGV[3]  the tick to count as pushed if the schedule is new (its latest tick: a schedule
--          does not fire for a tick from before it existed)
-- ARGV[4..] field, value pairs of the definition
-- Returns {status in effect, queued_last_tick}.
--
-- The status rule: the file's `enabled:` seeds it; `queuedctl cron disable/enable` (or
-- sidekiq-cron's Web UI) changes it and that survives restarts and deploys; a deploy whose
-- file changes `enabled:` (queued_enabled remembers what the file said last) wins again.
local status = redis.call('HGET', KEYS[1], 'status')
local said = redis.call('HGET', KEYS[1], 'queued_enabled')
if not status or said ~= ARGV[2] then status = ARGV[2] end
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'status', status, 'queued_enabled', ARGV[2])
if redis.call('HEXISTS', KEYS[1], 'queued_last_tick') == 0 then
  redis.call('HSET', KEYS[1], 'queued_last_tick', ARGV[3])
end
redis.call('SADD', KEYS[2], ARGV[1])
return {status, redis.call('HGET', KEYS[1], 'queued_last_tick')}
