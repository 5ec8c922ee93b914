-- Reset the TTL of every lock of a set, only if the caller holds every
-- one (Lock.Refresh and the lease's renewal of a set from
-- Locker.ObtainAll).
-- KEYS[1..n]: the lock keys. ARGV[1]: the caller's token. ARGV[2]: TTL in
-- ms.
-- Returns 1 when refreshed; 0, changing nothing, when any key is absent
-- or holds another token: the set is lost as a whole.
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
for i = 1, #KEYS do
  redis.call('pexpire', KEYS[i], ARGV[2])
end
return 1
