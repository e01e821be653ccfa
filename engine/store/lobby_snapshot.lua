-- A lobby aggregate's snapshot saved only over an older one (engine/store/lobby_store.py):
-- a save that arrives late, after a newer one, is dropped, so the kept snapshot never goes
-- back below what a trim of the aggregate's stream relies on.
--
-- KEYS[1]  the snapshot (engine/store/keys.py lobby_snapshot_key): a hash, v = version,
--          s = the state's bytes
-- ARGV[1]  the snapshot's version
-- ARGV[2]  the state's bytes
--
-- Reply: 1 saved, 0 the kept snapshot is at this version or a later one.

local kept = tonumber(redis.call('HGET', KEYS[1], 'v')) or -1
if kept >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 's', ARGV[2])
return 1
