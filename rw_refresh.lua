-- Reset the TTL of a read or write hold of a read-write lock if the caller
-- still holds it.
-- KEYS[1]: the lock (see rw_acquire.lua). ARGV[1]: the caller's member,
-- "r:<token>" or "w:<token>". ARGV[2]: the TTL in ms.
-- Returns 1 when refreshed, 0 when the caller holds nothing unexpired.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me = ARGV[1]
local expires = redis.call('zscore', KEYS[1], me)
if not expires or math.abs(tonumber(expires)) <= now then
  return 0
end
local until_ms = now + tonumber(ARGV[2])
if string.sub(me, 1, 2) == 'w:' then
  redis.call('zadd', KEYS[1], 'XX', -until_ms, me)
else
  redis.call('zadd', KEYS[1], 'XX', until_ms, me)
end
-- The set lives as long as its latest member (PEXPIRETIME would need
-- Redis 7).
local at = 0
local hi = redis.call('zrange', KEYS[1], -1, -1, 'WITHSCORES')
if hi[2] and tonumber(hi[2]) > 0 then
  at = tonumber(hi[2])
end
local lo = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')
if lo[2] and tonumber(lo[2]) < 0 then
  at = math.max(at, -tonumber(lo[2]))
end
redis.call('pexpireat', KEYS[1], at)
return 1
