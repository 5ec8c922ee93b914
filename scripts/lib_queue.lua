-- The start of the scripts that hand a lock or a permit to the first
-- waiter queued for it (lock_release.lua, permit_release.lua).

-- pop_entry drops the lapsed entries of the handoff queue q (see
-- lock_obtain.lua for the two members of each) and pops the live one that
-- arrived first by the server's time now (ms), dropping on the way those
-- that ask for a fencing token when fenced is false (no counter was
-- given). It returns the entry's TTL in ms, whether it asks for a fencing
-- token, and its token; nothing when no entry is left.
local function pop_entry(q, now, fenced)
  for _, l in ipairs(redis.call('zrangebyscore', q, -now, '(0')) do
    redis.call('zrem', q, l, 'a' .. string.sub(l, 2))
  end
  while true do
    local e = redis.call('zrangebyscore', q, 0, '+inf', 'LIMIT', 0, 1)
    if #e == 0 then
      return nil
    end
    local entry = string.sub(e[1], 3)
    redis.call('zrem', q, e[1], 'l:' .. entry)
    local ttl, f, token = string.match(entry, '^(%d+) ([01]) (.+)$')
    if ttl and (f == '0' or fenced) then
      return ttl, f == '1', token
    end
  end
end
