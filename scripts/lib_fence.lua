-- The start of the scripts that take a fencing token: a lock's
-- (lock_obtain.lua, lock_release.lua, lock_confirm.lua) and those of a
-- hold kept in a sorted set (permit_acquire.lua, permit_release.lua,
-- permit_confirm.lua, rw_acquire.lua). It only defines take_fence, which
-- writes: a script reads what it needs (TIME, the counter) before its
-- first write, and takes the token after.

-- take_fence takes the next fencing token from the counter at key, whose
-- value was last (nil or false when none), by the server's time t (what
-- TIME answered), and keeps the counter ttl ms ('0': for ever). A token is
-- larger than every token the counter gave before, and at least the
-- server's clock in microseconds, so that it keeps growing when the
-- counter is lost (a restart without persistence, a failover to a replica
-- that missed the last increments), as long as the server's clock does
-- not step back.
local function take_fence(key, last, t, ttl)
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local fence = math.max(tonumber(last or '0') + 1, now_us)
  if ttl ~= '0' then
    redis.call('set', key, string.format('%d', fence), 'PX', ttl)
  else
    redis.call('set', key, string.format('%d', fence))
  end
  return fence
end

