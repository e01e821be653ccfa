-- One player's update, written only if it does not take the match back on the player's
-- stream (engine/service/publish.py, Publisher.write).
--
-- KEYS[1]  sk:out:{<player>}      the player's stream (XADD key MAXLEN ~ maxlen * field value ...)
-- KEYS[2]  sk:outv:{<player>}      hash  match id -> the highest version of that match's
--                                 updates written to KEYS[1], less one half when only a
--                                 re-publication wrote it (the same hash tag: one slot)
-- ARGV[1]  match id
-- ARGV[2]  the update's version
-- ARGV[3]  "1": a re-publication (its body says duplicate: older events, always written),
--          "0": an update, refused when KEYS[2] holds its version of the match or a higher one
--          (a writer that lost its bucket, or a delayed write, would take the player back;
--          a round sent again after a lost reply would write the same update twice).  A
--          re-publication carries the match's current version V with its older events, so
--          it fences V - 0.5: what is below V is refused, the one update of V still passes
-- ARGV[4]  maxlen
-- ARGV[5]  ttl in seconds of both keys ("" = none): both get it again when either's remaining
--          time has fallen below ttl - min(ttl // 10, 3600) s (a new key has none), so a key
--          nobody wrote to expires between that and ttl s after its last write; the TTL
--          reads are not replicated, an EXPIRE is (engine/store/keys.py "Expiry")
-- ARGV[6]  "1": then the notice SPUBLISH KEYS[1] "" (with pcall: an ACL that refuses it only
--          delays a reader), "0": none
-- ARGV[7…] the entry's field/value pairs
--
-- Replies (field/value pairs, never positional):
--   {"status", "written", "id", <entry id>}
--   {"status", "stale", "last", <the version already written, at or above the update's>}

local version = tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if ARGV[3] ~= '1' and version <= last then
  return {'status', 'stale', 'last', math.ceil(last)}
end
local entry = {'XADD', KEYS[1], 'MAXLEN', '~', ARGV[4], '*'}
for i = 7, #ARGV do
  entry[#entry + 1] = ARGV[i]
end
local id = redis.call(unpack(entry))
local mark, stored = version, ARGV[2]
if ARGV[3] == '1' then
  mark = version - 0.5
  stored = string.format('%.1f', mark)
end
if mark > last then
  redis.call('HSET', KEYS[2], ARGV[1], stored)
end
if ARGV[5] ~= '' then
  local ttl = tonumber(ARGV[5])
  local slack = math.min(math.floor(ttl / 10), 3600)
  local due = (ttl - slack) * 1000
  local left = redis.call('PTTL', KEYS[1])
  local fence = redis.call('PTTL', KEYS[2])
  if slack == 0 or left < due or (fence ~= -2 and fence < due) then
    redis.call('EXPIRE', KEYS[1], ttl)
    redis.call('EXPIRE', KEYS[2], ttl)
  end
end
if ARGV[6] == '1' then
  redis.pcall('SPUBLISH', KEYS[1], '')
end
return {'status', 'written', 'id', id}
