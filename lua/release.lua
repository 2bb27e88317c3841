-- release.lua: give one order's reserved units back to Redis, at most once.
--
-- KEYS[1] stock   hash   stampede:{p:<pid>:<shard>}:stock
-- KEYS[2] user    string stampede:{p:<pid>:<shard>}:user:<uid>
-- KEYS[3] marker  string stampede:{p:<pid>:<shard>}:released:<orderNo>
--
-- ARGV[1] quantity to give back (decimal integer > 0)
-- ARGV[2] TTL in seconds of the marker (long enough to outlive every retry)
--
-- Returns {code, available}:
--   1 RELEASED        units added to available, the user's held count lowered
--   0 ALREADY         the marker exists: this orderNo was released before; nothing changed
--  -1 NOT_FOUND       no stock hash; nothing changed (the caller retries after the product is loaded)

if redis.call('EXISTS', KEYS[3]) == 1 then
  return {0, tonumber(redis.call('HGET', KEYS[1], 'available') or '0')}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, 0}
end
local q = tonumber(ARGV[1])
redis.call('SET', KEYS[3], '1', 'EX', tonumber(ARGV[2]))
local available = redis.call('HINCRBY', KEYS[1], 'available', q)
local held = tonumber(redis.call('GET', KEYS[2]) or '0')
if held > q then
  redis.call('SET', KEYS[2], held - q, 'KEEPTTL')
elseif held > 0 then
  redis.call('DEL', KEYS[2])
end
return {1, available}
