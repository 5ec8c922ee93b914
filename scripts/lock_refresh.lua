-- Reset the lock's TTL only if the caller still holds it.
-- KEYS[1]: the lock key. KEYS[2], optional: an election's proclaimed
-- value (see election_proclaim.lua), whose TTL follows the lock's while it is the
-- caller's. ARGV[1]: the caller's token. ARGV[2]: TTL in ms.
-- Returns 1 when refreshed, 0 when the key is absent or holds another token.
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
if KEYS[2] then
  local v = redis.call('get', KEYS[2])
  if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
    redis.call('pexpire', KEYS[2], ARGV[2])
  end
end
return redis.call('pexpire', KEYS[1], ARGV[2])
