-- Release the lock if the caller holds it: hand it straight to the first
-- live entry of its handoff queue, or delete it; and announce which, in
-- the same step (see releaseChannel in notify.go).
-- KEYS[1]: the lock key. KEYS[2], optional: the handoff queue. KEYS[3],
-- optional: the fence counter.
-- ARGV[1]: the caller's token. ARGV[2]: on Redis Cluster, the sharded
-- channel to announce on, in the key's slot; elsewhere empty, and the
-- channel is named after the key. ARGV[3], optional: the caller's own
-- queue entry, removed when the caller does not hold the lock (a waiter
-- that gives up).
--
-- Entries that lapsed are dropped first; the handoff goes to the live entry
-- that arrived first. It sets the lock key to the entry's token, with the
-- entry's TTL, takes a fencing token for it when the entry asks for one,
-- and announces "<ttl ms> <fence> <token>"; a plain release announces an
-- empty message.
-- An entry that asks for a fencing token is skipped when the counter was
-- not given. Returns 1 when released, 0 when the key is absent or holds
-- another token.
local function announce(msg)
  if ARGV[2] ~= '' then
    redis.call('spublish', ARGV[2], msg)
  else
    redis.call('publish', 'locksmith:released:' .. KEYS[1], msg)
  end
end

if redis.call('get', KEYS[1]) ~= ARGV[1] then
  if ARGV[3] then
    redis.call('zrem', KEYS[2], 'a:' .. ARGV[3], 'l:' .. ARGV[3])
  end
  return 0
end
if KEYS[2] and redis.call('exists', KEYS[2]) == 1 then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  -- Drop the lapsed entries (see obtain.lua for the two members of each),
  -- then take the one that arrived first.
  for _, l in ipairs(redis.call('zrangebyscore', KEYS[2], -now, '(0')) do
    redis.call('zrem', KEYS[2], l, 'a' .. string.sub(l, 2))
  end
  while true do
    local e = redis.call('zrangebyscore', KEYS[2], 0, '+inf', 'LIMIT', 0, 1)
    if #e == 0 then
      break
    end
    local entry = string.sub(e[1], 3)
    redis.call('zrem', KEYS[2], e[1], 'l:' .. entry)
    local ttl, fenced, token = string.match(entry, '^(%d+) ([01]) (.+)$')
    if ttl and (fenced == '0' or KEYS[3]) then
      redis.call('set', KEYS[1], token, 'PX', ttl)
      local fence = 0
      if fenced == '1' then
        local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
        local last = tonumber(redis.call('get', KEYS[3]) or '0')
        fence = math.max(last + 1, now_us)
        redis.call('set', KEYS[3], string.format('%d', fence))
      end
      announce(ttl .. ' ' .. string.format('%d', fence) .. ' ' .. token)
      return 1
    end
  end
end
redis.call('del', KEYS[1])
announce('')
return 1
