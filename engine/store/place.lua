-- A player's place read model written only if it does not take the player back
-- (engine/service/lobby_notes.py, LobbyOutbox): a room's queue and a table write it from two
-- feeds with no order between them, and a feed entry handled late -- by a follower that lost
-- its bucket, or a write a partition delayed -- never puts back a place the player has left.
--
-- KEYS[1]  sk:place:{<player>}   the place (a hash): state, room, table, match (absent: nowhere),
--                                and the fence: "v:<aggregate>" the seq of the last event of
--                                that queue or table written here, "closed" the last 64 tables
--                                closed with the player at them (space separated; a table's
--                                "v:" goes at its close, so a late entry of a table closed
--                                64 tables ago is written again: hours of play later)
-- ARGV[1]  "set", "clear", or "closed" (the table closed and the player stays in its room: the
--          queue's events say where; only the fence changes)
-- ARGV[2]  the event's aggregate: queue:<room> or table:<table>
-- ARGV[3]  the event's seq
-- ARGV[4]  the table the event is about ("": none, a queue's own place)
-- ARGV[5]  "1": the event closes that table (TableClosed), else ""
-- ARGV[6]  a clear: the room whose queue clears ("" for a table's)
-- ARGV[7]  how long a place that says nowhere keeps its fence (ms): a clear expires the
--          hash after it, a set makes it lasting again
-- ARGV[8…] a set: the place's field/value pairs (state, room, table, match)
--
-- Replies (field/value pairs, never positional):
--   {"status", "written"}     written (also at the same seq: a re-handled entry)
--   {"status", "stale"}       not written: a later event of the aggregate was, or a set of a
--                             table that closed, or a queue's set of a table whose own events wrote
--   {"status", "elsewhere"}   a clear of a place the player no longer has: nothing cleared

local CLOSED_KEPT = 64
local key, op, agg, table_id = KEYS[1], ARGV[1], ARGV[2], ARGV[4]
local seq = tonumber(ARGV[3])
local closes = ARGV[5] == '1'
if tonumber(redis.call('HGET', key, 'v:' .. agg) or '0') > seq then
  return {'status', 'stale'}
end
local closed = redis.call('HGET', key, 'closed') or ''
local was_closed = table_id ~= '' and string.find(' ' .. closed .. ' ', ' ' .. table_id .. ' ', 1, true) ~= nil
if op == 'set' and was_closed then
  return {'status', 'stale'}
end
if op == 'set' and table_id ~= '' and string.sub(agg, 1, 6) == 'queue:'
    and redis.call('HEXISTS', key, 'v:table:' .. table_id) == 1 then
  return {'status', 'stale'}  -- the table's own events have written its place since
end
if closes and not was_closed then
  local kept = {}
  for t in string.gmatch(closed, '%S+') do kept[#kept + 1] = t end
  kept[#kept + 1] = table_id
  while #kept > CLOSED_KEPT do table.remove(kept, 1) end
  redis.call('HSET', key, 'closed', table.concat(kept, ' '))
end
if closes then
  redis.call('HDEL', key, 'v:' .. agg)
else
  redis.call('HSET', key, 'v:' .. agg, seq)
end
if op == 'closed' then
  return {'status', 'written'}
end
if op == 'clear' then
  local at = redis.call('HMGET', key, 'state', 'room', 'table')
  local mine
  if table_id ~= '' then
    mine = at[3] == table_id
  else
    mine = at[1] == 'queued' and at[2] == ARGV[6]
  end
  if not mine then
    return {'status', 'elsewhere'}
  end
  redis.call('HDEL', key, 'state', 'room', 'table', 'match')
  redis.call('PEXPIRE', key, ARGV[7])
  return {'status', 'written'}
end
local write = {'HSET', key}
for i = 8, #ARGV do
  write[#write + 1] = ARGV[i]
end
redis.call(unpack(write))
redis.call('PERSIST', key)
return {'status', 'written'}
