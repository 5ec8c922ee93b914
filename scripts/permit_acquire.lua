-- Take one permit of a semaphore if fewer than the caller's limit are
-- held; when the limit is reached, queue a caller that waits for a
-- permit's handoff (see permit_release.lua). The semaphore is a sorted set
-- of its permits: each member is a holder's token, scored by when its
-- permit expires (server time, ms). Expired permits are dropped first, so
-- a crashed holder's permit comes back after its TTL without anyone's
-- help, and the set's own expiry is its longest permit's, so an unused
-- semaphore leaves nothing behind.
-- KEYS[1]: the semaphore. KEYS[2], optional: its fence counter. The last
-- key, when ARGV[5] is given: its handoff queue.
-- ARGV[1]: the caller's token. ARGV[2]: the permit's TTL in ms. ARGV[3]:
-- the caller's limit. ARGV[4]: how long the fence counter lives after it
-- was last taken, in ms, or 0 for ever. ARGV[5], optional: the caller's
-- queue entry (see queueEntry in handoff.go), given only to queue the
-- caller; ARGV[6]: how long the entry stays valid, in ms; ARGV[7] and
-- after, optional, with ARGV[5]: the tokens of the caller's fellow waiters
-- in its Locker whose own queue entries may be live (see PeersQueued in
-- internal/notify/queue.go).
-- Returns {1, fence, free, mine} when the caller holds a permit (fence is
-- 0 without a counter; a resend of this very call, whose first delivery
-- took the permit, or a handoff the caller has not heard of, takes it
-- again with a new fence; free is how many permits are left; mine is 1
-- when a queued caller found the permit its own already, most likely
-- handed over unheard, for its Event.HandedOver, and 0 otherwise), or
-- {0, ms, peer...} when the limit is reached: ms until the earliest permit
-- expires, and the fellow waiters of ARGV[7...] that hold an unexpired
-- permit (a release handed it to one of them, whose Locker did not hear
-- of it: that waiter then tries, and finds it); or {-1}, writing nothing,
-- when the key holds a read-write lock.
--
-- Redis does not undo a script that fails halfway: everything that can be
-- refused (TIME, the reads) runs before the first write. The first write
-- is a ZADD, which Redis refuses when memory is full (maxmemory with
-- noeviction): then nothing is written. The writes after it are allowed
-- even then. A refused caller writes nothing but its queue entry; the
-- expired permits are counted out, and dropped by the next caller that
-- takes one.
-- (lib_hold.lua and lib_fence.lua come first: they set t and now, and
-- define take_fence.)
local queue_key, fence_key, entry = nil, nil, ARGV[5]
if entry then
  queue_key = KEYS[#KEYS]
end
if KEYS[2] and KEYS[2] ~= queue_key then
  fence_key = KEYS[2]
end
local last_fence
if fence_key then
  last_fence = redis.call('get', fence_key)
end
-- A read-write lock's members are "r:", "w:" or "q:" and a token, and a
-- permit is a bare token: the lowest member tells which kind the set is.
local lowest = redis.call('zrange', KEYS[1], 0, 0)
if lowest[1] and string.sub(lowest[1], 2, 2) == ':' then
  return {-1}
end
local mine = redis.call('zscore', KEYS[1], ARGV[1])
local live = redis.call('zcount', KEYS[1], '(' .. now, '+inf')
if not (mine and tonumber(mine) > now) and live >= tonumber(ARGV[3]) then
  local first = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if queue_key then
    -- Two members per entry, as for a lock (see lock_obtain.lua): 'a:'..entry
    -- scored with when it first arrived, 'l:'..entry with minus when it
    -- lapses. The queue lapses with its newest entry.
    redis.call('zadd', queue_key, 'NX', now, 'a:' .. entry)
    redis.call('zadd', queue_key, -(now + tonumber(ARGV[6])), 'l:' .. entry)
    redis.call('pexpire', queue_key, ARGV[6])
  end
  local reply = {0, tonumber(first[2]) - now}
  for i = 7, #ARGV do
    local theirs = redis.call('zscore', KEYS[1], ARGV[i])
    if theirs and tonumber(theirs) > now then
      reply[#reply + 1] = ARGV[i]
    end
  end
  return reply
end
redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local free = tonumber(ARGV[3]) - redis.call('zcard', KEYS[1])
keep(KEYS[1])
if queue_key then
  redis.call('zrem', queue_key, 'a:' .. entry, 'l:' .. entry)
end
local fence = 0
if fence_key then
  fence = take_fence(fence_key, last_fence, t, ARGV[4])
end
local handed = 0
if queue_key and mine and tonumber(mine) > now then
  handed = 1
end
return {1, fence, free, handed}
