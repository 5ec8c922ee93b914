-- Give back a semaphore permit if the caller holds it, and announce the
-- release in the same step.
-- KEYS[1]: the semaphore (see permit_acquire.lua).
-- ARGV[1]: the caller's token. ARGV[2]: the release channel. ARGV[3]: the
-- command that announces on it, PUBLISH or, on Redis Cluster, SPUBLISH.
-- Returns 1 when released, 0 when the caller held no unexpired permit (an
-- expired one is removed all the same). The announcement is sent with
-- pcall, after the change: a refused one leaves the release done.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires then
  return 0
end
redis.call('zrem', KEYS[1], ARGV[1])
if tonumber(expires) <= now then
  return 0
end
redis.pcall(ARGV[3], ARGV[2], '')
return 1
