-- Record that the caller's job completed and release its lock, in one
-- step, only if the caller still holds the lock; announce the release to
-- waiters, as lock_release.lua does (a plain release: waiters queued for a
-- handoff try, and find the record), in the same step.
-- KEYS[1]: the lock key. KEYS[2]: the completion record's key, in the same
-- cluster slot. ARGV[1]: the caller's token. ARGV[2]: the record.
-- ARGV[3]: how long to keep the record, in ms. ARGV[4]: the release
-- channel. ARGV[5]: the command that announces on it, PUBLISH or, on
-- Redis Cluster, SPUBLISH.
--
-- Redis does not undo a script that fails halfway, so the lock is deleted
-- first: if writing the record is refused, the lock is released all the
-- same (and announced) and nothing is recorded; the script returns the
-- refusal, and the next run does the job again. Under maxmemory the delete (which Redis
-- never refuses for memory) lets the record be written. A refused
-- announcement (no rights on the channel) is ignored; waiters poll.
-- Returns 1 when the lock was deleted and the record written, including
-- when an earlier delivery of this same call did it (a client that resends
-- a command after a dropped connection must not be told that its lock was
-- lost); 0, writing nothing, when the lock is absent or holds another
-- token.
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  local written = redis.pcall('set', KEYS[2], ARGV[2], 'PX', ARGV[3])
  redis.pcall(ARGV[5], ARGV[4], '')
  if type(written) == 'table' and written.err then
    return redis.error_reply(written.err)
  end
  return 1
end
if redis.call('get', KEYS[2]) == ARGV[2] then
  return 1
end
return 0
