-- Acquire the lock if it is free.
-- KEYS[1]: the lock key. KEYS[2], only with fencing: the fence counter.
-- ARGV[1]: the new holder's token. ARGV[2]: TTL in ms.
--
-- Returns, when the caller holds the lock: its fencing token, or 0 without
-- fencing. That includes an earlier delivery of this same call having
-- taken it: a client that resends a command after a dropped connection
-- must not be told that it lost to itself. Otherwise returns -2 - the
-- holder's remaining TTL in ms, which is -1 when the key has no expiry, so
-- that one integer reply carries both.
--
-- A fencing token is larger than every token the counter gave before,
-- and at least the server's clock in microseconds, so that it keeps
-- growing when the counter is lost (a restart without persistence, a
-- failover to a replica that missed the last increments), as long as the
-- server's clock does not step back.
local function next_fence()
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('get', KEYS[2]) or '0')
  local fence = math.max(last + 1, now)
  redis.call('set', KEYS[2], string.format('%d', fence))
  return fence
end

if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if #KEYS < 2 then
    return 0
  end
  return next_fence()
end
if redis.call('get', KEYS[1]) == ARGV[1] then
  if #KEYS < 2 then
    return 0
  end
  -- Nobody can have taken a fence since: it is still ours.
  local fence = redis.call('get', KEYS[2])
  if fence then
    return tonumber(fence)
  end
  return next_fence()
end
return -2 - redis.call('pttl', KEYS[1])
