-- Reset a semaphore permit's TTL if the caller still holds it.
-- KEYS[1]: the semaphore (see permit_acquire.lua). ARGV[1]: the caller's
-- token. ARGV[2]: the TTL in ms.
-- Returns 1 when refreshed, 0 when the caller holds no unexpired permit.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires or tonumber(expires) <= now then
  return 0
end
redis.call('zadd', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local longest = redis.call('zrange', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('pexpireat', KEYS[1], longest[2])
return 1
