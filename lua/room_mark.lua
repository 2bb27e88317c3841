-- room_mark.lua: mark one shard of a sharded product as under a waiting room, or not
-- (room_set.lua sets shard 0). reserve.lua on a shard marked "2" reserves only for a gateway
-- that claimed the buyer's admission first (room_claim.lua).
--
-- KEYS[1] stock hash stampede:{p:<pid>:<shard>}:stock (field room)
-- ARGV[1] "2" on, "0" off
--
-- Returns 1, or 0 when the shard has no stock hash (nothing written).

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if ARGV[1] == '2' then
  redis.call('HSET', KEYS[1], 'room', '2')
else
  redis.call('HDEL', KEYS[1], 'room')
end
return 1
