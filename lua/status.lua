-- status.lua: remember an order's last known status in its idempotency record, so a
-- replay of the request is answered from Redis (reserve.lua's DUPLICATE branch) and
-- never from MySQL.
--
-- KEYS[1] request  string stampede:{p:<pid>:<shard>}:req:<uid>:<requestId> =
--                         "<orderNo> <quantity>[ <status>]" (written by reserve.lua)
--
-- ARGV[1] orderNo the status belongs to
-- ARGV[2] status: PROCESSING, WAITING_PAY, PAID, CANCELLED or FAILED
--
-- Returns 1 when the record now holds the status; 0 when nothing changed: no record
-- (expired), the record belongs to another order (a later intent with the same
-- requestId), or the record already holds this status or a later one (statuses only
-- move forward: PROCESSING < WAITING_PAY < PAID, CANCELLED, FAILED; an update that
-- arrives late never takes a replay's answer backwards). The record's TTL is kept.

local rank = {PROCESSING = 0, WAITING_PAY = 1, PAID = 2, CANCELLED = 2, FAILED = 2}
local want = rank[ARGV[2]]
if not want then
  return redis.error_reply('ERR status.lua: unknown status ' .. tostring(ARGV[2]))
end
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local no, q, st = string.match(v, '^(%S+) (%S+) ?(%S*)$')
if no ~= ARGV[1] then
  return 0
end
if st == '' then
  st = 'PROCESSING'
end
if (rank[st] or 0) >= want then
  return 0
end
redis.call('SET', KEYS[1], no .. ' ' .. q .. ' ' .. ARGV[2], 'KEEPTTL')
return 1
