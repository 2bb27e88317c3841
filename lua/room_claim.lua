-- room_claim.lua: a sharded product's admission check (its reservation runs on the buyer's home
-- shard, another slot than the room): take the buyer's live admission for one purchase intent.
--
-- KEYS[1] admitted zset   stampede:{p:<pid>:0}:room:adm   userId by admission deadline (ms)
-- KEYS[2] claim    string stampede:{p:<pid>:0}:room:claim:<uid> = "<requestId> <deadlineMs>"
-- KEYS[3] state    hash   stampede:{p:<pid>:0}:room       field claimed (count)
--
-- ARGV[1] userId
-- ARGV[2] requestId of the intent
--
-- Returns {1, deadlineMs} claimed (also again for the same requestId while the claim lives:
-- a retry of the same intent); {0, 0} NOT_ADMITTED. The claim lives until a minute past the
-- admission's deadline; room_unclaim.lua gives the admission back when the reservation failed.

local c = redis.call('GET', KEYS[2])
if c then
  local rid, dl = string.match(c, '^(%S+) (%d+)$')
  if rid == ARGV[2] then
    return {1, tonumber(dl)}
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dl = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not dl or dl <= now then
  return {0, 0}
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. dl, 'PX', dl - now + 60000)
redis.call('HINCRBY', KEYS[3], 'claimed', 1)
return {1, dl}
