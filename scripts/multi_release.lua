-- Release every lock of a set that still holds the caller's token, each
-- as lock_release.lua releases one lock: handed straight to the first
-- live entry of its handoff queue, or deleted; and announce each on its
-- channel. Lock.Release of a set from Locker.ObtainAll, and the
-- withdrawal of a waiting set (a call that gives up, fails or starts
-- over), which also removes the caller's own entries from the queues.
-- KEYS[1..n]: the lock keys. KEYS[n+1..2n], when ARGV[3] is '1': their
-- handoff queues, in the same order. Then, when the set took fencing
-- tokens: their fence counters, in the same order.
-- ARGV[1]: the caller's token. ARGV[2]: n. ARGV[3]: '1' when KEYS has
-- the queues, else '0'. ARGV[4]: the caller's queue entry, removed from
-- every queue first, or '' for none. ARGV[5..n+4]: the release channel
-- of each key, in the order of KEYS. ARGV[n+5], when KEYS has the fence
-- counters: how long a fence counter lives after it was last taken, in
-- ms, or 0 for ever.
-- scripts.go runs this text in two variants, one per command that
-- announces, after a line that names it: publish is 'publish' or, on
-- Redis Cluster, 'spublish' (then lib_queue.lua and lib_fence.lua, which
-- define pop_entry and take_fence). Every argument costs the server time
-- at each call, so a release sends only those it needs.
--
-- A key released to nobody is deleted and announced with an empty
-- message; a key handed over is set to the entry's token with the
-- entry's TTL (and the next fencing token, when the entry asks for one
-- and the counters were given) and announced as "<ttl ms> <fence>
-- <token>", so that the waiter's Locker returns it (or, for a waiting
-- set, counts it) without another round trip.
--
-- Every key is read before the first write; the announcements are sent
-- with pcall, so a refused one (no rights on a channel) leaves the
-- release done, and its waiters notice it by polling. Each call from the
-- script costs the server time, so one EXISTS counts the queues (and a
-- queue is asked about alone only when some but not all exist), and the
-- keys released to nobody go in one DEL; in calls of at most 256 keys
-- (unpack's limit is far above). The lock keys are read with GET, not
-- MGET, to need no command beyond those docs/acl.md lists.
-- Returns the number of keys released; a key absent or holding another
-- token is left alone.
local n = tonumber(ARGV[2])
local queued = ARGV[3] == '1'
local entry = ARGV[4]
local q0 = 0
if queued then
  q0 = n
end
local fenced = #KEYS > n + q0

-- batched runs cmd, which answers a count, on keys[from..to] in calls of
-- at most 256 keys, and returns the sum.
local function batched(cmd, keys, from, to)
  local sum = 0
  for s = from, to, 256 do
    sum = sum + redis.call(cmd, unpack(keys, s, math.min(s + 255, to)))
  end
  return sum
end

local queues = 0
if queued then
  queues = batched('exists', KEYS, n + 1, 2 * n)
end
local owned, waiting, last = {}, {}, {}
local t
for i = 1, n do
  owned[i] = redis.call('get', KEYS[i]) == ARGV[1]
  if queues == n then
    waiting[i] = true
  elseif queues > 0 then
    waiting[i] = redis.call('exists', KEYS[n + i]) == 1
  end
  if owned[i] and waiting[i] then
    if not t then
      t = redis.call('time')
    end
    if fenced then
      last[i] = redis.call('get', KEYS[n + q0 + i])
    end
  end
end
local gone = {}
for i = 1, n do
  if owned[i] and not waiting[i] then
    gone[#gone + 1] = KEYS[i]
  end
end
if #gone > 0 then
  batched('del', gone, 1, #gone)
end
local released = 0
for i = 1, n do
  if waiting[i] and entry ~= '' then
    redis.call('zrem', KEYS[n + i], 'a:' .. entry, 'l:' .. entry)
  end
  if owned[i] then
    local channel = ARGV[4 + i]
    local ttl, wants_fence, token
    if waiting[i] then
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      ttl, wants_fence, token = pop_entry(KEYS[n + i], now, fenced)
    end
    if ttl then
      local fence = 0
      if wants_fence then
        fence = take_fence(KEYS[n + q0 + i], last[i], t, ARGV[n + 5])
      end
      redis.call('set', KEYS[i], token, 'PX', ttl)
      redis.pcall(publish, channel, ttl .. ' ' .. string.format('%d', fence) .. ' ' .. token)
    else
      if waiting[i] then
        redis.call('del', KEYS[i])
      end
      redis.pcall(publish, channel, '')
    end
    released = released + 1
  end
end
return released
