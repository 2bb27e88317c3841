-- room_claim_giveback.lua: the admission saga's (lua/admission.go) compensation: give a pending
-- claim's admission back to the buyer. Only after hold_revoke.lua answered REVOKED for the
-- claim's token on the home shard: nothing was reserved with it, and nothing can be any more.
--
-- KEYS[1] admitted zset   stampede:{p:<pid>:0}:room:adm
-- KEYS[2] claim    string stampede:{p:<pid>:0}:room:claim:<uid> (room_claim.lua)
-- KEYS[3] state    hash   stampede:{p:<pid>:0}:room  fields claimed, expired, owed
--
-- ARGV[1] userId
-- ARGV[2] token of the claim
--
-- Returns 1 given back: the admission is live again until its own deadline (one past it is
-- expired by the next pacer step). A buyer holds one admission at a time: if it holds another
-- (a newer one, taken while this claim was pending after a fault), it keeps the later deadline
-- and the other admission passes on as an expired one does (expired, owed). 0 when the claim is
-- not that token's or is used: nothing changed (a second give-back of one claim is a no-op).

local c = redis.call('GET', KEYS[2])
if not c then
  return 0
end
local rid, dl, tok, st = string.match(c, '^(%S+) (%d+) (%x+) ([pu])$')
if tok ~= ARGV[2] or st ~= 'p' then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('HINCRBY', KEYS[3], 'claimed', -1)
local cur = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if cur then
  redis.call('ZADD', KEYS[1], math.max(cur, tonumber(dl)), ARGV[1])
  redis.call('HINCRBY', KEYS[3], 'expired', 1)
  redis.call('HINCRBY', KEYS[3], 'owed', 1)
  return 1
end
redis.call('ZADD', KEYS[1], dl, ARGV[1])
return 1
