-- Try once to take every lock of a set, or none, without queues or fences
-- (Locker.ObtainAll with a call that does not wait and no WithFencing;
-- multi_obtain.lua does every other attempt). The set's keys are in one
-- server (or one Cluster slot).
-- KEYS[1..n]: the lock keys, in the set's order.
-- ARGV[1]: the token of the set, the same for every key. ARGV[2]: TTL in
-- ms.
--
-- Replies as multi_obtain.lua without queues: {-m, 0, ..., 0} (n zeros)
-- when the caller holds every key, m of which held its token already (an
-- earlier delivery of this same call: a client resends a command after a
-- dropped connection), each with its TTL set again; or {i, -2 - pttl}
-- when key i, the first held by another token, is held (pttl -1 when it
-- has no expiry), and nothing is written.
--
-- SET NX GET writes a free key and reads a held one in one command. At
-- the first key held by another token, the keys this attempt created are
-- deleted again, which no client can see (the script is one step); the
-- keys that held the caller's token get their TTL again only when the set
-- is won. A write refused halfway (an ACL rule on a later key; a server
-- out of memory refuses only the first write) leaves keys created: the
-- caller treats the error as one that may have landed and withdraws
-- (multi_release.lua), as after multi_obtain.lua.
local created = {}
for i = 1, #KEYS do
  local holder = redis.call('set', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
  if holder and holder ~= ARGV[1] then
    for j = 1, i - 1 do
      if created[j] then
        redis.call('del', KEYS[j])
      end
    end
    return {i, -2 - redis.call('pttl', KEYS[i])}
  end
  created[i] = not holder
end
local reply = {0}
for i = 1, #KEYS do
  if not created[i] then
    reply[1] = reply[1] - 1
    redis.call('pexpire', KEYS[i], ARGV[2])
  end
  reply[i + 1] = 0
end
return reply
