-- Report the remaining TTL of a hold kept in a sorted set (see
-- hold_release.lua) if the caller still holds it.
-- KEYS[1]: the set. ARGV[1]: the caller's member.
-- Returns the TTL in ms, or -3 when the caller holds nothing unexpired.
-- (lib_hold.lua comes first: it sets t and now.)
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires or math.abs(tonumber(expires)) <= now then
  return -3
end
return math.abs(tonumber(expires)) - now
