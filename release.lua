-- Delete the lock only if the caller still holds it, and announce the
-- release to waiters in the same step, on the channel named after the key
-- (see releaseChannel in notify.go).
-- KEYS[1]: the lock key. ARGV[1]: the caller's token.
-- Returns 1 when deleted, 0 when the key is absent or holds another token.
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('publish', 'locksmith:released:' .. KEYS[1], '')
  return 1
end
return 0
