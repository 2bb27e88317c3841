-- room_publish.lua: end a pre-queue's shuffle (after room_place.lua wrote every place): publish
-- the seed, the list's hash and the list itself, and open admission. A draw also fixes its
-- winners (as many as the units left now) and its cutoff (winners + reserve list).
--
-- KEYS[1] state hash   stampede:{p:<pid>:0}:room        fields shuffled, seed, lhash, shat (ms),
--                      pre, base, reserve, winners, cutoff, mode
-- KEYS[2] list  string stampede:{p:<pid>:0}:room:list   the published list (package drop's List)
-- KEYS[3] stock hash   stampede:{p:<pid>:0}:stock       available
-- KEYS[4] pre   hash   stampede:{p:<pid>:0}:room:pre    ticketId = userId of the pre-queue
--
-- ARGV[1] seed (64 hex digits)
-- ARGV[2] hex SHA-256 of ARGV[3]
-- ARGV[3] the list
-- ARGV[4] tickets in the list
-- ARGV[5] units left in every shard (sharded product), "" for a one-shard product
--
-- Returns 1 published; 0 already published (by another pacer: nothing written); -1 ARGV[4] is not
-- the pre-queue's size (the caller read it before the pre-queue closed: read again).

if redis.call('HGET', KEYS[1], 'shuffled') == '1' then
  return 0
end
local pre = redis.call('HLEN', KEYS[4])
if tonumber(ARGV[4]) ~= pre or redis.call('HGET', KEYS[1], 'closed') ~= '1' then
  return -1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local st = redis.call('HMGET', KEYS[1], 'mode', 'base', 'reserve')
redis.call('SET', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[1], 'shuffled', '1', 'seed', ARGV[1], 'lhash', ARGV[2], 'shat', now, 'listed', pre)
if st[1] == 'draw' then
  local units = tonumber(ARGV[5]) or tonumber(redis.call('HGET', KEYS[3], 'available')) or 0
  local winners = math.max(math.min(units, pre), 0)
  local base = tonumber(st[2]) or 0
  local cutoff = base + math.min(pre, winners + (tonumber(st[3]) or 0))
  redis.call('HSET', KEYS[1], 'winners', winners, 'cutoff', cutoff)
end
return 1
