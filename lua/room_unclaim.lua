-- room_unclaim.lua: give back an admission claimed for an intent whose reservation was refused
-- (sold out, limit, …), so that the buyer may still order within its window.
--
-- KEYS[1] admitted zset   stampede:{p:<pid>:0}:room:adm
-- KEYS[2] claim    string stampede:{p:<pid>:0}:room:claim:<uid>
-- KEYS[3] state    hash   stampede:{p:<pid>:0}:room  field claimed
--
-- ARGV[1] userId
-- ARGV[2] requestId of the refused intent
--
-- Returns 1 given back, 0 when the claim is not that intent's (nothing changed).

local c = redis.call('GET', KEYS[2])
if not c then
  return 0
end
local rid, dl = string.match(c, '^(%S+) (%d+)$')
if rid ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('ZADD', KEYS[1], dl, ARGV[1])
redis.call('HINCRBY', KEYS[3], 'claimed', -1)
return 1
