-- A table's read model written only if it does not take the table back
-- (engine/service/lobby_notes.py, LobbyOutbox): a feed entry handled late -- by a follower
-- that lost its bucket, or a write a partition delayed -- never overwrites a later state.
--
-- KEYS[1]  sk:{b<N>}:t:<table>:info   the read model (a hash; its field v: the table's
--                                    version, the seq of the last lobby event it shows)
-- ARGV[1]  the table's version after the event
-- ARGV[2…] the read model's field/value pairs (v among them)
--
-- Replies (field/value pairs, never positional):
--   {"status", "written"}                 written (also at the same version: a re-handled entry)
--   {"status", "stale", "v", <version>}   not written: the hash shows that later version

local version = tonumber(ARGV[1])
local held = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if held > version then
  return {'status', 'stale', 'v', held}
end
local write = {'HSET', KEYS[1]}
for i = 2, #ARGV do
  write[#write + 1] = ARGV[i]
end
redis.call(unpack(write))
return {'status', 'written'}
