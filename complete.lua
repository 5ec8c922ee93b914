-- Record that the caller's job completed and release its lock, in one
-- step, only if the caller still holds the lock; announce the release to
-- waiters, as release.lua does (a plain release: waiters queued for a
-- handoff try, and find the record), in the same step.
-- KEYS[1]: the lock key. KEYS[2]: the completion record's key, in the same
-- cluster slot. ARGV[1]: the caller's token. ARGV[2]: the record.
-- ARGV[3]: how long to keep the record, in ms. ARGV[4]: on Redis Cluster,
-- the sharded channel to announce on, in the key's slot; elsewhere empty,
-- and the channel is named after the key.
-- Returns 1 when the record was written and the lock deleted, including
-- when an earlier delivery of this same call did it (a client that resends
-- a command after a dropped connection must not be told that its lock was
-- lost); 0, writing nothing, when the lock is absent or holds another token.
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('set', KEYS[2], ARGV[2], 'PX', ARGV[3])
  redis.call('del', KEYS[1])
  if ARGV[4] ~= '' then
    redis.call('spublish', ARGV[4], '')
  else
    redis.call('publish', 'locksmith:released:' .. KEYS[1], '')
  end
  return 1
end
if redis.call('get', KEYS[2]) == ARGV[2] then
  return 1
end
return 0
