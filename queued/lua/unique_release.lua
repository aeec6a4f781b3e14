-- unique_release.lua: give up unique locks, each only if the given jid still holds it (a lock
-- that expired and was taken by a later push belongs to that push). Called when a unique job
-- succeeds, dies, expires, or an operator deletes or kills it (queued/unique.py).
--
-- KEYS[1..N]  lock keys (Keys.unique)
-- ARGV[1..N]  the jid that holds each
-- Returns the number of locks released.
local released = 0
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i] then
    redis.call('DEL', key)
    released = released + 1
  end
end
return released
