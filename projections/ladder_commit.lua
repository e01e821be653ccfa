-- Fold one rated match into a ladder (projections/ladders.py), all keys under the ladder's tag.
-- KEYS: players, board, results, meta.  ARGV: [1] '<last>|<matches>': the last folded match and
-- the number of matches folded when the fold started ('' = none), [2] match id, [3] its result, [4] the new last, [5] '1' = the skills replace the
-- whole ladder, then triples player, skill, rating.  Returns 'applied', 'duplicate' or 'moved'.
if redis.call('HEXISTS', KEYS[3], ARGV[2]) == 1 then return 'duplicate' end
local last = redis.call('HGET', KEYS[4], 'last')
if (last or '') .. '|' .. redis.call('HLEN', KEYS[3]) ~= ARGV[1] then return 'moved' end
if ARGV[5] == '1' then
  redis.call('DEL', KEYS[1], KEYS[2])
end
for i = 6, #ARGV, 3 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[2], ARGV[i + 2], ARGV[i])
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
if ARGV[5] ~= '1' then
  redis.call('HSET', KEYS[4], 'last', ARGV[4])
end
return 'applied'
