-- The start of every script of a hold kept in a sorted set (a semaphore's
-- permits, a read-write lock's holds): the time, and what they share.
-- Members are scored by their expiry in ms, or by minus it (a read-write
-- lock's writers).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- keep makes the set live as long as its latest member.
local function keep(key)
  local at = 0
  local hi = redis.call('zrange', key, -1, -1, 'WITHSCORES')
  if hi[2] and tonumber(hi[2]) > 0 then
    at = tonumber(hi[2])
  end
  local lo = redis.call('zrange', key, 0, 0, 'WITHSCORES')
  if lo[2] and tonumber(lo[2]) < 0 then
    at = math.max(at, -tonumber(lo[2]))
  end
  if at > 0 then
    redis.call('pexpireat', key, at)
  end
end

-- take_fence takes the next fencing token from the counter at key, whose
-- value was last (nil when none), and keeps the counter ttl ms ('0': for
-- ever). A token is at least the server's clock in microseconds.
local function take_fence(key, last, ttl)
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local fence = math.max(tonumber(last or '0') + 1, now_us)
  if ttl ~= '0' then
    redis.call('set', key, string.format('%d', fence), 'PX', ttl)
  else
    redis.call('set', key, string.format('%d', fence))
  end
  return fence
end

