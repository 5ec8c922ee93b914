-- Read a lock's state, its fence counter, its completion record and how
-- many waiters are queued for it, in one step, changing nothing.
-- KEYS[1]: the lock key. KEYS[2]: its fence counter. KEYS[3]: its
-- completion record. KEYS[4]: its handoff queue; all in the lock key's
-- cluster slot.
-- Returns {value of KEYS[1], PTTL of KEYS[1], value of KEYS[2], value of
-- KEYS[3], live entries in KEYS[4]}; the value of an absent key is a nil
-- reply, and the PTTL of an absent lock key is -2 (-1 when it has no
-- expiry). An entry is live until it lapses; its lapse member is scored
-- with minus that time (see lock_obtain.lua).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {
  redis.call('get', KEYS[1]),
  redis.call('pttl', KEYS[1]),
  redis.call('get', KEYS[2]),
  redis.call('get', KEYS[3]),
  redis.call('zcount', KEYS[4], '-inf', '(' .. -now),
}
