-- Take the lock if it is free, for a caller that will not wait: SET NX PX
-- and, when the key is taken, its holder's token, in one command whose
-- reply is never nil. (SET NX PX GET tells the same, but only on Redis 7,
-- and answers a success with a nil reply, which go-redis handles as an
-- error at some twenty allocations per call.)
-- KEYS[1]: the lock key. ARGV[1]: the caller's token. ARGV[2]: TTL in ms.
-- Returns 1 when the lock was free and is now the caller's; otherwise the
-- holder's token, which is the caller's own when this is a resend of a
-- call whose first delivery took the lock.
if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  return 1
end
return redis.call('get', KEYS[1])
