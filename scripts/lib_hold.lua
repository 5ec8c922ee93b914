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

