-- Take a read or a write hold of a read-write lock. The lock is a sorted
-- set: each reader's hold is "r:<token>" scored by its expiry (server
-- time, ms), and the writer's hold "w:<token>" and each waiting writer's
-- intent "q:<token>" are scored by minus their expiry, so that one range
-- holds the readers and the other the writers. What expired is dropped
-- first; the set's own expiry is the latest of its members'.
-- A reader enters when no writer holds and no writer waits (an intent
-- stops new readers, so that writers are not starved); a writer enters
-- when nobody holds, and otherwise leaves or renews its intent, which
-- lapses after ARGV[3] ms unless renewed.
-- KEYS[1]: the lock. KEYS[2], optional: its fence counter.
-- ARGV[1]: the caller's member, "r:<token>" or "w:<token>". ARGV[2]: the
-- hold's TTL in ms. ARGV[3]: how long a writer's intent lives, in ms, or
-- 0 to leave none (a writer that will not wait).
-- ARGV[4]: how long the fence counter lives after it was last taken, in
-- ms, or 0 for ever.
-- Returns {1, fence, more} when the caller holds (a resend of this very
-- call, whose first delivery took the hold, takes it again with a new
-- fence; more is 1 when more readers may enter now, 0 otherwise), or
-- {0, ms}: how long until what stops the caller expires, unless it is
-- renewed; or {-1}, writing nothing, when the key holds a semaphore.
--
-- Redis does not undo a script that fails halfway: everything that can be
-- refused (TIME, the reads) runs before the first write. The first write
-- is a ZADD, which Redis refuses when memory is full (maxmemory with
-- noeviction): then nothing is written. The writes after it are allowed
-- even then. A refused reader writes nothing; the expired members are
-- counted out, and dropped by the next caller that writes.
-- (lib_hold.lua and lib_fence.lua come first: they set t and now, and
-- define take_fence.)
local last_fence
if KEYS[2] then
  last_fence = redis.call('get', KEYS[2])
end
local me = ARGV[1]
local writing = string.sub(me, 1, 2) == 'w:'
local intent = 'q:' .. string.sub(me, 3)

local function drop_expired()
  redis.call('zremrangebyscore', KEYS[1], '(0', now)
  redis.call('zremrangebyscore', KEYS[1], -now, '(0')
end

-- A semaphore's permits are bare tokens: the lowest member tells which
-- kind the set is.
local lowest = redis.call('zrange', KEYS[1], 0, 0)
if lowest[1] and string.sub(lowest[1], 2, 2) ~= ':' then
  return {-1}
end
local mine = redis.call('zscore', KEYS[1], me)
if not (mine and math.abs(tonumber(mine)) > now) then
  -- The writers' range, unexpired (scores below -now): at most one
  -- writer, and the intents.
  local writer_left = -1
  local latest_writer = 0
  local others = redis.call('zrangebyscore', KEYS[1], '-inf', '(' .. -now, 'WITHSCORES')
  for i = 1, #others, 2 do
    local expires = -tonumber(others[i + 1])
    if string.sub(others[i], 1, 2) == 'w:' then
      writer_left = expires - now
    end
    if others[i] ~= intent then
      latest_writer = math.max(latest_writer, expires)
    end
  end
  if writing then
    local readers = redis.call('zrange', KEYS[1], -1, -1, 'WITHSCORES')
    local reader_until = 0
    if readers[2] and tonumber(readers[2]) > now then
      reader_until = tonumber(readers[2])
    end
    if writer_left >= 0 or reader_until > 0 then
      if ARGV[3] ~= '0' then
        redis.call('zadd', KEYS[1], -(now + tonumber(ARGV[3])), intent)
        drop_expired()
        keep(KEYS[1])
      end
      if writer_left >= 0 then
        return {0, writer_left}
      end
      return {0, reader_until - now}
    end
  elseif latest_writer > 0 then
    return {0, latest_writer - now}
  end
end

if writing then
  redis.call('zadd', KEYS[1], -(now + tonumber(ARGV[2])), me)
  redis.call('zrem', KEYS[1], intent)
else
  redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), me)
end
drop_expired()
keep(KEYS[1])
local fence = 0
if KEYS[2] then
  fence = take_fence(KEYS[2], last_fence, t, ARGV[4])
end
-- Readers enter only when no writer holds or waits: so may the next.
local more = 0
if not writing then
  more = 1
end
return {1, fence, more}
