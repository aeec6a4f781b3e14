-- clear.lua: take a whole queue, schedule or retry set away in one step (Sidekiq's clear): it is
-- renamed to a key nobody reads, so no worker or scheduler sees its jobs again, and the caller
-- reads the unique jobs among them (clear_unique.lua) to give their locks up before it unlinks
-- it (locks.py). The renamed key expires within the hour if the caller never gets that far.
--
-- KEYS[1]  the queue list, or the schedule or retry zset
-- KEYS[2]  the key to rename it to (Keys.clearing)
-- KEYS[3]  the queues set (a queue: its name is removed), or absent
-- ARGV[1]  the queue's name (with KEYS[3])
-- Returns the number of jobs it held.
local kind = redis.call('TYPE', KEYS[1])['ok']
local n = 0
if kind == 'list' then n = redis.call('LLEN', KEYS[1])
elseif kind == 'zset' then n = redis.call('ZCARD', KEYS[1]) end
if n > 0 then
  redis.call('RENAME', KEYS[1], KEYS[2])
  redis.call('EXPIRE', KEYS[2], 3600)
elseif kind ~= 'none' and kind ~= 'list' and kind ~= 'zset' then
  redis.call('UNLINK', KEYS[1])
end
if KEYS[3] then redis.call('SREM', KEYS[3], ARGV[1]) end
return n
