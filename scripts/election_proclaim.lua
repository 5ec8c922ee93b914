-- Set the value an election's leader proclaims, if the caller still holds
-- the election's lock, and announce it.
-- KEYS[1]: the lock key. KEYS[2]: the proclaimed value.
-- ARGV[1]: the caller's token. ARGV[2]: the value. ARGV[3]: the release
-- channel. ARGV[4]: the command that announces on it, PUBLISH or, on
-- Redis Cluster, SPUBLISH. ARGV[5]: the announcement.
-- The value is stored as "<token>\n<value>", so that a reader can tell it
-- from the value of an earlier holder, with the lock's remaining TTL;
-- lock_refresh.lua keeps it alive with the lock and lock_release.lua deletes it.
-- The announcement follows the only write, with pcall: a refused one
-- leaves the value set, and observers notice it by polling.
-- Returns 1 when set, 0 when the caller does not hold the lock.
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then
  redis.call('set', KEYS[2], ARGV[1] .. '\n' .. ARGV[2], 'PX', ttl)
else
  redis.call('set', KEYS[2], ARGV[1] .. '\n' .. ARGV[2])
end
redis.pcall(ARGV[4], ARGV[3], ARGV[5])
return 1
