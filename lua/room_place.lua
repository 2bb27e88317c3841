-- room_place.lua: write one chunk of a pre-queue's shuffle (the pacer computes it with package
-- drop from the published rule; room_publish.lua ends it). Idempotent: every pacer computes the
-- same places, so concurrent or repeated chunks write the same values; nothing is written once
-- the shuffle is published.
--
-- KEYS[1] state   hash stampede:{p:<pid>:0}:room          field shuffled
-- KEYS[2] tickets hash stampede:{p:<pid>:0}:room:tickets  userId = "<place> <issuedMs> <ticketId> <flags>"
-- KEYS[3] line    zset stampede:{p:<pid>:0}:room:line
--
-- ARGV[1] "place" (fifo, draw: the record takes the place, the line scores it by place) or "key"
--         (random: the record stays unplaced, the line scores it by its random key)
-- ARGV[2], ARGV[3], ARGV[4], … triples userId, ticketId, score (the place, or the key score)
--
-- Returns the number of users written; -1 when the shuffle is already published. A user whose
-- record is not that ticket's pre-queued, unplaced one is skipped.

if redis.call('HGET', KEYS[1], 'shuffled') == '1' then
  return -1
end
local uids = {}
for i = 2, #ARGV, 3 do
  uids[#uids + 1] = ARGV[i]
end
if #uids == 0 then
  return 0
end
local recs = redis.call('HMGET', KEYS[2], unpack(uids))
local recsOut, line = {}, {}
for i, u in ipairs(uids) do
  local tid, score = ARGV[3 * i], ARGV[3 * i + 1]
  local place, at, rtid, flags = string.match(recs[i] or '', '^(%d+) (%d+) (%x+) ?(%a*)$')
  if rtid == tid and string.find(flags, 'p', 1, true) and (place == '0' or place == score) then
    if ARGV[1] == 'place' then
      recsOut[#recsOut + 1] = u
      recsOut[#recsOut + 1] = score .. ' ' .. at .. ' ' .. tid .. ' ' .. flags
    end
    line[#line + 1] = score
    line[#line + 1] = u
  end
end
if #recsOut > 0 then
  redis.call('HSET', KEYS[2], unpack(recsOut))
end
if #line > 0 then
  redis.call('ZADD', KEYS[3], unpack(line))
end
return #line / 2
