-- transfer_in.lua: second step of a stock transfer between shards: add the
-- units recorded by transfer_out.lua to the receiving shard, at most once.
-- The caller then deletes the donor's record (HDEL); a crash before that is
-- harmless, the marker makes the repeat a no-op.
--
-- KEYS[1] stock   hash   stampede:{p:<pid>:<receiver>}:stock
-- KEYS[2] marker  string stampede:{p:<pid>:<receiver>}:xferin:<transferId>
--
-- ARGV[1] units (decimal integer > 0)
-- ARGV[2] TTL in seconds of the marker (far longer than a transfer stays pending)
--
-- Returns {code, available}:
--   1 APPLIED    available += units
--   0 ALREADY    the marker exists: applied before; nothing changed
--  -1 NOT_FOUND  no stock hash; nothing changed

if redis.call('EXISTS', KEYS[2]) == 1 then
  return {0, tonumber(redis.call('HGET', KEYS[1], 'available') or '0')}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, 0}
end
redis.call('SET', KEYS[2], '1', 'EX', tonumber(ARGV[2]))
return {1, redis.call('HINCRBY', KEYS[1], 'available', tonumber(ARGV[1]))}
