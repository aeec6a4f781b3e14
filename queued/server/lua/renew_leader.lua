-- renew_leader.lua: keep or take the scheduler leadership, by Redis's clock.
-- KEYS[1]  leader key
-- ARGV[1]  identity, ARGV[2] TTL in milliseconds
-- Returns 1 if ARGV[1] is the leader afterwards.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
