-- Atomic append of one command's events to a match (engine/store/redis_store.py).
--
-- KEYS[1..6] share the bucket hash tag {bN}, so this script is atomic on Redis Cluster.
-- KEYS[1]  sk:{bN}:m:<match>:events    stream, entry id "<seq>-1", field e = msgpack event
-- KEYS[2]  sk:{bN}:m:<match>:cmds      hash   command id -> "<first>-<last>"
-- KEYS[3]  sk:{bN}:feed                stream fields match, from, to
-- KEYS[4]  sk:{bN}:deadlines           zset   match id scored by at_ms
-- KEYS[5]  sk:{bN}:deadline_info       hash   match id -> "<version>|<kind>|<at_ms>"
-- KEYS[6]  sk:{bN}:matches             set    match ids of the bucket
-- ARGV[1]  match id
-- ARGV[2]  expected version (seq of the last event the caller saw; 0 = new match)
-- ARGV[3]  command id
-- ARGV[4]  the feed entry: "1" when the last event finishes the match (MatchFinished), "0"
--          when not (field fin: the projections read only the entries that finish a match,
--          projections/runner.py), "" for none (only a match's moves and clock, which nothing
--          following the feeds acts on: engine.match.events.announced).  The feed is never
--          trimmed here (RedisFeed.trim).
-- ARGV[5]  deadline at_ms, or "" to clear the match's deadline
-- ARGV[6]  deadline info "<version>|<kind>|<at_ms>" (ignored when ARGV[5] is "")
-- ARGV[7]  n, the number of events
-- ARGV[8…] the events' msgpack payloads, seq expected+1 … expected+n
-- ARGV[8+n] m, the number of entries the append carries (the command's updates and reply,
--          engine/service/publish.py), then for each of them: stream, fence, version, maxlen,
--          ttl ("" = none), notice ("1" or "0"), k, then k field/value pairs:
--          XADD stream MAXLEN ~ maxlen * field value …, then EXPIRE stream ttl.  fence: ""
--          or the stream's fence (sk:outv:…, engine/store/publish.lua) and version the
--          update's: once written, the fence holds that version of ARGV[1] or a higher one
--          (and gets the ttl), so a delayed publication of an older update is refused.
--          The carried streams are not among KEYS: they live in slots of their own.  A plain
--          Redis takes any key; a Redis Cluster lets a script without flags reach a key of
--          another slot held by this node (and refuses one held elsewhere, as any write that
--          fails below), while a declared key of another slot is refused at once (CROSSSLOT).
--          The caller sends only streams its slot map places on the match's node
--          (engine/store/redis_store.py RedisEventStore.carries).
--          Written only once the events are in, and only if every one of the writes succeeds
--          (a key that is not a stream, or that the caller may not write, or that another node
--          holds, fails its XADD):
--          else none is -- what was added is removed again, a stream this script created is
--          deleted, and the caller publishes them itself and meets the error there.
--          Once all are written, each fence is set and each carried stream whose notice is "1"
--          gets its notice,
--          SPUBLISH <stream> "" (engine/store/keys.py "Notices": it wakes the gateway's
--          reader; a reply stream, read by polling, gets none), sent with pcall: a notice
--          the caller's ACL refuses only delays a reader, it never fails the append.
--
-- Replies (field/value pairs, never positional: engine/store/redis_store.py append_fields):
--   {"status", "ok", "version", v, "wrote", w}  appended; v = seq of the last event now;
--                             w = 1 when the carried entries were written, else 0
--   {"status", "duplicate", "first", a, "last", b}  the command id was applied before:
--                             nothing changed; its events are seqs a..b (a > b: none)
--   {"status", "wrong_version", "actual", n}  the stream is at version n, not the expected one:
--                             nothing written
--
-- Every check happens before the first write (a Lua error does not roll back
-- earlier writes), and XADD with explicit ids "<seq>-1" refuses a stale writer
-- on its own as a second line of defence.

local seen = redis.call('HGET', KEYS[2], ARGV[3])
if seen then
  local dash = string.find(seen, '-', 1, true)
  return {'status', 'duplicate', 'first', tonumber(string.sub(seen, 1, dash - 1)),
          'last', tonumber(string.sub(seen, dash + 1))}
end

-- Seqs run 1, 2, 3… with no gap, so an untrimmed stream's length is its version
-- (XLEN is O(1); XREVRANGE costs several times more).  A stream whose oldest
-- entries were archived (a room's queue, engine/store/lobby_store.py trim) is
-- shorter than its version: its version is its last entry's seq, accepted only
-- when the entries kept run on without a hole (first seq = last seq - XLEN + 1;
-- a stream with a hole, tampered with by XDEL, is refused at its length as
-- before).  Should XLEN match a stale expected version of a trimmed stream, the
-- first XADD's explicit id is at or below the last entry and is refused, before
-- anything is written: that is a wrong version too.
local function seq_at(range)
  local entry = range[1]
  if not entry then return 0 end
  return tonumber(string.sub(entry[1], 1, string.find(entry[1], '-', 1, true) - 1))
end

-- The last entry's seq, when the kept entries run on from the first without a hole (a
-- stream whose oldest entries were archived); nil for a stream with a hole.
local function trimmed_version(len)
  local last = seq_at(redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1))
  if seq_at(redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)) ~= last - len + 1 then
    return nil
  end
  return last
end

local expected = tonumber(ARGV[2])
local actual = redis.call('XLEN', KEYS[1])
if actual ~= expected then
  local version = trimmed_version(actual) or actual
  if version ~= expected then
    return {'status', 'wrong_version', 'actual', version}
  end
end

local n = tonumber(ARGV[7])
for i = 1, n do
  local added = redis.pcall('XADD', KEYS[1], (expected + i) .. '-1', 'e', ARGV[7 + i])
  if type(added) == 'table' and added['err'] then
    local version = i == 1 and trimmed_version(actual)
    if version and version > expected then
      return {'status', 'wrong_version', 'actual', version}
    end
    return added
  end
end
local version = expected + n
redis.call('HSET', KEYS[2], ARGV[3], (expected + 1) .. '-' .. version)
if n > 0 and ARGV[4] ~= '' then
  redis.call('XADD', KEYS[3], '*', 'match', ARGV[1], 'from', expected + 1, 'to', version,
             'fin', ARGV[4] == '1' and '1' or '0')
end
if ARGV[5] == '' then
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
else
  redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
  redis.call('HSET', KEYS[5], ARGV[1], ARGV[6])
end
if expected == 0 then
  redis.call('SADD', KEYS[6], ARGV[1])  -- a match joins its bucket's set on its first append
end

-- The carried entries, after the events.  Each XADD and EXPIRE is protected (a key that
-- is not a stream, or that the caller may not write, or that another Cluster node holds,
-- refuses XADD; so does a stream whose last id is the largest there is; an argument may be
-- malformed): on the first failure the entries added so far are removed again and wrote = 0
-- -- the events stay, the caller publishes every entry itself and meets the error there, as
-- without carrying.  No reader sees the removed entries: the script is atomic.  A stream
-- this script created (its entry the only one ever added to it: XINFO STREAM entries-added)
-- is deleted again.  The fences are set only once every entry is in.
local carried = tonumber(ARGV[8 + n]) or 0
local wrote = 0
if carried > 0 then
  local added = {}
  local ok = true
  local at = 9 + n
  for _ = 1, carried do
    local key, ttl, k = ARGV[at], ARGV[at + 4], tonumber(ARGV[at + 6])
    local done, id = pcall(function()
      local args = {key, 'MAXLEN', '~', ARGV[at + 3], '*'}
      for f = 1, 2 * k do
        args[5 + f] = ARGV[at + 6 + f]
      end
      return redis.call('XADD', unpack(args))
    end)
    if not done then ok = false break end
    added[#added + 1] = {key, id}
    if ttl ~= '' then
      if not pcall(redis.call, 'EXPIRE', key, ttl) then ok = false break end
    end
    at = at + 7 + 2 * k
  end
  if ok then
    wrote = 1
    at = 9 + n
    for _ = 1, carried do
      local fence, ttl = ARGV[at + 1], ARGV[at + 4]
      if fence ~= '' then
        local v = tonumber(ARGV[at + 2])
        if v > (tonumber(redis.pcall('HGET', fence, ARGV[1])) or 0) then
          redis.pcall('HSET', fence, ARGV[1], ARGV[at + 2])
        end
        if ttl ~= '' then redis.pcall('EXPIRE', fence, ttl) end
      end
      if ARGV[at + 5] == '1' then
        redis.pcall('SPUBLISH', ARGV[at], '')
      end
      at = at + 7 + 2 * tonumber(ARGV[at + 6])
    end
  else
    for a = #added, 1, -1 do
      local key, id = added[a][1], added[a][2]
      redis.pcall('XDEL', key, id)
      local info = redis.pcall('XINFO', 'STREAM', key)
      if type(info) == 'table' and not info['err'] then
        for i = 1, #info, 2 do
          if info[i] == 'entries-added' then
            if info[i + 1] == 1 then redis.pcall('DEL', key) end
            break
          end
        end
      end
    end
  end
end
return {'status', 'ok', 'version', version, 'wrote', wrote}
