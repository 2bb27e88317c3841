-- node_release.lua: give an orderNo node id lease back (gateway NodeLease.Release).
--
-- KEYS[1] lease  string stampede:node:<0…1023> = owner, with a TTL
--
-- ARGV[1] owner: the releasing process's owner string
--
-- Returns 1 when the key held ARGV[1] and was deleted; 0 when it held another
-- owner or nothing (nothing changed).

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
