-- Read a semaphore's unexpired permits and its last fencing token,
-- changing nothing.
-- KEYS[1]: the semaphore (see permit_acquire.lua). KEYS[2]: its fence
-- counter.
-- Returns {permits, fence}: permits is a flat list of token, ms left,
-- earliest expiry first; fence is the counter's value, or false.
-- (hold_lib.lua comes first: it sets t and now.)
local live = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
local permits = {}
for i = 1, #live, 2 do
  permits[#permits + 1] = live[i]
  permits[#permits + 1] = tonumber(live[i + 1]) - now
end
return {permits, redis.call('get', KEYS[2])}
