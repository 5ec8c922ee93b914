-- Delete the lock only if the caller still holds it, and announce the
-- release to waiters in the same step.
-- KEYS[1]: the lock key. ARGV[1]: the caller's token. ARGV[2]: the channel
-- on which releases of this lock are announced.
-- Returns 1 when deleted, 0 when the key is absent or holds another token.
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('publish', ARGV[2], '')
  return 1
end
return 0
