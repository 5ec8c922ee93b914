-- Read the remaining TTL of a set of locks (Lock.TTL of a set from
-- Locker.ObtainAll): the shortest of its keys'.
-- KEYS[1..n]: the lock keys. ARGV[1]: the caller's token.
-- Returns the shortest PTTL in ms (-1 when no key has an expiry), or -3
-- when any key is absent or holds another token.
local least = -1
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then
    return -3
  end
  local ttl = redis.call('pttl', KEYS[i])
  if ttl >= 0 and (least < 0 or ttl < least) then
    least = ttl
  end
end
return least
