-- hold_revoke.lua: settle a hold on one slot — what, if anything, was reserved there under a
-- (user, token), and make sure nothing ever will be. The compensation step of a protocol that
-- reserves on another slot than the one it decided on (lua/admission.go: an admission claimed on
-- shard 0, reserved on the home shard); a cart's lines held on several slots settle the same way.
--
-- KEYS[1] hold string stampede:{p:<pid>:<shard>}:hold:<uid>:<token> = the requestId reserved
--                     under the token (reserve.lua writes it with the reservation), or "~": revoked
--
-- ARGV[1] TTL in seconds of the revoked mark (at least the life of whatever could still present
--         the token: the claim's, its requests' in flight)
--
-- Returns {1, requestId} HELD: a reservation was made under the token (nothing changed);
--         {0, ''}        REVOKED: nothing was, and reserve.lua now refuses the token (REVOKED).
--                        Idempotent.

local h = redis.call('GET', KEYS[1])
if h and h ~= '~' then
  return {1, h}
end
if not h then
  redis.call('SET', KEYS[1], '~', 'EX', tonumber(ARGV[1]))
end
return {0, ''}
