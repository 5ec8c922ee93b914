-- Release the lock if the caller holds it: hand it straight to the first
-- live entry of its handoff queue, or delete it; and announce which, in
-- the same step (see acquire.go: a Locker hears the announcement in
-- internal/notify/subscriber.go and acts on it in announce.go there).
-- KEYS[1]: the lock key. KEYS[2], optional: the handoff queue. KEYS[3],
-- optional: the fence counter. KEYS[4], optional: an election's
-- proclaimed value, deleted with the release (a new holder's value is in
-- its token).
-- ARGV[1]: the caller's token. ARGV[2]: the release channel. When
-- KEYS[3] is given, ARGV[3]: how long the fence counter lives after it
-- was last taken, in ms, or 0 for ever. Last, optional: the caller's own
-- queue entry, removed when the caller does not hold the lock (a waiter
-- that gives up).
-- scripts.go runs this text in two variants, one per command that
-- announces, after a line that names it: publish is 'publish' or, on
-- Redis Cluster, 'spublish' (then lib_queue.lua and lib_fence.lua, which
-- define pop_entry and take_fence). Every argument costs the server
-- time at each call, so a release sends only those it needs. Entries that lapsed are dropped first; the
-- handoff goes to the live entry that arrived first. It takes a fencing token for the entry when it asks
-- for one, sets the lock key to the entry's token with the entry's TTL,
-- and announces "<ttl ms> <fence> <token>"; a plain release announces an
-- empty message. An entry that asks for a fencing token is skipped when
-- the counter was not given.
--
-- Redis does not undo a script that fails halfway, so what can be refused
-- (TIME, the read of the fence counter) is read before the first write,
-- and nothing that can be refused follows the change of the lock key: the
-- announcement is sent with pcall, and a refused one (a user without
-- rights on the channel) leaves the release done; waiters notice it by
-- polling.
-- Returns 1 when released, 0 when the key is absent or holds another
-- token.
local function announce(msg)
  redis.pcall(publish, ARGV[2], msg)
end

if redis.call('get', KEYS[1]) ~= ARGV[1] then
  local entry = ARGV[3]
  if KEYS[3] then
    entry = ARGV[4]
  end
  if entry then
    redis.call('zrem', KEYS[2], 'a:' .. entry, 'l:' .. entry)
  end
  return 0
end
local t, last_fence
if KEYS[2] and redis.call('exists', KEYS[2]) == 1 then
  t = redis.call('time')
  if KEYS[3] then
    last_fence = redis.call('get', KEYS[3])
  end
end
if KEYS[4] then
  redis.call('del', KEYS[4])
end
if t then
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ttl, fenced, token = pop_entry(KEYS[2], now, KEYS[3] ~= nil)
  if ttl then
    local fence = 0
    if fenced then
      fence = take_fence(KEYS[3], last_fence, t, ARGV[3])
    end
    redis.call('set', KEYS[1], token, 'PX', ttl)
    announce(ttl .. ' ' .. string.format('%d', fence) .. ' ' .. token)
    return 1
  end
end
redis.call('del', KEYS[1])
announce('')
return 1
