-- Give back a hold kept in a sorted set (a semaphore's permit, a read or
-- write hold of a read-write lock) if the caller holds it, and, for a
-- writer, withdraw its intent; announce in the same step when either was
-- there, so that waiters try at once.
-- KEYS[1]: the set (see permit_acquire.lua and rw_acquire.lua).
-- ARGV[1]: the caller's member: a permit's token, or "r:<token>" or
-- "w:<token>" (scored by minus its expiry). ARGV[2]: the
-- release channel. ARGV[3]: the command that announces on it, PUBLISH or,
-- on Redis Cluster, SPUBLISH.
-- Returns 1 when released, 0 when the caller held nothing unexpired (an
-- expired hold is removed all the same). The announcement is sent with
-- pcall, after the change: a refused one leaves the release done.
-- (lib_hold.lua comes first: it sets t and now.)
local me = ARGV[1]
local expires = redis.call('zscore', KEYS[1], me)
local withdrew = 0
if string.sub(me, 1, 2) == 'w:' then
  withdrew = redis.call('zrem', KEYS[1], 'q:' .. string.sub(me, 3))
end
local held = 0
if expires then
  redis.call('zrem', KEYS[1], me)
  if math.abs(tonumber(expires)) > now then
    held = 1
  end
end
if held == 1 or withdrew == 1 then
  redis.pcall(ARGV[3], ARGV[2], '')
end
return held
