-- The lobby's state transitions (gateway/lobby.py).  Every key lives under the hash
-- tag {lobby} (one Cluster slot), so each call is one atomic script; several gateway
-- processes share the state.  ARGV[1] = the operation, ARGV[2] = now (ms); the rest
-- depends on the operation (see the functions below).
--
--   sk:{lobby}:queue:<room>     list    waiting players, oldest first
--   sk:{lobby}:player:<p>       hash    state (queued|table), room, table, since
--   sk:{lobby}:table:<t>        hash    room a b n match status(creating|seated|closed) finished escaped
--                                       leaving_a leaving_b ('1': that seat's player left at the
--                                       settlement; 'leaving' = a player, as older gateways wrote it)
--                                       quit_a quit_b (the match whose engine got that seat's Leave
--                                       before its finish: should the table close in that match, that
--                                       player leaves the room too, never requeued; cleared at the
--                                       finish, when such a Leave was refused) bot (a bot's id)
--   sk:{lobby}:match:<m>        string  the table of a match
--   sk:{lobby}:seq              counter table numbers
--   sk:{lobby}:notes:<p>        stream  messages for the player's sockets (field m = JSON); each
--                               entry is followed by its notice, SPUBLISH on the same name
--   sk:{lobby}:pending          zset    tables with work to do -> due ms
--   sk:{lobby}:presence         zset    connected players -> the ms their Disconnect is due
--   sk:{lobby}:disconnected:<p> string  the match a Disconnect was sent for
local P = 'sk:{lobby}:'
local op = ARGV[1]
local now = tonumber(ARGV[2])

-- a note, then its notice (SPUBLISH on the stream's name: engine/store/keys.py "Notices"; pcall:
-- a notice refused only delays the reader, gateway/fanout.py reads every stream now and then)
local function note(player, msg)
  local key = P .. 'notes:' .. player
  redis.call('XADD', key, 'MAXLEN', '~', 200, '*', 'm', msg)
  redis.pcall('SPUBLISH', key, '')
end

-- cid: the command_id of the player's Join or Leave that caused the message (nil: none)
local function lobby_msg(state, room, tbl, match, reason, bot_level, cid)
  return cjson.encode({kind = 'lobby', state = state, room = room or cjson.null, table = tbl or cjson.null,
                       match = match or cjson.null, reason = reason or cjson.null,
                       bot_level = bot_level or cjson.null, command_id = cid or cjson.null})
end

local function enqueue(player, room, reason, cid)
  local ph = P .. 'player:' .. player
  redis.call('DEL', ph)
  redis.call('HSET', ph, 'state', 'queued', 'room', room, 'since', now)
  redis.call('RPUSH', P .. 'queue:' .. room, player)
  note(player, lobby_msg('queued', room, nil, nil, reason, nil, cid))
end

-- seat waiting pairs at new tables; returns the new table ids
local function pair(room)
  local q = P .. 'queue:' .. room
  local made = {}
  while true do
    local cands = {}
    while #cands < 2 do
      local p = redis.call('LPOP', q)
      if not p then break end
      local ph = P .. 'player:' .. p
      if redis.call('HGET', ph, 'state') == 'queued' and redis.call('HGET', ph, 'room') == room
          and (#cands == 0 or cands[1] ~= p) then
        table.insert(cands, p)
      end
    end
    if #cands < 2 then
      if #cands == 1 then redis.call('LPUSH', q, cands[1]) end
      return made
    end
    local t = 't' .. redis.call('INCR', P .. 'seq')
    local m = t .. '-1'
    redis.call('HSET', P .. 'table:' .. t, 'room', room, 'a', cands[1], 'b', cands[2], 'n', 1, 'match', m,
               'status', 'creating', 'since', now)
    redis.call('SET', P .. 'match:' .. m, t)
    for _, p in ipairs(cands) do
      redis.call('HSET', P .. 'player:' .. p, 'state', 'table', 'table', t)
    end
    redis.call('ZADD', P .. 'pending', now, t)
    table.insert(made, t)
  end
end

local function close_table(t, room, removed, reasons)
  -- removed: set of players leaving the room (with reasons); the person who stays goes back
  -- to the queue, a bot never does (it leaves with the table). Returns who stayed (requeued
  -- people and the bot) and who left by a Leave the engine has (quit_<seat>): they leave the
  -- table's match (the caller sends their Leave; the engine's own is a duplicate)
  local th = P .. 'table:' .. t
  local bot = redis.call('HGET', th, 'bot')
  local m = redis.call('HGET', th, 'match')
  local requeued = {}
  for _, seat in ipairs({'a', 'b'}) do
    local p = redis.call('HGET', th, seat)
    local ph = P .. 'player:' .. p
    local mine = redis.call('HGET', ph, 'table') == t
    local quit = not removed[p] and m and redis.call('HGET', th, 'quit_' .. seat) == m
    if quit then
      -- their Leave went to this match's engine: its removal may be observed after the other
      -- player's (or never, both sockets gone); they left all the same
      removed[p] = true
      reasons[p] = 'left'
      table.insert(requeued, p)  -- the lobby's Leave too: the session's may not be sent now
    end
    if removed[p] then
      if mine then redis.call('DEL', ph) end
      note(p, lobby_msg('removed', room, t, m, reasons[p]))
    elseif mine and p == bot then
      redis.call('DEL', ph)
      note(p, lobby_msg('removed', room, t, m, 'table_closed'))
      table.insert(requeued, p)
    elseif mine then
      enqueue(p, room, 'opponent_left')
      table.insert(requeued, p)
    end
  end
  redis.call('HSET', th, 'status', 'closed')
  redis.call('ZREM', P .. 'pending', t)
  return requeued
end

-- close table t (close_table), then pair the room's queue -> {head, stayed..., '|', new tables...}
-- (no head when head is nil)
local function close_and_pair(t, room, removed, reasons, head)
  local out = {head}
  for _, p in ipairs(close_table(t, room, removed, reasons)) do table.insert(out, p) end
  table.insert(out, '|')
  for _, nt in ipairs(pair(room)) do table.insert(out, nt) end
  return out
end

-- the player leaves the queue -> 1, or 0 when not waiting (cid: the Leave's command_id, if any)
local function dequeue(player, reason, cid)
  local ph = P .. 'player:' .. player
  if redis.call('HGET', ph, 'state') ~= 'queued' then return 0 end
  local room = redis.call('HGET', ph, 'room')
  redis.call('LREM', P .. 'queue:' .. room, 0, player)
  redis.call('DEL', ph)
  note(player, lobby_msg('removed', room, nil, nil, reason, nil, cid))
  return 1
end

-- the player leaves table t between two matches (m, the table's match): after its finish
-- (not yet settled) it is noted, and the settle step closes the table instead of offering the
-- next match -> {'noted'}; while the next match is created the table closes now ->
-- {'closed', stayed..., '|', new tables...}; otherwise {} (the engine decides)
local function leave_table(t, m, player)
  local th = P .. 'table:' .. t
  if redis.call('HGET', th, 'match') ~= m then return {} end
  if redis.call('HGET', th, 'a') ~= player and redis.call('HGET', th, 'b') ~= player then return {} end
  local status = redis.call('HGET', th, 'status')
  if status == 'seated' and redis.call('HGET', th, 'finished') == m then
    -- one field per seat: both players may leave at the settlement (one 'leaving' field kept
    -- the last of them, and the first went back to the queue as if they had stayed)
    local seat = redis.call('HGET', th, 'a') == player and 'a' or 'b'
    redis.call('HSET', th, 'leaving_' .. seat, '1')
    redis.call('ZADD', P .. 'pending', now, t)
    return {'noted'}
  end
  if status ~= 'creating' then return {} end
  local removed, reasons = {}, {}
  removed[player] = true
  reasons[player] = 'left'
  return close_and_pair(t, redis.call('HGET', th, 'room'), removed, reasons, 'closed')
end

if op == 'join' then
  -- ARGV[3] room, ARGV[4] player, ARGV[5] the Join's command_id (optional: its queued note
  -- names it) -> {state, room, table, new tables...}
  local room, player = ARGV[3], ARGV[4]
  local ph = P .. 'player:' .. player
  local st = redis.call('HGET', ph, 'state')
  if st then
    return {st, redis.call('HGET', ph, 'room') or '', redis.call('HGET', ph, 'table') or ''}
  end
  enqueue(player, room, nil, ARGV[5])
  local out = {'joined', room, ''}
  for _, t in ipairs(pair(room)) do table.insert(out, t) end
  return out

elseif op == 'dequeue' then
  -- ARGV[3] player, ARGV[4] reason -> 1 when the player was waiting and left the queue
  return dequeue(ARGV[3], ARGV[4])

elseif op == 'quit' then
  -- ARGV[3] player, ARGV[4] the Leave's command_id (optional: the removed note names it): the
  -- player's Leave, wherever the lobby has them now, in one step (a lookup
  -- then a transition raced the lobby moving them: paired, requeued, the next match offered).
  -- -> {'dequeued'} | {'noted', table} | {'closed', table, match, stayed..., '|', new tables...}
  --    | {'engine', table, match} (seated in a match: the engine decides the Leave; quit_<seat>
  --    records it, see close_table) | {} (nowhere)
  local player = ARGV[3]
  local ph = P .. 'player:' .. player
  local st = redis.call('HGET', ph, 'state')
  if st == 'queued' then
    dequeue(player, 'left', ARGV[4])
    return {'dequeued'}
  end
  if st ~= 'table' then return {} end
  local t = redis.call('HGET', ph, 'table')
  local th = P .. 'table:' .. t
  local m = redis.call('HGET', th, 'match')
  local status = redis.call('HGET', th, 'status')
  if not m or status == false or status == 'closed' then return {} end
  local out = leave_table(t, m, player)
  if out[1] == 'noted' then return {'noted', t} end
  if out[1] == 'closed' then
    local reply = {'closed', t, m}
    for i = 2, #out do table.insert(reply, out[i]) end
    return reply
  end
  -- the engine decides; should the table close in this match before its finish (the other
  -- player's removal observed first), the player leaves the room with it (close_table)
  redis.call('HSET', th, 'quit_' .. (redis.call('HGET', th, 'a') == player and 'a' or 'b'), m)
  return {'engine', t, m}

elseif op == 'seated' then
  -- ARGV[3] table, ARGV[4] match: the match exists and both players sit in it
  local t, m = ARGV[3], ARGV[4]
  local th = P .. 'table:' .. t
  if redis.call('HGET', th, 'status') ~= 'creating' or redis.call('HGET', th, 'match') ~= m then return 0 end
  redis.call('HSET', th, 'status', 'seated')
  redis.call('ZREM', P .. 'pending', t)
  local room = redis.call('HGET', th, 'room')
  local level = redis.call('HGET', th, 'bot_level')
  for _, p in ipairs({redis.call('HGET', th, 'a'), redis.call('HGET', th, 'b')}) do
    note(p, lobby_msg('seated', room, t, m, nil, level))
  end
  return 1

elseif op == 'removed' then
  -- ARGV[3] table, ARGV[4] match, then player, reason pairs: they left the room (R-13.2 not_ready,
  -- left, refused); the other player goes back to the queue -> {requeued..., '|', new tables...}
  local t, m = ARGV[3], ARGV[4]
  local th = P .. 'table:' .. t
  local status = redis.call('HGET', th, 'status')
  if status == false or status == 'closed' or redis.call('HGET', th, 'match') ~= m then return {} end
  local removed, reasons = {}, {}
  for i = 5, #ARGV, 2 do
    removed[ARGV[i]] = true
    reasons[ARGV[i]] = ARGV[i + 1]
  end
  return close_and_pair(t, redis.call('HGET', th, 'room'), removed, reasons, nil)

elseif op == 'finished' then
  -- ARGV[3] table, ARGV[4] match, ARGV[5] escaper ('' for none): settle, then offer the next match
  local t, m = ARGV[3], ARGV[4]
  local th = P .. 'table:' .. t
  if redis.call('HGET', th, 'status') ~= 'seated' or redis.call('HGET', th, 'match') ~= m then return 0 end
  if redis.call('HGET', th, 'finished') == m then return 0 end
  redis.call('HSET', th, 'finished', m, 'escaped', ARGV[5])
  -- a Leave in a match that finished was refused (emptied, not deleted: the lobby's Redis user
  -- has HSET, not HDEL, deploy/redis/users.acl)
  redis.call('HSET', th, 'quit_a', '', 'quit_b', '')
  redis.call('ZADD', P .. 'pending', now, t)
  return 1

elseif op == 'advance' then
  -- ARGV[3] table, ARGV[4] match (finished and settled), ARGV[5] settled JSON for a, ARGV[6] for b
  -- -> {'next', new match} | {'closed', requeued..., '|', new tables...} | {}
  local t, m = ARGV[3], ARGV[4]
  local th = P .. 'table:' .. t
  if redis.call('HGET', th, 'match') ~= m or redis.call('HGET', th, 'finished') ~= m
      or redis.call('HGET', th, 'status') ~= 'seated' then return {} end
  local a, b = redis.call('HGET', th, 'a'), redis.call('HGET', th, 'b')
  note(a, ARGV[5])
  note(b, ARGV[6])
  local room = redis.call('HGET', th, 'room')
  local escaper = redis.call('HGET', th, 'escaped')
  local left = {}
  local leaving = redis.call('HGET', th, 'leaving')  -- a table noted by a gateway before leaving_<seat>
  if leaving and leaving ~= '' then left[leaving] = true end
  for _, seat in ipairs({'a', 'b'}) do
    if redis.call('HGET', th, 'leaving_' .. seat) == '1' then left[redis.call('HGET', th, seat)] = true end
  end
  if (escaper and escaper ~= '') or next(left) ~= nil then
    -- an escaper leaves the room (R-12.1); so does a player who left at the settlement: the
    -- table offers no next match, the other player goes back to the queue (a bot leaves too)
    local removed, reasons = {}, {}
    if escaper and escaper ~= '' then
      removed[escaper] = true
      reasons[escaper] = 'escaped'
    end
    for p, _ in pairs(left) do
      removed[p] = true
      reasons[p] = 'left'
    end
    return close_and_pair(t, room, removed, reasons, 'closed')
  end
  local n = tonumber(redis.call('HGET', th, 'n')) + 1
  local nm = t .. '-' .. n
  redis.call('HSET', th, 'n', n, 'match', nm, 'status', 'creating', 'finished', '', 'escaped', '', 'since', now)
  redis.call('SET', P .. 'match:' .. nm, t)
  redis.call('ZADD', P .. 'pending', now, t)
  return {'next', nm}

elseif op == 'leave' then
  -- ARGV[3] table, ARGV[4] match, ARGV[5] player: the player leaves a table between two matches.
  -- The match finished (not yet settled): noted, the settle step closes the table instead of
  -- offering the next match -> {'noted'}.  The next match is being created: the table closes
  -- now -> {'closed', stayed..., '|', new tables...}.  Otherwise {} (the engine decides: a Leave
  -- before the deal, an escape during play).
  return leave_table(ARGV[3], ARGV[4], ARGV[5])

elseif op == 'bot' then
  -- ARGV[3] room, ARGV[4] waited ms, ARGV[5] the bot's level: the oldest waiting player of the
  -- room, if they waited that long, gets a bot as opponent (shuangkou gateway --bots) -> {table, bot} | {}
  local room, waited, level = ARGV[3], tonumber(ARGV[4]), ARGV[5] or 'normal'
  local q = P .. 'queue:' .. room
  local p = redis.call('LINDEX', q, 0)
  if not p then return {} end
  local ph = P .. 'player:' .. p
  if redis.call('HGET', ph, 'state') ~= 'queued' or redis.call('HGET', ph, 'room') ~= room then
    redis.call('LPOP', q)
    return {}
  end
  if now - tonumber(redis.call('HGET', ph, 'since') or now) < waited then return {} end
  redis.call('LPOP', q)
  local n = redis.call('INCR', P .. 'seq')
  local t = 't' .. n
  local bot = 'bot-' .. n
  local m = t .. '-1'
  redis.call('HSET', P .. 'table:' .. t, 'room', room, 'a', p, 'b', bot, 'n', 1, 'match', m,
             'status', 'creating', 'since', now, 'bot', bot, 'bot_level', level)
  redis.call('SET', P .. 'match:' .. m, t)
  redis.call('HSET', ph, 'state', 'table', 'table', t)
  redis.call('DEL', P .. 'player:' .. bot)
  redis.call('HSET', P .. 'player:' .. bot, 'state', 'table', 'table', t, 'room', room)
  redis.call('ZADD', P .. 'pending', now, t)
  return {t, bot}

elseif op == 'claim' then
  -- ARGV[3] lease ms, ARGV[4] limit: tables due for work, leased to the caller
  local due = redis.call('ZRANGEBYSCORE', P .. 'pending', '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
  for _, t in ipairs(due) do redis.call('ZADD', P .. 'pending', now + tonumber(ARGV[3]), t) end
  return due

elseif op == 'away' then
  -- ARGV[3] table: 1 when no person at it is connected (no presence due after now; its bot
  -- does not count), else 0: nobody's socket reads its match's updates
  local th = P .. 'table:' .. ARGV[3]
  local t = redis.call('HMGET', th, 'a', 'b', 'bot')
  for i = 1, 2 do
    local p = t[i]
    if p and p ~= t[3] then
      local due = redis.call('ZSCORE', P .. 'presence', p)
      if due and tonumber(due) > now then return 0 end
    end
  end
  return 1

elseif op == 'absent' then
  -- ARGV[3] limit: players whose grace ran out (removed from presence) -> {player, state, table, ...}
  local due = redis.call('ZRANGEBYSCORE', P .. 'presence', '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
  local out = {}
  for _, p in ipairs(due) do
    redis.call('ZREM', P .. 'presence', p)
    local ph = P .. 'player:' .. p
    table.insert(out, p)
    table.insert(out, redis.call('HGET', ph, 'state') or '')
    table.insert(out, redis.call('HGET', ph, 'table') or '')
  end
  return out
end
return redis.error_reply('unknown lobby operation ' .. tostring(op))
