-- A player's place claim released, only while it is still the one given
-- (engine/service/place_claims.py).
--
-- KEYS[1]  sk:claim:{<player>}   the claim (a string: room:<room> or series:<id>)
-- ARGV[1]  the claim's value to release
--
-- Reply: 1 released, 0 another claim (or none) holds the key.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
