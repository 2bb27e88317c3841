-- load.lua: create or refresh a product shard's stock hash.
--
-- KEYS[1] stock hash stampede:{p:<pid>:<shard>}:stock
--
-- ARGV[1] available to set when the hash is new (decimal integer >= 0)
-- ARGV[2] total (units this shard started with)
-- ARGV[3] price (minor units)
-- ARGV[4] limit per user (0 = none)
-- ARGV[5] max quantity per order
-- ARGV[6] sale start, unix ms
-- ARGV[7] sale end, unix ms
-- ARGV[8] the product's incarnation (product.incarnation: 32 hex digits; "" for
--         a product created before incarnations existed)
--
-- Returns {code, available} or {code, 0, incarnation}:
--   1 CREATED    the hash was new; available = ARGV[1]; field inc = ARGV[8]
--   0 REFRESHED  the hash existed with this incarnation; metadata updated,
--                available left as it was
--  -2 CONFLICT   the hash belongs to another product that had this id (its field
--                inc, returned third, "" if it has none, differs from ARGV[8]):
--                nothing written. Another database's product, or one a MySQL
--                restore forgot: its stock is never adopted.
-- available is never overwritten here: only reserve, release and adjust move it.
-- A new hash also gets buyers = 1: every intent of this shard is accepted by a
-- reserve.lua that keeps the shard's buyers set (buyers.lua trusts only such shards).

local inc = ARGV[8] or ''
local created = 0
if redis.call('HEXISTS', KEYS[1], 'available') == 0 then
  redis.call('HSET', KEYS[1], 'available', ARGV[1], 'buyers', '1')
  if inc ~= '' then
    redis.call('HSET', KEYS[1], 'inc', inc)
  end
  created = 1
else
  local cur = redis.call('HGET', KEYS[1], 'inc') or ''
  if cur ~= inc then
    return {-2, 0, cur}
  end
end
redis.call('HSET', KEYS[1], 'total', ARGV[2], 'price', ARGV[3], 'limit', ARGV[4],
  'maxq', ARGV[5], 'start', ARGV[6], 'end', ARGV[7])
return {created, tonumber(redis.call('HGET', KEYS[1], 'available'))}
