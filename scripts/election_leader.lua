-- Read an election's leader: the holder of its lock, the lock's remaining
-- TTL, the fence counter (the leader's fence: nobody else takes one while
-- it holds the lock), and the value it proclaimed, if any.
-- KEYS[1]: the lock key. KEYS[2]: the fence counter. KEYS[3]: the
-- proclaimed value, "<token>\n<value>" (see election_proclaim.lua).
-- Returns an empty list when nobody holds the lock, otherwise
-- {token, pttl in ms, fence}, followed by the proclaimed value when the
-- holder proclaimed one.
local holder = redis.call('get', KEYS[1])
if not holder then
  return {}
end
local ttl = redis.call('pttl', KEYS[1])
local fence = redis.call('get', KEYS[2]) or '0'
local v = redis.call('get', KEYS[3])
if v and string.sub(v, 1, #holder + 1) == holder .. '\n' then
  return {holder, ttl, fence, string.sub(v, #holder + 2)}
end
return {holder, ttl, fence}
