-- Acquire every lock of a set at once, or none (Locker.ObtainAll; see
-- multi.go); when a key is taken, queue the caller in the handoff queue
-- of every key of the set that it does not hold, in one step, with one
-- arrival time (see lock_obtain.lua for a queue's members).
-- The set's keys are in one server (or one Cluster slot).
-- KEYS[1..n]: the lock keys, in the set's order. KEYS[n+1..2n], when
-- ARGV[5] is not '0': their handoff queues, in the same order. Then, with
-- fencing only: their fence counters, in the same order.
-- ARGV[1]: the token of the set, the same for every key. ARGV[2]: TTL in
-- ms. ARGV[3]: how long a fence counter lives after it was last taken, in
-- ms, or 0 for ever. ARGV[4]: n. ARGV[5]: '0' without queues, '1' with
-- queues but without queueing the caller, '2' to queue it. ARGV[6]: the
-- caller's queue entry (see queueEntry in handoff.go). ARGV[7]: how long
-- an entry stays valid, in ms. ARGV[8]: the caller's arrival, in the
-- server's ms, as an earlier attempt of this call answered it, or '0'
-- when none did. ARGV[6..8] are given only with queues (every argument
-- costs the server time at each call).
-- (lib_fence.lua comes first: it defines take_fence.)
--
-- Returns {-m, fence of key 1, ..., fence of key n} when the caller holds
-- every key (fences are 0 without fencing), where m is how many of them
-- held the caller's token already (handed over unheard); its queue
-- entries are gone then. A key already holding the caller's token counts as the caller's:
-- a release handed it over to the caller's entry, or an earlier delivery
-- of this same call took it (a client resends a command after a dropped
-- connection). Its TTL is set again, and its fence is the counter's
-- current value: each key's fence is taken before the key is set to the
-- caller's token (by this script or by the release that handed it over),
-- and nobody can take one while the caller holds it.
--
-- When key i is held by another token: without queues, {i, -2 - pttl}
-- (pttl is -1 when it has no expiry), and nothing is written. With
-- queues, {i, -2 - pttl, arrival, held, lapsed, holder}: the keys that
-- hold the caller's token keep it, with their TTL set again, and with
-- ARGV[5] '2' the caller's entry is added (or renewed, keeping its place)
-- in the queue of every other key, each scored with the caller's arrival,
-- which the reply returns: ARGV[8]; or, on the first such attempt, the
-- arrival of the caller's entries already queued when that attempt is a
-- resend, else the server's time now, made later than the arrival of
-- any set holding a key the caller waits for (the queue's record of
-- it, see pop_entry in lib_queue.lua); held is a string of n characters, '1' where the key
-- holds the caller's token, '2' where another, '0' where it is free;
-- holder is key i's holder's token. lapsed is
-- 1 when the caller had arrived (an arrival as above) but one of its
-- entries has lapsed or is gone from the queue of a key it does not hold:
-- its place is lost there (it waited too long without renewing, or a key
-- handed to it expired), so the caller must withdraw and start over;
-- nothing is written then. It is 1 too for a first queued attempt that
-- finds no entry of the caller's but a key holding its token: a resend
-- that landed after the entries of its first delivery lapsed. So every entry of a set has the same arrival
-- in every queue, which orders two sets the same way in every queue they
-- share (by arrival, then by entry): a release hands a key to the earlier
-- set first, and a set that queues for a key held by a waiting set
-- arrives after it, so the later set never holds a key the earlier one
-- waits for (see multi.go).
--
-- Redis does not undo a script that fails halfway, so everything that
-- can be refused by reading (TIME, every lock key, every counter, every
-- queue) is read before the first write. A write refused halfway (an ACL
-- rule on one key) leaves some keys held with the caller's token: the
-- caller treats the error as one that may have landed and withdraws
-- (multi_release.lua), which releases every key still holding its token
-- and removes its entries. Only counters advance for nothing, which keeps
-- fences increasing.
local n = tonumber(ARGV[4])
local mode = ARGV[5]
local queued = mode ~= '0'
local entry = ARGV[6]
local q0 = 0
if queued then
  q0 = n
end
local fenced = #KEYS > n + q0
local t, now
if fenced or queued then
  t = redis.call('time')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local mine, last, holders = {}, {}, {}
local other = 0
for i = 1, n do
  local holder = redis.call('get', KEYS[i])
  holders[i] = holder
  mine[i] = holder == ARGV[1]
  if holder and not mine[i] and other == 0 then
    other = i
  end
  if fenced then
    last[i] = redis.call('get', KEYS[n + q0 + i])
  end
end

if other == 0 then
  local reply = {0}
  for i = 1, n do
    if mine[i] then
      reply[1] = reply[1] - 1
    end
    local fence = 0
    if fenced then
      if mine[i] and last[i] then
        fence = tonumber(last[i])
      else
        fence = take_fence(KEYS[n + q0 + i], last[i], t, ARGV[3])
      end
    end
    redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
    if queued then
      redis.call('zrem', KEYS[n + i], 'a:' .. entry, 'l:' .. entry)
    end
    reply[i + 1] = fence
  end
  return reply
end

local pttl = -2 - redis.call('pttl', KEYS[other])
if not queued then
  return {other, pttl}
end

local arrival = tonumber(ARGV[8])
if arrival == 0 then
  -- An entry already there means that this is a resend of the set's first
  -- queued attempt (its reply was lost): it keeps the arrival it took
  -- then, and is checked like any later attempt.
  for i = 1, n do
    if not mine[i] then
      local a = redis.call('zscore', KEYS[n + i], 'a:' .. entry)
      if a then
        arrival = tonumber(a)
        break
      end
    end
  end
end
local lapsed = 0
local held = {}
for i = 1, n do
  if mine[i] then
    held[i] = '1'
  else
    held[i] = '0'
    if holders[i] then
      held[i] = '2'
    end
    local l = redis.call('zscore', KEYS[n + i], 'l:' .. entry)
    if arrival ~= 0 and (not l or -tonumber(l) <= now) then
      lapsed = 1
    end
  end
end
held = table.concat(held)
if arrival == 0 and string.find(held, '1', 1, true) then
  -- A first queued attempt that finds a key holding its token is a
  -- resend whose first delivery queued the set, a key was handed to it,
  -- and its entries have lapsed and been dropped since (a resend can land
  -- seconds late): the set has lost its place, and must start over
  -- rather than queue again with a new arrival while it holds that key.
  lapsed = 1
end
if lapsed == 1 then
  return {other, pttl, arrival, held, 1, holders[other]}
end
if arrival == 0 and mode == '2' then
  -- The first queued attempt: the server's time now, but later than the
  -- arrival of any set that holds one of the keys the caller waits for,
  -- handed over while it waits for others (pop_entry in lib_queue.lua
  -- keeps it). Two sets cannot then take each other's keys: one
  -- that the other must wait for is always the earlier, even when both
  -- arrive within one millisecond or the server's clock steps back.
  arrival = now
  for i = 1, n do
    if holders[i] and not mine[i] then
      for _, h in ipairs(redis.call('zrangebyscore', KEYS[n + i], 0, 0)) do
        local a = tonumber(string.sub(h, 3))
        if a and a >= arrival then
          arrival = a + 1
        end
      end
    end
  end
end
for i = 1, n do
  if mine[i] then
    redis.call('pexpire', KEYS[i], ARGV[2])
  elseif mode == '2' then
    redis.call('zadd', KEYS[n + i], 'NX', arrival, 'a:' .. entry)
    redis.call('zadd', KEYS[n + i], -(now + tonumber(ARGV[7])), 'l:' .. entry)
    redis.call('pexpire', KEYS[n + i], ARGV[7])
  end
end
return {other, pttl, arrival, held, 0, holders[other]}
