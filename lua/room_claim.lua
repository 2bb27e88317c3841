-- room_claim.lua: step 1 of the admission saga (lua/admission.go): a sharded product's order
-- claims the buyer's live admission for one purchase intent, in the room's slot (shard 0),
-- before its reservation runs on the buyer's home shard (another slot).
--
-- KEYS[1] admitted zset   stampede:{p:<pid>:0}:room:adm   userId by admission deadline (ms)
-- KEYS[2] claim    string stampede:{p:<pid>:0}:room:claim:<uid> =
--                         "<requestId> <deadlineMs> <token> <state>", state p (pending: the
--                         reservation's outcome is not settled) or u (used: a reservation was
--                         made with it); TTL: the admission's deadline + 1 min
-- KEYS[3] state    hash   stampede:{p:<pid>:0}:room       field claimed (claims taken and not
--                         given back)
--
-- ARGV[1] userId
-- ARGV[2] requestId of the intent
-- ARGV[3] token of a new claim (16 hex digits, random): names the claim's hold on the home
--         shard (KEYS[7] of reserve.lua, hold_revoke.lua)
--
-- Returns {code, deadlineMs, token, requestId, state}:
--   1 CLAIMED       the claim is this intent's: a new one (token = ARGV[3], state p), or the one
--                   it took before (a retry of the same intent: its own token and state)
--   0 NOT_ADMITTED  no claim of this intent and no live admission: nothing changed
--   2 SETTLE_FIRST  another intent's claim is pending (its token and requestId returned): the
--                   caller settles it (revoke its hold, then give it back or mark it used) and
--                   claims again; nothing changed
-- A claim of another intent that is used is history: a live admission (a new one) starts a new
-- claim over it. A claim record without a token (written before the saga) counts as used.

local c = redis.call('GET', KEYS[2])
if c then
  local rid, dl, tok, st = string.match(c, '^(%S+) (%d+) (%x+) ([pu])$')
  if not rid then
    rid, dl = string.match(c, '^(%S+) (%d+)')
    tok, st = '', 'u'
  end
  if rid == ARGV[2] then
    return {1, tonumber(dl) or 0, tok, rid, st}
  end
  if st == 'p' then
    return {2, tonumber(dl), tok, rid, st}
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dl = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not dl or dl <= now then
  return {0, 0, '', '', ''}
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. dl .. ' ' .. ARGV[3] .. ' p', 'PX', dl - now + 60000)
redis.call('HINCRBY', KEYS[3], 'claimed', 1)
return {1, dl, ARGV[3], ARGV[2], 'p'}
