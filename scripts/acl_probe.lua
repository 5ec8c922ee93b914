-- Report which of the commands a Locker's calls need the connected user
-- may not run, on one lock's keys and channel, changing nothing.
-- KEYS[1]: the lock key. KEYS[2]: its handoff queue. KEYS[3]: its fence
-- counter. KEYS[4]: its completion record. KEYS[5]: an election's
-- proclaimed value.
-- ARGV[1]: the release channel. ARGV[2]: the command that announces on it
-- (PUBLISH or SPUBLISH). ARGV[3]: the command that subscribes to it
-- (SUBSCRIBE or SSUBSCRIBE). ARGV[4]: what to check, a letter for each
-- need: 'l' the lock key, 's' a semaphore and 'w' a read-write lock at the lock
-- key's name, 'q' the
-- handoff queue, 'f' fencing, 'o' completion records, 'a' announcements,
-- 'i' inspection, 'e' an election's proclaimed value, 'u' INFO server (the
-- restart guard reads uptimes). The scripts are always checked.
-- Returns what is refused, each as "COMMAND name", or an empty list.
-- Before Redis 7.0 there is no redis.acl_check_cmd: the script then only
-- shows that scripts run at all.
if not redis.acl_check_cmd then
  return {}
end
local refused = {}
local function check(cmd, ...)
  if not redis.acl_check_cmd(cmd, ...) then
    local name = ({...})[1]
    if name then
      table.insert(refused, string.upper(cmd) .. ' ' .. name)
    else
      table.insert(refused, string.upper(cmd))
    end
  end
end
local function needs(letter)
  return string.find(ARGV[4], letter, 1, true) ~= nil
end

local lock = KEYS[1]
check('evalsha', '0000000000000000000000000000000000000000', '1', lock)
check('eval', 'return 0', '1', lock)
if needs('l') then
  check('set', lock, 'x', 'PX', '1', 'NX', 'GET')
  check('get', lock)
  check('del', lock)
  check('pexpire', lock, '1')
  check('pttl', lock)
end
if needs('s') then
  check('zcount', lock, '0', '1')
  check('zrangebyscore', lock, '0', '1', 'WITHSCORES', 'LIMIT', '0', '1')
  check('zremrangebyscore', lock, '-inf', '0')
  check('zscore', lock, 'm')
  check('zcard', lock)
  check('zrange', lock, '0', '0', 'WITHSCORES')
  check('zadd', lock, 'XX', '0', 'm')
  check('zrem', lock, 'm')
  check('pexpireat', lock, '1')
end
if needs('w') then
  check('zremrangebyscore', lock, '-inf', '0')
  check('zscore', lock, 'm')
  check('zrange', lock, '0', '0', 'WITHSCORES')
  check('zrangebyscore', lock, '-inf', '0', 'WITHSCORES')
  check('zadd', lock, 'XX', '0', 'm')
  check('zrem', lock, 'm')
  check('pexpireat', lock, '1')
end
if needs('q') or needs('f') or needs('s') or needs('w') then
  check('time')
end
if needs('q') then
  check('exists', KEYS[2])
  check('zadd', KEYS[2], 'NX', '0', 'm')
  check('zrem', KEYS[2], 'm')
  check('zrangebyscore', KEYS[2], '0', '1')
  check('pexpire', KEYS[2], '1')
end
if needs('f') then
  check('get', KEYS[3])
  check('set', KEYS[3], '1', 'PX', '1')
end
if needs('o') then
  check('get', KEYS[4])
  check('set', KEYS[4], 'x', 'PX', '1')
end
if needs('i') then
  check('get', KEYS[3])
  check('get', KEYS[4])
  check('zcount', KEYS[2], '0', '1')
end
if needs('u') then
  check('info', 'server')
end
if needs('e') then
  check('get', KEYS[5])
  check('set', KEYS[5], 'x', 'PX', '1')
  check('pexpire', KEYS[5], '1')
  check('del', KEYS[5])
end
if needs('a') then
  check(ARGV[2], ARGV[1], '')
  check(ARGV[3], ARGV[1])
end
return refused
