-- room_set.lua: turn a product's waiting room on or off and set its terms (on the product's
-- shard 0; for a sharded product the gateway also marks every other shard, room_mark.lua).
--
-- KEYS[1] stock hash stampede:{p:<pid>:0}:stock (field room)
-- KEYS[2] state hash stampede:{p:<pid>:0}:room  (fields ceiling, window, mode, pqms, reserve, pow,
--                    commit; see room_take.lua)
--
-- ARGV[1] "1" on, "0" off
-- ARGV[2] ceiling, milli-admissions per second (0 = only the pacer's own ceiling)
-- ARGV[3] admission window, ms
-- ARGV[4] mode: fifo | random | draw
-- ARGV[5] pre-queue length, ms (0 = the pre-queue is open whenever the room is on)
-- ARGV[6] draw reserve list length
-- ARGV[7] proof-of-work cost (the challenges' maxnumber; 0 = none)
-- ARGV[8] commitment (hex SHA-256 of the room's seed)
-- ARGV[9] "2" for a sharded product (admissions are claimed before the reservation), else "1"
--
-- Returns {code, commitment}: 1 written; 0 no stock hash (nothing written); 2 LOCKED: the
-- pre-queue has a ticket or the room has opened, and mode, pre-queue length or reserve would
-- change (nothing written); 3 COMMITTED: the room already published another commitment (its
-- seed never changes; nothing written). Turning the room off lets everyone order directly;
-- the line stays and is used again if the room is turned back on.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, ''}
end
local st = redis.call('HMGET', KEYS[2], 'commit', 'mode', 'pqms', 'reserve', 'pre', 'closed', 'issued')
if st[1] and st[1] ~= ARGV[8] then
  return {3, st[1]}
end
local started = (tonumber(st[5]) or 0) > 0 or st[6] == '1' or (tonumber(st[7]) or 0) > 0
if started and ((st[2] or 'fifo') ~= ARGV[4] or (st[3] or '0') ~= ARGV[5] or (st[4] or '0') ~= ARGV[6]) then
  return {2, st[1] or ''}
end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'room', ARGV[9])
else
  redis.call('HDEL', KEYS[1], 'room')
end
redis.call('HSET', KEYS[2], 'ceiling', ARGV[2], 'window', ARGV[3], 'mode', ARGV[4], 'pqms', ARGV[5],
  'reserve', ARGV[6], 'pow', ARGV[7], 'commit', ARGV[8])
return {1, ARGV[8]}
