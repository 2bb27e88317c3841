-- buyers.lua: the buyers set of a product shard, for a gateway that holds the product
-- sold out (gateway/buyers.go): the users with an accepted intent here, so that every
-- other user's request is answered SOLD_OUT from memory.
--
-- KEYS[1] stock   hash stampede:{p:<pid>:<shard>}:stock
-- KEYS[2] buyers  set  stampede:{p:<pid>:<shard>}:buyers (kept by reserve.lua)
--
-- ARGV[1] members of the caller's copy (decimal integer; 0 without one)
-- ARGV[2] the caller's copy's incarnation member "e<orderNo>" ("" without one)
-- ARGV[3] most members the caller takes (decimal integer > 0)
--
-- Returns {code, members}:
--   0 UNTRACKED  the stock hash lacks buyers = 1 (a shard created before reserve.lua kept
--                the set, or no stock hash): the set may miss buyers, do not use it
--   1 UNCHANGED  the set still has ARGV[1] members and the incarnation ARGV[2] (or is
--                still empty, ARGV[1] = 0): it is the caller's copy. Between two
--                incarnations the set only grows (reserve.lua never removes a member),
--                so the same count in the same incarnation is the same set
--   2 TOO_MANY   more than ARGV[3] members: not sent
--   3 MEMBERS    {3, members, {member, ...}}: the whole set (userIds and the
--                incarnation member)
-- Nothing is written.

if redis.call('HGET', KEYS[1], 'buyers') ~= '1' then
  return {0, 0}
end
local n = redis.call('SCARD', KEYS[2])
if n == tonumber(ARGV[1]) and (n == 0 or redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1) then
  return {1, n}
end
if n > tonumber(ARGV[3]) then
  return {2, n}
end
return {3, n, redis.call('SMEMBERS', KEYS[2])}
