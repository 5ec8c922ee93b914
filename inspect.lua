-- Read a lock's state, its fence counter and its completion record, in one
-- step, changing nothing.
-- KEYS[1]: the lock key. KEYS[2]: its fence counter. KEYS[3]: its
-- completion record; both in the lock key's cluster slot.
-- Returns {value of KEYS[1], PTTL of KEYS[1], value of KEYS[2], value of
-- KEYS[3]}; the value of an absent key is a nil reply, and the PTTL of an
-- absent lock key is -2 (-1 when it has no expiry).
return {
  redis.call('get', KEYS[1]),
  redis.call('pttl', KEYS[1]),
  redis.call('get', KEYS[2]),
  redis.call('get', KEYS[3]),
}
