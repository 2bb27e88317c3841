-- sale.lua: write a product's sale terms to one existing shard (admin lifecycle:
-- PATCH, pause, resume, end; gateway/sale_admin.go), never creating the shard.
--
-- KEYS[1] stock hash stampede:{p:<pid>:<shard>}:stock
--
-- ARGV[1] version of the terms (product.sale_version in MySQL, decimal integer >= 0)
-- ARGV[2] price (minor units)
-- ARGV[3] limit per user (0 = none)
-- ARGV[4] max quantity per order
-- ARGV[5] sale start, unix ms
-- ARGV[6] sale end, unix ms
-- ARGV[7] paused: "1" or "0" (reserve.lua refuses with PAUSED while "1")
--
-- Returns {code, version}:
--   1 WRITTEN    the terms were written; version = ARGV[1]
--   0 STALE      the hash holds terms of a later version (field sver): nothing written;
--                version = the hash's. Two admin changes racing to Redis end with the
--                later one's terms whatever order their writes arrive in
--  -1 NOT_FOUND  no stock hash (the shard was never loaded or Redis lost it): nothing
--                written; available is only ever set by load.lua and the stock scripts
-- available is never touched.

if redis.call('HEXISTS', KEYS[1], 'available') == 0 then
  return {-1, 0}
end
local cur = tonumber(redis.call('HGET', KEYS[1], 'sver') or '0') or 0
local v = tonumber(ARGV[1])
if cur > v then
  return {0, cur}
end
redis.call('HSET', KEYS[1], 'sver', ARGV[1], 'price', ARGV[2], 'limit', ARGV[3], 'maxq', ARGV[4],
  'start', ARGV[5], 'end', ARGV[6], 'paused', ARGV[7])
return {1, v}
