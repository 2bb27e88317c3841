-- node_renew.lua: keep an orderNo node id lease (gateway NodeLease.Renew).
--
-- KEYS[1] lease  string stampede:node:<0…1023> = owner, with a TTL
--
-- ARGV[1] owner: the renewing process's owner string
-- ARGV[2] lease life in milliseconds
--
-- Returns:
--   1 RENEWED  the key held ARGV[1]; its TTL is ARGV[2] ms again
--   2 RETAKEN  the key had expired; it is ARGV[1]'s again for ARGV[2] ms
--   0 LOST     another owner holds the key; nothing changed

local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
