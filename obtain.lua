-- Acquire the lock if it is free.
-- KEYS[1]: the lock key. ARGV[1]: the new holder's token. ARGV[2]: TTL in ms.
-- Returns 0 when the caller holds the lock, including when an earlier
-- delivery of this same call already took it (a client that resends a
-- command after a dropped connection must not be told that it lost to
-- itself). Otherwise returns -2 - the holder's remaining TTL in ms, which is
-- -1 when the key has no expiry, so that one integer reply carries both.
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
if redis.call('get', KEYS[1]) == ARGV[1] then
  return 0
end
return -2 - redis.call('pttl', KEYS[1])
