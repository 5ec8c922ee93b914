-- Delete the lock only if the caller still holds it, and announce the
-- release to waiters in the same step (see releaseChannel in notify.go).
-- KEYS[1]: the lock key. ARGV[1]: the caller's token. ARGV[2], on Redis
-- Cluster only: the sharded channel to announce on, in the key's slot;
-- elsewhere the channel is named after the key.
-- Returns 1 when deleted, 0 when the key is absent or holds another token.
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  if ARGV[2] then
    redis.call('spublish', ARGV[2], '')
  else
    redis.call('publish', 'locksmith:released:' .. KEYS[1], '')
  end
  return 1
end
return 0
