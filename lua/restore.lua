-- restore.lua: put back the reservation of an order that MySQL holds but
-- Redis lost (a failover to a replica that had not received it, a restart
-- without persistence), at most once per order (its restored marker).
--
-- KEYS[1] stock    hash   stampede:{p:<pid>:<shard>}:stock
-- KEYS[2] request  string stampede:{p:<pid>:<shard>}:req:<uid>:<requestId>
-- KEYS[3] user     string stampede:{p:<pid>:<shard>}:user:<uid>
-- KEYS[4] marker   string stampede:{p:<pid>:<shard>}:restored:<orderNo>
-- KEYS[5] buyers   set    stampede:{p:<pid>:<shard>}:buyers (reserve.lua): the user is added,
--                         so a gateway's copy of the set sends its replays to the record
--
-- ARGV[1] orderNo
-- ARGV[2] quantity (decimal integer > 0)
-- ARGV[3] TTL in seconds of the marker, and of the record when it is written
--         (what is left of RequestTTL); the user's count lives until the sale's
--         end (stock field end) plus this, as reserve.lua's does
-- ARGV[4] status to record (the order's status in MySQL)
-- ARGV[5] userId (decimal)
--
-- The caller has established that the reservation was lost: the record is
-- missing, or names another orderNo (a later reserve found it missing),
-- while the order is live and within the record's lifetime. The record is
-- written only when missing.
--
-- Returns {code, available}:
--   1 RESTORED   available lowered by quantity, the user's held count raised (record written if missing)
--   0 ALREADY    the marker exists: restored before; nothing changed
--  -1 NOT_FOUND  no stock hash: nothing changed

if redis.call('EXISTS', KEYS[4]) == 1 then
  return {0, tonumber(redis.call('HGET', KEYS[1], 'available') or '0')}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, 0}
end
local q = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
redis.call('SET', KEYS[4], '1', 'EX', ttl)
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[4], 'EX', ttl)
end
local held = tonumber(redis.call('GET', KEYS[3]) or '0')
local t = redis.call('TIME')
local left = math.ceil((tonumber(redis.call('HGET', KEYS[1], 'end') or '0') or 0) / 1000 - tonumber(t[1]))
redis.call('SET', KEYS[3], held + q, 'EX', math.max(ttl, left + ttl))
local bt = redis.call('TTL', KEYS[5])
if bt == -2 then -- a new set, with its incarnation member
  redis.call('SADD', KEYS[5], ARGV[5], 'e' .. ARGV[1])
else
  redis.call('SADD', KEYS[5], ARGV[5])
end
if bt < ttl then -- the set outlives the record
  redis.call('EXPIRE', KEYS[5], ttl)
end
return {1, redis.call('HINCRBY', KEYS[1], 'available', -q)}
