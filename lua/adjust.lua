-- adjust.lua: apply an admin stock adjustment (ADJUST flow) to Redis, at most once.
--
-- KEYS[1] stock   hash   stampede:{p:<pid>:<shard>}:stock
-- KEYS[2] marker  string stampede:{p:<pid>:<shard>}:adjusted:<repairNo>
--
-- ARGV[1] delta (decimal integer, may be negative)
-- ARGV[2] TTL in seconds of the marker
--
-- Returns {code, available}:
--   1 ADJUSTED   available += delta
--   0 ALREADY    this repairNo was applied before; nothing changed
--  -1 NOT_FOUND  no stock hash
--  -2 NEGATIVE   available + delta < 0; nothing changed

if redis.call('EXISTS', KEYS[2]) == 1 then
  return {0, tonumber(redis.call('HGET', KEYS[1], 'available') or '0')}
end
local cur = redis.call('HGET', KEYS[1], 'available')
if not cur then
  return {-1, 0}
end
local d = tonumber(ARGV[1])
if tonumber(cur) + d < 0 then
  return {-2, tonumber(cur)}
end
redis.call('SET', KEYS[2], '1', 'EX', tonumber(ARGV[2]))
return {1, redis.call('HINCRBY', KEYS[1], 'available', d)}
