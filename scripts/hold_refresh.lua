-- Reset the TTL of a hold kept in a sorted set (see hold_release.lua) if
-- the caller still holds it.
-- KEYS[1]: the set. ARGV[1]: the caller's member; a writer's, "w:<token>",
-- is scored by minus its expiry. ARGV[2]: the TTL in ms.
-- Returns 1 when refreshed, 0 when the caller holds nothing unexpired.
-- (lib_hold.lua comes first: it sets t and now.)
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
keep(KEYS[1])
return 1
