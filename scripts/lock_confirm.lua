-- Confirm a lock that an announcement says was handed to the caller:
-- reset its TTL if the caller holds it, and report its fencing token.
-- KEYS[1]: the lock key. KEYS[2], optional: the fence counter.
-- ARGV[1]: the caller's token. ARGV[2]: the TTL in ms. ARGV[3]: how long
-- the fence counter lives after it was last taken, in ms, or 0 for ever.
-- Returns {0} when the caller does not hold the lock, or {1, fence}. While
-- the caller holds the lock nobody else takes a fence, so the counter's
-- value is the caller's fence (an announcement heard late may name an
-- earlier handoff to the same token, which expired since, and its fence).
-- A counter that expired meanwhile is taken again: the next token, at
-- least the server's clock in microseconds, is larger than every earlier
-- one. fence is 0 without a counter.
-- Redis does not undo a script that fails halfway: the reads (the
-- counter, and TIME when it is gone) come before the first write.
-- (lib_fence.lua comes first: it defines take_fence.)
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return {0}
end
local last, t
if KEYS[2] then
  last = redis.call('get', KEYS[2])
  if not last then
    t = redis.call('time')
  end
end
redis.call('pexpire', KEYS[1], ARGV[2])
local fence = 0
if last then
  fence = tonumber(last)
elseif t then
  fence = take_fence(KEYS[2], last, t, ARGV[3])
end
return {1, fence}
