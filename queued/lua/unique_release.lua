-- unique_release.lua: give up unique locks, each only if the given jid still holds it (a lock
-- that expired and was taken by a later push belongs to that push). Called when a unique job
-- succeeds, dies, expires, or an operator deletes or kills it (queued/unique.py).
--
-- A lock held as "<jid>:<nonce>" is held by that jid (a run of it from before it had a jid of
-- its own: unique.run_holder).
--
-- KEYS[1..N]  lock keys (Keys.unique)
-- ARGV[1..N]  the jid that holds each
-- Returns the number of locks released.
local released = 0
for i, key in ipairs(KEYS) do
  local holder = redis.call('GET', key)
  if holder and (holder == ARGV[i]
                 or string.sub(holder, 1, #ARGV[i] + 1) == ARGV[i] .. ':') then
    redis.call('DEL', key)
    released = released + 1
  end
end
return released
