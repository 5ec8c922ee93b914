-- Report a semaphore permit's remaining TTL if the caller still holds it.
-- KEYS[1]: the semaphore (see permit_acquire.lua). ARGV[1]: the caller's
-- token.
-- Returns the TTL in ms, or -3 when the caller holds no unexpired permit.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires or tonumber(expires) <= now then
  return -3
end
return tonumber(expires) - now
