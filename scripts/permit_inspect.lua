-- Read a semaphore's unexpired permits, its last fencing token and how
-- many waiters are queued for a permit, changing nothing.
-- KEYS[1]: the semaphore (see permit_acquire.lua). KEYS[2]: its fence
-- counter. KEYS[3]: its handoff queue.
-- Returns {permits, fence, queued}: permits is a flat list of token, ms
-- left, earliest expiry first; fence is the counter's value, or false;
-- queued counts the live entries of the queue (an entry's lapse member is
-- scored with minus when it lapses: see permit_acquire.lua). Returns {-1}
-- when the key holds a read-write lock, whatever its state (a writer's
-- hold and intents are scored below every permit).
-- (lib_hold.lua comes first: it sets t and now.)
local lowest = redis.call('zrange', KEYS[1], 0, 0)
if lowest[1] and string.sub(lowest[1], 2, 2) == ':' then
  return {-1}
end
local live = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
local permits = {}
for i = 1, #live, 2 do
  permits[#permits + 1] = live[i]
  permits[#permits + 1] = tonumber(live[i + 1]) - now
end
return {permits, redis.call('get', KEYS[2]), redis.call('zcount', KEYS[3], '-inf', '(' .. -now)}
