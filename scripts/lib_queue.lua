-- The start of the scripts that hand a lock or a permit to the first
-- waiter queued for it (lock_release.lua, permit_release.lua).

-- pop_entry drops the lapsed entries of the handoff queue q (see
-- lock_obtain.lua for the two members of each) and pops the live one that
-- arrived first by the server's time now (ms), dropping on the way those
-- that ask for a fencing token when fenced is false (no counter was
-- given). It returns the entry's TTL in ms, whether it asks for a fencing
-- token, and its token; nothing when no entry is left.
--
-- When the entry popped is a set's (Locker.ObtainAll: its token is a UUID,
-- '/' and the set's size), the set may hold the key while it waits for
-- others; the queue then keeps the set's arrival in a record, the member
-- 'h:<arrival>' scored 0, so that a set that starts queueing for the key
-- while the set holds it takes a later arrival (see multi_obtain.lua).
-- Scored 0, the record is neither an arrival (those are above 0) nor a
-- lapse time (below 0); the next release of the key drops it, as the
-- holder it describes no longer holds the key.
local function pop_entry(q, now, fenced)
  for _, h in ipairs(redis.call('zrangebyscore', q, 0, 0)) do
    redis.call('zrem', q, h)
  end
  for _, l in ipairs(redis.call('zrangebyscore', q, -now, '(0')) do
    redis.call('zrem', q, l, 'a' .. string.sub(l, 2))
  end
  while true do
    local e = redis.call('zrangebyscore', q, '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #e == 0 then
      return nil
    end
    local entry = string.sub(e[1], 3)
    redis.call('zrem', q, e[1], 'l:' .. entry)
    local ttl, f, token = string.match(entry, '^(%d+) ([01]) (.+)$')
    if ttl and (f == '0' or fenced) then
      if string.find(token, '^[%x%-]+/%d+$') then
        redis.call('zadd', q, 0, 'h:' .. e[2])
      end
      return ttl, f == '1', token
    end
  end
end
