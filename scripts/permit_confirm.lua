-- Confirm a permit that an announcement says was handed to the caller:
-- reset its TTL if the caller holds it, and take a new fencing token.
-- KEYS[1]: the semaphore. KEYS[2], optional: its fence counter.
-- ARGV[1]: the caller's token. ARGV[2]: the TTL in ms. ARGV[3]: how long
-- the fence counter lives after it was last taken, in ms, or 0 for ever.
-- Returns {0} when the caller holds no unexpired permit, or {1, fence}:
-- a new token, larger than every one taken before (others take tokens
-- for their permits while the caller holds its own, so the counter's
-- value is not the caller's; and an announcement heard late may name an
-- earlier handoff to the same token, which expired since), or 0 without
-- a counter.
-- (lib_hold.lua and lib_fence.lua come first: they set t and now, and
-- define take_fence.)
local last_fence
if KEYS[2] then
  last_fence = redis.call('get', KEYS[2])
end
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires or tonumber(expires) <= now then
  return {0}
end
redis.call('zadd', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
keep(KEYS[1])
local fence = 0
if KEYS[2] then
  fence = take_fence(KEYS[2], last_fence, t, ARGV[3])
end
return {1, fence}
