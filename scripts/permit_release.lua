-- Give back a permit of a semaphore if the caller holds it: hand it
-- straight to the first live entry of the semaphore's handoff queue, or
-- just drop it; and announce which, in the same step, as a lock's release
-- does (see lock_release.lua).
-- KEYS[1]: the semaphore (see permit_acquire.lua). KEYS[2]: its handoff
-- queue. KEYS[3], optional: its fence counter.
-- ARGV[1]: the caller's token. ARGV[2]: the release channel. ARGV[3]: the
-- command that announces on it, PUBLISH or, on Redis Cluster, SPUBLISH.
-- ARGV[4]: how long the fence counter lives after it was last taken, in
-- ms, or 0 for ever. ARGV[5], optional: the caller's own queue entry,
-- withdrawn (a waiter that gives up).
--
-- Entries that lapsed are dropped first; the handoff goes to the live
-- entry that arrived first: its token gets a permit with the entry's TTL
-- (and the next fencing token, when it asks for one), and the release
-- announces "<ttl ms> <fence> <token>"; a plain release announces an empty
-- message. An entry that asks for a fencing token is skipped when the
-- counter was not given. The permit passes from one holder to the next,
-- so the number held does not change.
--
-- Redis does not undo a script that fails halfway: the reads come first,
-- and the announcement, the one command that may be refused after the
-- first write, is sent with pcall, so a refused one leaves the release
-- done (waiters notice it by polling).
-- Returns 1 when released, 0 when the caller held no unexpired permit (an
-- expired one is removed all the same).
-- (lib_hold.lua, lib_queue.lua and lib_fence.lua come first: they set t
-- and now, and define pop_entry and take_fence.)
local me = ARGV[1]
local expires = redis.call('zscore', KEYS[1], me)
local last_fence
if KEYS[3] then
  last_fence = redis.call('get', KEYS[3])
end
if ARGV[5] then
  redis.call('zrem', KEYS[2], 'a:' .. ARGV[5], 'l:' .. ARGV[5])
end
if not expires then
  return 0
end
redis.call('zrem', KEYS[1], me)
if tonumber(expires) <= now then
  return 0
end

if redis.call('exists', KEYS[2]) == 1 then
  local ttl, fenced, token = pop_entry(KEYS[2], now, KEYS[3] ~= nil)
  if ttl then
    redis.call('zadd', KEYS[1], now + tonumber(ttl), token)
    keep(KEYS[1])
    local fence = 0
    if fenced then
      fence = take_fence(KEYS[3], last_fence, t, ARGV[4])
    end
    redis.pcall(ARGV[3], ARGV[2], ttl .. ' ' .. string.format('%d', fence) .. ' ' .. token)
    return 1
  end
end
redis.pcall(ARGV[3], ARGV[2], '')
return 1
