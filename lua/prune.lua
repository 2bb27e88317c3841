-- prune.lua: delete idle consumers of a writer consumer group, atomically, so no
-- entry can be delivered to a consumer between the check and the delete (XGROUP
-- DELCONSUMER drops a consumer's pending entries with it).
--
-- KEYS[1] intake  stream stampede:{p:<pid>:<shard>}:intake
--
-- ARGV[1] consumer group
-- ARGV[2] least idle time in milliseconds of a consumer to delete
-- ARGV[3] consumer never to delete (the caller itself), or ''
-- ARGV[4] the only consumer to delete, or '' for any
--
-- Returns the number of consumers deleted: only those with no pending entry, idle
-- at least ARGV[2] ms, not ARGV[3] and, when ARGV[4] is set, named ARGV[4].

local n = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['pending'] == 0 and f['idle'] >= tonumber(ARGV[2]) and f['name'] ~= ARGV[3]
      and (ARGV[4] == '' or f['name'] == ARGV[4]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    n = n + 1
  end
end
return n
