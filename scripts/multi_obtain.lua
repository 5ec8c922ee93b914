-- Acquire every lock of a set at once, or none (Locker.ObtainAll; see
-- multi.go). The set's keys are in one server (or one Cluster slot).
-- KEYS[1..n]: the lock keys, in the set's order. KEYS[n+1..2n], with
-- fencing only: their fence counters, in the same order.
-- ARGV[1]: the token of the set, the same for every key. ARGV[2]: TTL in
-- ms. ARGV[3]: how long a fence counter lives after it was last taken, in
-- ms, or 0 for ever. ARGV[4]: n.
-- (lib_fence.lua comes first: it defines take_fence.)
--
-- Returns {0, fence of key 1, ..., fence of key n} when the caller holds
-- every key (fences are 0 without fencing), and {i, -2 - pttl} when key i
-- is held by another token (pttl is -1 when it has no expiry); then
-- nothing is written. A key already holding the caller's token counts as
-- the caller's: an earlier delivery of this same call took it (a client
-- resends a command after a dropped connection). Its TTL is set again, and
-- its fence is the counter's current value: each key's fence is taken
-- before the key is set to the caller's token, so a key holding the token
-- had its fence taken by this call, and nobody can take one while the
-- caller holds it. A resend after a refusal by another holder finds
-- nothing of the caller's (the refusal wrote nothing); a key set by a
-- delivery refused halfway (below) had its fence taken just before, so a
-- later attempt that finds it answers that delivery's fence, never an
-- earlier holder's.
--
-- Redis does not undo a script that fails halfway, so everything that
-- can be refused by reading (TIME, every lock key, every counter) is read
-- before the first write. A write refused halfway (an ACL rule on one key)
-- leaves some keys held with the caller's token: the caller treats the
-- error as one that may have landed and deletes every key still holding
-- its token (multi_release.lua). Only counters advance for nothing, which
-- keeps fences increasing.
local n = tonumber(ARGV[4])
local fenced = #KEYS > n
local t
if fenced then
  t = redis.call('time')
end
local mine, last = {}, {}
for i = 1, n do
  local holder = redis.call('get', KEYS[i])
  if holder and holder ~= ARGV[1] then
    return {i, -2 - redis.call('pttl', KEYS[i])}
  end
  mine[i] = holder == ARGV[1]
  if fenced then
    last[i] = redis.call('get', KEYS[n + i])
  end
end
local reply = {0}
for i = 1, n do
  local fence = 0
  if fenced then
    if mine[i] and last[i] then
      fence = tonumber(last[i])
    else
      fence = take_fence(KEYS[n + i], last[i], t, ARGV[3])
    end
  end
  redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
  reply[i + 1] = fence
end
return reply
