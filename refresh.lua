-- Reset the lock's TTL only if the caller still holds it.
-- KEYS[1]: the lock key. ARGV[1]: the caller's token. ARGV[2]: TTL in ms.
-- Returns 1 when refreshed, 0 when the key is absent or holds another token.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
