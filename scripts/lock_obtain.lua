-- Acquire the lock if it is free; when it is taken, queue the caller for
-- a direct handoff (see lock_release.lua).
-- The keys: lock_key, the lock key; queue_key, the handoff queue, given
-- only to queue the caller; fence_key, the fence counter, with fencing
-- only. scripts.go runs this text in four variants, one per set of keys,
-- each with its own fixed KEYS list, after a line that names them (then
-- lib_fence.lua).
-- ARGV[1]: the new holder's token. ARGV[2]: TTL in ms. ARGV[3]: how long
-- the fence counter lives after it was last taken, in ms, or 0 for ever.
-- ARGV[4], optional: the caller's queue entry (see queueEntry in
-- handoff.go), given only to queue the caller; ARGV[5]: how long the entry
-- stays valid, in ms.
--
-- Returns, when the caller holds the lock: its fencing token, or 0 without
-- fencing. That includes the key already holding the caller's token: an
-- earlier delivery of this same call took it (a client that resends a
-- command after a dropped connection must not be told that it lost to
-- itself), or a release handed it over. The TTL is then set again, so that
-- it runs from this call; and when the caller was queued, the token comes
-- in a table of one, so that its Locker can tell that the lock was handed
-- over (or, rarely, taken by an earlier delivery of the same call).
-- Otherwise returns -2 - the holder's remaining TTL in ms, which is -1
-- when the key has no expiry, so that one integer reply
-- carries both; when the caller was queued, that number and the holder's
-- token, so that its Locker can tell that the lock was handed to another
-- of its waiters even if it missed the announcement.
--
-- A fencing token is larger than every token the counter gave before,
-- and at least the server's clock in microseconds, so that it keeps
-- growing when the counter is lost (a restart without persistence, a
-- failover to a replica that missed the last increments), as long as the
-- server's clock does not step back.
--
-- Redis does not undo a script that fails halfway, so what could be
-- refused (TIME, the reads of companion keys) runs before the first write.
local entry = ARGV[4]
local t, last_fence
if queue_key or fence_key then
  t = redis.call('time')
end
if fence_key then
  last_fence = redis.call('get', fence_key)
end

-- won takes the caller's fence, then drops its queue entry. The fence
-- comes first: a ZREM refused after it (an ACL rule changed since the
-- permissions check) leaves the lock held with the caller's fence taken,
-- so that a resend of this call, which finds the caller's token, answers
-- the counter and gets the caller's own fence, not the last holder's.
local function won(fresh)
  local fence = 0
  if fence_key then
    if not fresh and last_fence then
      -- Nobody can have taken a fence since: it is still ours.
      fence = tonumber(last_fence)
    else
      fence = take_fence(fence_key, last_fence, t, ARGV[3])
    end
  end
  if queue_key then
    redis.call('zrem', queue_key, 'a:' .. entry, 'l:' .. entry)
  end
  return fence
end

if redis.call('set', lock_key, ARGV[1], 'NX', 'PX', ARGV[2]) then
  return won(true)
end
local holder = redis.call('get', lock_key)
if holder == ARGV[1] then
  redis.call('pexpire', lock_key, ARGV[2])
  if queue_key then
    -- Queued, this is most likely a handoff whose announcement the
    -- caller has not heard: say so, for its Event.HandedOver.
    return {won(false)}
  end
  return won(false)
end
if queue_key then
  -- The queue holds two members per entry: 'a:'..entry, scored with when
  -- it arrived (the first time, so that renewing keeps its place), and
  -- 'l:'..entry, scored with minus when it lapses. The queue key itself
  -- lapses with its newest entry.
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('zadd', queue_key, 'NX', now, 'a:' .. entry)
  redis.call('zadd', queue_key, -(now + tonumber(ARGV[5])), 'l:' .. entry)
  redis.call('pexpire', queue_key, ARGV[5])
  return {-2 - redis.call('pttl', lock_key), holder}
end
return -2 - redis.call('pttl', lock_key)
