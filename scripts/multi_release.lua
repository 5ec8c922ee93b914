-- Release every lock of a set that still holds the caller's token
-- (Lock.Release on a set from Locker.ObtainAll; also the clean-up after
-- an ObtainAll that failed or was cancelled), and announce each release.
-- KEYS[1..n]: the lock keys. ARGV[1]: the caller's token. ARGV[2]: the
-- command that announces, PUBLISH or, on Redis Cluster, SPUBLISH.
-- ARGV[3..n+2]: the release channel of each key, in the order of KEYS.
--
-- A released key is deleted and announced with an empty message on its
-- channel, as lock_release.lua announces a plain release, so that the
-- single-key waiters on it (queued or not) wake and try. It is never
-- handed over: the handoff queue of a key is left as it is, and its live
-- entries win the key by trying (multi-key holds do not queue yet).
--
-- Every key is read before the first write; the announcements are sent
-- with pcall, so a refused one (no rights on a channel) leaves the
-- release done, and its waiters notice it by polling.
-- Returns the number of keys released; a key absent or holding another
-- token is left alone.
local owned = {}
for i = 1, #KEYS do
  owned[i] = redis.call('get', KEYS[i]) == ARGV[1]
end
local released = 0
for i = 1, #KEYS do
  if owned[i] then
    redis.call('del', KEYS[i])
    redis.pcall(ARGV[2], ARGV[i + 2], '')
    released = released + 1
  end
end
return released
