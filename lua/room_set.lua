-- room_set.lua: turn a product's waiting room on or off and set its limits.
--
-- KEYS[1] stock hash stampede:{p:<pid>:0}:stock (field room)
-- KEYS[2] state hash stampede:{p:<pid>:0}:room  (fields ceiling, window)
--
-- ARGV[1] "1" on, "0" off
-- ARGV[2] ceiling, milli-admissions per second (0 = only the pacer's own ceiling)
-- ARGV[3] admission window, ms
--
-- Returns 1, or 0 when there is no stock hash (nothing written). Turning the room off lets
-- everyone order directly; the line (tickets, admissions) stays, and is used again if the
-- room is turned back on.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'room', '1')
else
  redis.call('HDEL', KEYS[1], 'room')
end
redis.call('HSET', KEYS[2], 'ceiling', ARGV[2], 'window', ARGV[3])
return 1
