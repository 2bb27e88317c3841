-- transfer_out.lua: first step of moving units between two stock shards of one
-- product (hot-SKU sharding): take them from the donor and record the transfer
-- in the donor's slot, atomically. transfer_in.lua applies it to the receiver
-- once; until then the units are in flight and RepairTransfers completes it.
--
-- KEYS[1] stock      hash stampede:{p:<pid>:<donor>}:stock
-- KEYS[2] transfers  hash stampede:{p:<pid>:<donor>}:xfer  field <transferId> = "<toShard> <units>"
--
-- ARGV[1] transfer id (unique)
-- ARGV[2] receiving shard (decimal)
-- ARGV[3] units wanted (decimal integer > 0)
--
-- Returns {code, units}:
--   1 MOVED     units (1 … wanted) taken from available and recorded under the transfer id
--   0 DRY       available is 0 (or the id is already recorded); nothing changed
--  -1 NOT_FOUND no stock hash; nothing changed

if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return {0, 0}
end
local cur = redis.call('HGET', KEYS[1], 'available')
if not cur then
  return {-1, 0}
end
local n = math.min(tonumber(cur), tonumber(ARGV[3]))
if n <= 0 then
  return {0, 0}
end
redis.call('HINCRBY', KEYS[1], 'available', -n)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. n)
return {1, n}
