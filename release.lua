-- Delete the lock only if the caller still holds it.
-- KEYS[1]: the lock key. ARGV[1]: the caller's token.
-- Returns 1 when deleted, 0 when the key is absent or holds another token.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
