-- room_claim_used.lua: the admission saga's (lua/admission.go) last step after a reservation made
-- with the claim: mark the claim used, so the admission is never given back.
--
-- KEYS[1] claim string stampede:{p:<pid>:0}:room:claim:<uid> (room_claim.lua)
-- KEYS[2] state hash   stampede:{p:<pid>:0}:room  field used (claims marked used)
--
-- ARGV[1] token of the claim
--
-- Returns 1 marked, 0 when the claim is not that token's or is used already (nothing changed).

local c = redis.call('GET', KEYS[1])
if not c then
  return 0
end
local rid, dl, tok, st = string.match(c, '^(%S+) (%d+) (%x+) ([pu])$')
if tok ~= ARGV[1] or st ~= 'p' then
  return 0
end
redis.call('SET', KEYS[1], rid .. ' ' .. dl .. ' ' .. tok .. ' u', 'KEEPTTL')
redis.call('HINCRBY', KEYS[2], 'used', 1)
return 1
