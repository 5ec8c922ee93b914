-- Report the remaining TTL of a read or write hold of a read-write lock if
-- the caller still holds it.
-- KEYS[1]: the lock (see rw_acquire.lua). ARGV[1]: the caller's member.
-- Returns the TTL in ms, or -3 when the caller holds nothing unexpired.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires or math.abs(tonumber(expires)) <= now then
  return -3
end
return math.abs(tonumber(expires)) - now
