-- Read a read-write lock's holds and waiting writers and its last fencing
-- token, changing nothing.
-- KEYS[1]: the lock (see rw_acquire.lua). KEYS[2]: its fence counter.
-- Returns {holds, intents, fence}: holds is a flat list of member, ms
-- left, for the unexpired readers and writer; intents counts the waiting
-- writers' unexpired intents; fence is the counter's value, or false.
-- Returns {-1} when the key holds a semaphore, whatever its state.
-- (lib_hold.lua comes first: it sets t and now.)
local lowest = redis.call('zrange', KEYS[1], 0, 0)
if lowest[1] and string.sub(lowest[1], 2, 2) ~= ':' then
  return {-1}
end
local holds, intents = {}, 0
local readers = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #readers, 2 do
  holds[#holds + 1] = readers[i]
  holds[#holds + 1] = tonumber(readers[i + 1]) - now
end
local writers = redis.call('zrangebyscore', KEYS[1], '-inf', '(' .. -now, 'WITHSCORES')
for i = 1, #writers, 2 do
  if string.sub(writers[i], 1, 2) == 'q:' then
    intents = intents + 1
  else
    holds[#holds + 1] = writers[i]
    holds[#holds + 1] = -tonumber(writers[i + 1]) - now
  end
end
return {holds, intents, redis.call('get', KEYS[2])}
