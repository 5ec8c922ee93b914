-- Report the lock's remaining TTL only if the caller still holds it.
-- KEYS[1]: the lock key. ARGV[1]: the caller's token.
-- Returns the TTL in ms (-1 when the key has no expiry), or -3 when the key
-- is absent or holds another token.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pttl', KEYS[1])
end
return -3
