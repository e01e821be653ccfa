"""The live lobby in ``serve`` (docs/ARCHITECTURE.md "The lobby in serve"): one thread that,
for the buckets this replica holds the lease of, runs

* the **lobby channels** ``sk:{b<N>}:lobby`` (a player's Join, Leave, and a gateway's
  Returned, for the rooms of bucket N: :func:`engine.store.keys.room_bucket`) through
  :meth:`engine.service.lobby.LobbyEngine.submit`, answering a refusal on the player's
  stream (``rejected``, with ``retry_after_ms`` for ``cooldown``), and a Join that finds the
  player already there with the ``lobby`` message of where they are (``already_queued`` /
  ``already_seated``);
* the **feeds** of those buckets and of their rooms' queues through the process managers
  (:class:`engine.service.lobby_feed.LobbyFeedManager`, which also writes what each event
  tells the players and the read models, engine/service/lobby_notes.py);
* the **timers** of those rooms: the queue timer that seats a bot (while a process that plays
  bots offers them: :func:`engine.store.keys.bot_offer_key`), the ranked rooms' pairing timer,
  and the end of each absent player's reconnect grace (the room's presence set, pushed
  forward by the gateways) as ``GraceExpired``.

Every read is through consumer group ``sk-lobby``; an entry is acknowledged only once
handled, and a new owner of a bucket takes over the entries its former owner left pending.
Every command the thread makes has a fixed id, so a repeat changes nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from engine.lobby import commands as lc
from engine.lobby.decide import BotPolicy
from engine.lobby.errors import AlreadyPlaced, Cooldown
from engine.match.errors import Rejected
from engine.service.lobby import LobbyEngine
from engine.service.lobby_feed import GROUP, LobbyFeedManager
from engine.store import keys, wire
from engine.store.redis_errors import is_transient

log = logging.getLogger("shuangkou.lobby")

#: the commands a gateway may put on a lobby channel
CHANNEL_TYPES: dict[str, type[lc.LobbyCommand]] = {"Join": lc.Join, "Leave": lc.Leave, "Returned": lc.Returned}
#: how often the rooms' timers and presence are looked at
TIMER_EVERY_S = 0.25
#: how often a feed entry left pending (a settlement not yet in the ledger) is read again
RETRY_EVERY_S = 0.25
#: after the thread could not reach Redis, no reconnect grace ends before the gateways had
#: this long (plus the room's grace) to push their players' presence again
RESUME_SLACK_MS = 3_000
ROOMS_EVERY_S = 2.0
#: how often the presence sets are swept (a grace is seconds long)
GRACES_EVERY_S = 1.0
#: on a Cluster (no blocking read over several slots) the longest pause between idle polls
IDLE_MAX_S = 0.4
#: the pause after a round that handled entries, so that a busy stack's feed entries are read
#: (and acknowledged) a batch at a time instead of a read per command (on a Cluster a read of
#: every owned feed); on a Cluster also how often the lobby channels and the rooms' feeds are read
LOBBY_POLL_S = 0.05
OFFER_EVERY_S = 1.0


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ("" if v is None else str(v))


def parse_channel_command(raw: Any) -> lc.LobbyCommand:
    """A lobby channel entry's ``c`` field as a command; :class:`Rejected` (``bad_command``)
    when it is not JSON, not a Join/Leave/Returned, or fails the command's model.

    >>> parse_channel_command('{"type": "Join", "command_id": "c1", "room": "points", "player": "a"}').type
    'Join'
    >>> parse_channel_command('{"type": "OpenTable"}')
    Traceback (most recent call last):
    ...
    engine.match.errors.BadCommand: a lobby channel carries Join, Leave and Returned, not 'OpenTable'
    """
    from engine.match.errors import BadCommand

    try:
        data = json.loads(_s(raw))
    except ValueError:
        raise BadCommand("a lobby channel entry's c is not JSON") from None
    kind = data.get("type") if isinstance(data, dict) else None
    model = CHANNEL_TYPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise BadCommand(f"a lobby channel carries Join, Leave and Returned, not {kind!r}")
    if "table" in data and data["table"] is not None:
        raise BadCommand("a player's command goes to the room's queue (no table)")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadCommand(f"bad {kind}: {exc.errors()[0].get('msg', 'invalid')}") from None


def _series_data(raw: Any) -> dict[str, Any] | None:
    """A lobby channel entry's ``c`` when it is a private table's command (CreateTable,
    JoinTable, CancelTable, RequestEnd, VoteEnd: engine/service/series_lobby.py), else None."""
    from engine.service.series_lobby import SERIES_TYPES

    try:
        data = json.loads(_s(raw))
    except ValueError:
        return None
    if isinstance(data, dict) and data.get("type") in SERIES_TYPES:
        return data
    return None


class _Lease:
    """One bucket's share of the lobby thread (stopped when the lease goes)."""

    def __init__(self, worker: LobbyWorker, bucket: int):
        self.worker, self.bucket = worker, bucket

    def stop(self) -> None:
        self.worker.release(self.bucket)


class LobbyWorker:
    """The lobby's thread of one serve replica (the module docstring)."""

    def __init__(self, client: Any, engine: LobbyEngine, manager: LobbyFeedManager, publisher: Any, *,
                 consumer: str, rooms: Any, clock: Callable[[], int], buckets: int = keys.DEFAULT_BUCKETS,
                 block_ms: int = 100):
        self.client = client
        self.engine = engine
        self.manager = manager
        self.publisher = publisher
        self.consumer = consumer
        self.rooms = rooms
        self.clock = clock
        self.buckets = buckets
        self.block_ms = block_ms
        self.owned: set[int] = set()
        self._lock = threading.Lock()
        self._fresh: set[int] = set()  # buckets owned since the last round: take over their pending
        self._retry: set[str] = set()  # streams with entries this consumer left pending
        #: stream -> entries handled and not acknowledged yet: acknowledged in the next read's round trip
        self._acks: dict[str, list[Any]] = {}
        self._groups: set[str] = set()
        self._room_names: list[str] = []
        self._rooms_at = 0.0
        self._timers_at = 0.0
        self._graces_at = 0.0
        self._series_at = 0.0
        self._lobby_polled = 0.0
        self._retry_at = 0.0
        self._offers: dict[str, tuple[float, BotPolicy | None]] = {}
        self._tried: dict[str, tuple[int, int]] = {}  # room -> (queue version, ms) of the last timer sent
        self._paired: dict[str, int] = {}  # ranked room -> second of its last pairing timer
        self._graces_from = 0  # no grace ends before this (ms): after an outage
        self._outage = False
        self.cluster = type(client).__name__ == "RedisCluster"
        manager.buckets = []
        manager.rooms = self.owned_rooms
        #: private tables' series (engine/service/series_lobby.py), or None
        self.series: Any = manager.series
        #: engine.service.place_claims.PlaceClaims (build_lobby), or None: no claims settled here
        self.claims: Any = None

    # -- the leases ----------------------------------------------------------------------------
    def own(self, bucket: int) -> _Lease:
        with self._lock:
            self.owned.add(bucket)
            self._fresh.add(bucket)
        return _Lease(self, bucket)

    def release(self, bucket: int) -> None:
        with self._lock:
            self.owned.discard(bucket)
            self._fresh.discard(bucket)

    def owned_rooms(self) -> list[str]:
        with self._lock:
            owned = set(self.owned)
        return [r for r in self._room_names if keys.room_bucket(r, self.buckets) in owned]

    # -- the loop ------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """The loop until ``stop``.  No grace ends in the first :meth:`_resume_ms` either: after
        a restart (of serve, or of a whole deployment) the gateways push their players'
        presence again first."""
        self._room_names = list(self.rooms.names())
        self._graces_from = self.clock() + self._resume_ms()
        idle = 0
        while not stop.is_set():
            try:
                busy = self.run_once()
                if self._outage:
                    self._outage = False
                    self._graces_from = self.clock() + self._resume_ms()
                    log.info("lobby: Redis answers again; reconnect graces resume in %d ms", self._resume_ms())
            except Exception as exc:  # Redis away, or a bug: logged, the loop goes on
                self._outage = self._outage or is_transient(exc)
                log.warning("lobby round failed: %s", exc, exc_info=not is_transient(exc))
                busy = False
            idle = 0 if busy else idle + 1
            if not busy and self.cluster:  # no blocking read over several slots: poll, slower when idle
                stop.wait(min(IDLE_MAX_S, self.block_ms / 1000 * idle))
            elif busy:  # the next read takes what came meanwhile as one batch
                stop.wait(LOBBY_POLL_S)
        try:
            self.flush_acks()
        except Exception as exc:  # the entries stay pending: the bucket's next owner handles them again
            log.warning("lobby: last acknowledgements not sent: %s", exc)

    def flush_acks(self) -> None:
        """Acknowledge the entries handled since the last read now: :meth:`_read` of no stream
        (one round trip per node)."""
        self._read({}, None)

    def run_once(self) -> int:
        """One round: take over new buckets' pending entries, read and handle the channels and
        feeds, run the rooms' timers.  Returns how many entries and timers did something."""
        now = time.monotonic()
        if now - self._rooms_at >= ROOMS_EVERY_S or not self._room_names:
            self._room_names = list(self.rooms.names())
            self._rooms_at = now
        self._take_over()
        with self._lock:
            owned = sorted(self.owned)
        rooms = self.owned_rooms()
        self.manager.buckets = owned
        channels = [keys.lobby_inbox_key(b) for b in owned]
        feeds = [keys.feed_key(b) for b in owned] + [keys.room_feed_key(r) for r in rooms]
        streams = channels + feeds
        for s in streams:
            self._ensure(s)
        if self.cluster and now - self._lobby_polled < LOBBY_POLL_S:
            # a busy Cluster loop reads the bucket feeds every round; the lobby's own streams
            # (the players' commands, the queues' feeds) at most every LOBBY_POLL_S
            streams = [keys.feed_key(b) for b in owned]
        else:
            self._lobby_polled = now
        done = 0
        if now - self._retry_at >= RETRY_EVERY_S and self._retry:
            self._retry_at = now
            for s in sorted(self._retry):
                self._retry.discard(s)
                done += self._handle_reply(self._read({s: "0"}, None))
        if streams:
            block = None if self.cluster else self.block_ms
            done += self._handle_reply(self._read({s: ">" for s in streams}, block))
        else:
            self.flush_acks()  # no read to carry them (no bucket held)
            if not self.cluster:
                time.sleep(self.block_ms / 1000)
        if now - self._timers_at >= TIMER_EVERY_S:
            self._timers_at = now
            done += self._timers(rooms)
        return done

    def _ensure(self, stream: str) -> None:
        if stream in self._groups:
            return
        from engine.store.redis_store import ensure_group

        ensure_group(self.client, stream, GROUP)
        self._groups.add(stream)

    def _take_over(self) -> None:
        from engine.service.ownership import take_over_pending

        with self._lock:
            fresh, self._fresh = self._fresh, set()
        for b in sorted(fresh):
            streams = [keys.lobby_inbox_key(b), keys.feed_key(b)]
            streams += [keys.room_feed_key(r) for r in self._room_names if keys.room_bucket(r, self.buckets) == b]
            for s in streams:
                self._ensure(s)
                if take_over_pending(self.client, s, GROUP, self.consumer):
                    log.info("lobby: took over the pending entries of %s", s)
                self._retry.add(s)

    def _read(self, streams: dict[str, str], block: int | None) -> list[Any]:
        """XREADGROUP of ``streams`` from their start ids, in the round trip that acknowledges
        the entries handled since the last read (before the reads: a re-read of the pending
        entries does not deliver them again).  On a Cluster a read per slot (a bucket's lobby
        channel and feed share its slot), all in one pipeline: a round trip per node.  Should
        it fail, the acknowledgements go with the next read."""
        from engine.store.redis_store import stream_replies

        acks, self._acks = self._acks, {}
        if not acks and not streams:
            return []
        try:
            if not self.cluster and wire.usable(self.client):  # packed, one write (engine/store/wire.py)
                return self._read_packed(acks, streams, block)
            if not acks and (not self.cluster or len(streams) == 1):
                return stream_replies(self.client.xreadgroup(GROUP, self.consumer, streams, count=100, block=block))
            pipe = self.client.pipeline(transaction=False)
            for name, ids in acks.items():
                pipe.xack(name, GROUP, *ids)
            if self.cluster:
                from redis.crc import key_slot

                by_slot: dict[int, dict[str, str]] = {}
                for s, start in streams.items():
                    by_slot.setdefault(key_slot(s.encode()), {})[s] = start
                for group in by_slot.values():
                    pipe.xreadgroup(GROUP, self.consumer, group, count=100)
            elif streams:
                pipe.xreadgroup(GROUP, self.consumer, streams, count=100, block=block)
            replies = pipe.execute()[len(acks):]
        except BaseException:
            for name, ids in acks.items():  # kept for the next round trip
                self._acks.setdefault(name, []).extend(ids)
            raise
        out: list[Any] = []
        for reply in replies:
            out += stream_replies(reply)
        return out

    def _read_packed(self, acks: dict[str, list[Any]], streams: dict[str, str], block: int | None) -> list[Any]:
        """:meth:`_read`'s round trip on a plain Redis: the XACKs and the XREADGROUP packed, the
        raw reply (an entry's fields a flat list); an error reply raised."""
        commands = [wire.pack("XACK", name, GROUP, *ids) for name, ids in acks.items()]
        if streams:
            blocking = () if block is None else ("BLOCK", block)
            commands.append(wire.pack("XREADGROUP", "GROUP", GROUP, self.consumer, "COUNT", 100, *blocking,
                                      "STREAMS", *streams, *streams.values()))
        from engine.store.redis_store import stream_replies

        replies = wire.checked(self.client, commands)
        return stream_replies(replies[-1]) if streams else []

    def _handle_reply(self, reply: list[Any]) -> int:
        """Handle a read's entries; those handled (or gone) are acknowledged with the next
        read (:meth:`_read`), the others read again later.  Returns how many were handled."""
        from engine.store.redis_store import entry_pairs

        handled = 0
        for stream, entries in reply:
            name = _s(stream)
            acked = []
            for entry_id, fields in entries:
                if not fields:
                    acked.append(entry_id)  # deleted meanwhile (XAUTOCLAIM's nil)
                    continue
                f = {_s(k): v for k, v in entry_pairs(fields)}
                try:
                    ok = self._channel(f) if name.endswith(":lobby") else \
                        self.manager.handle({k: _s(v) for k, v in f.items()})
                except Exception as exc:
                    if not is_transient(exc):
                        log.exception("lobby: %s entry %s failed (read again later)", name, _s(entry_id))
                    ok = False
                if ok:
                    acked.append(entry_id)
                else:
                    self._retry.add(name)
            if acked:
                self._acks.setdefault(name, []).extend(acked)
                handled += len(acked)
        return handled

    # -- a player's command --------------------------------------------------------------------
    def _channel(self, f: dict[str, Any]) -> bool:
        data = _series_data(f.get("c"))
        if data is not None:
            if self.series is not None:
                self.series.submit(data)
                self.engine.drain()
            return True
        try:
            command = parse_channel_command(f.get("c"))
        except Rejected as bad:
            log.warning("lobby channel: %s", bad)
            return True  # never a command: nobody to answer (the gateways send only valid ones)
        if keys.player_id_problem(getattr(command, "player")) is not None:
            return True
        if isinstance(command, (lc.Leave, lc.GraceExpired, lc.Returned)) and self._to_private(command):
            return True
        out = self._join(command) if isinstance(command, lc.Join) else self.engine.submit(command)
        if isinstance(command, lc.Returned):
            return True  # the gateway's own: nothing to tell
        rej: Rejected | None = out.rejection
        if isinstance(command, lc.Join) and isinstance(rej, AlreadyPlaced) and \
                not self.client.hget(keys.place_key(command.player), "state"):
            self._refuse(command, rej)  # at a private table still waiting for the friend: no place to tell
        elif isinstance(command, lc.Join) and (isinstance(rej, AlreadyPlaced) or (rej is None and not out.events)):
            self._tell_place(command)
        elif rej is not None:
            self._refuse(command, rej)
        return True

    def _join(self, command: lc.Join) -> Any:
        """A Join, its place claim (engine/service/place_claims.py) settled by what it did."""
        placed = False
        try:
            out = self.engine.submit(command)
            placed = out.rejection is None and bool(out.events)
            return out
        finally:
            if self.claims is not None:
                self.claims.settle(command.player, placed)

    def _to_private(self, command: lc.Leave | lc.GraceExpired | lc.Returned) -> bool:
        """A Leave, a grace's end or a return of a player at a private table (whose players are
        in no queue): straight to the table, as the queue hands a public table's on.  False: the
        player is at no private table (the queue decides)."""
        table = _s(self.client.hget(keys.place_key(command.player), "table"))
        if not table or not self.engine.table(table).private:
            return False
        data = {**command.model_dump(), "table": table, "room": self.engine.table(table).room}
        self.engine.send(("table", table), type(command).model_validate(data))
        self.engine.drain()
        return True

    def _refuse(self, command: lc.LobbyCommand, rej: Rejected) -> None:
        from engine.service.publish import rejection_fields

        fields = rejection_fields(None, command.command_id, rej.code, str(rej))
        if isinstance(rej, Cooldown):
            fields["retry_after_ms"] = str(int(rej.retry_after_ms))
        self.publisher.write([self.publisher._delivery(keys.outbox_key(getattr(command, "player")), fields)])

    def _tell_place(self, command: lc.Join) -> None:
        """A Join that finds the player already waiting or seated: where they are, as today's
        ``lobby`` message with ``already_queued`` / ``already_seated``."""
        place = {_s(k): _s(v) for k, v in (self.client.hgetall(keys.place_key(command.player)) or {}).items()}
        room = place.get("room") or command.room
        message: dict[str, Any] = {"kind": "lobby", "state": "queued", "room": room, "table": None, "match": None,
                                   "reason": "already_queued", "bot_level": None, "command_id": command.command_id}
        if place.get("state") == "table" and place.get("table"):
            info = {_s(k): _s(v) for k, v in
                    (self.client.hgetall(keys.table_info_key(place["table"], self.buckets)) or {}).items()}
            message["table"] = place["table"]
            if info.get("status") == "seated":
                message.update(state="seated", match=info.get("match") or None, reason="already_seated",
                               bot_level=info.get("bot_level") or None)
        self.publisher.write([self.publisher._delivery(keys.outbox_key(command.player), {
            "kind": "lobby", "match": message.get("match") or "", "command_id": command.command_id,
            "m": json.dumps(message, ensure_ascii=False)})])

    # -- the rooms' timers ---------------------------------------------------------------------
    def bot_policy(self, room: str) -> BotPolicy | None:
        """The room's bot offer (``gateway --bots``), read at most every :data:`OFFER_EVERY_S`."""
        now = time.monotonic()
        cached = self._offers.get(room)
        if cached is not None and now - cached[0] < OFFER_EVERY_S:
            return cached[1]
        policy = None
        raw = self.client.get(keys.bot_offer_key(room))
        if raw:
            try:
                data = json.loads(_s(raw))
                policy = BotPolicy(int(data["after_ms"]), str(data.get("level") or "normal"))
            except (ValueError, KeyError, TypeError):
                log.warning("room %s: a bot offer that is not {after_ms, level}: %r", room, raw)
        self._offers[room] = (now, policy)
        return policy

    def _timers(self, rooms: Sequence[str]) -> int:
        done = 0
        now = self.clock()
        graces = time.monotonic() - self._graces_at >= GRACES_EVERY_S and now >= self._graces_from
        if graces:
            self._graces_at = time.monotonic()
        if self.series is not None and self.owned and time.monotonic() - self._series_at >= GRACES_EVERY_S:
            self._series_at = time.monotonic()  # the join and vote clocks: seconds long
            done += self.series.fire_due(now)
            self.engine.drain()
        for room in rooms:
            done += self._queue_timers(room, now)
            if graces:
                done += self._graces(room, now)
        return done

    def _queue_timers(self, room: str, now: int) -> int:
        # the cached queue: this thread follows the room's feed, and each entry's notes load it
        cache = self.engine.queues.cache
        cached = cache.get(f"queue:{room}") if cache is not None else None
        q = cached if cached is not None else self.engine.queue(room)
        if not q.waiting:
            return 0
        done = 0
        cfg = self.rooms.get(room)
        policy = self.bot_policy(room)
        if policy is not None and now - q.waiting[0].since >= policy.after_ms:
            tried = self._tried.get(room)
            if tried is None or tried[0] != q.version or now - tried[1] >= 1000:
                self._tried[room] = (q.version, now)
                out = self.engine.submit(lc.QueueTimer(command_id=f"pm:{room}:qt:{q.version}", room=room,
                                                       version=q.version))
                done += int(out.accepted and bool(out.events))
        if cfg is not None and getattr(cfg, "ranked", False) and len(q.waiting) >= 2:
            second = now // 1000
            if self._paired.get(room) != second:
                self._paired[room] = second
                out = self.engine.submit(lc.PairTimer(command_id=f"pm:{room}:pt:{q.version}:{second}", room=room))
                done += int(out.accepted and bool(out.events))
        return done

    def _graces(self, room: str, now: int) -> int:
        key = keys.presence_key(room)
        due = self.client.zrangebyscore(key, 0, now, start=0, num=50, withscores=True)
        done = 0
        for member, score in due or ():
            player = _s(member)
            grace = lc.GraceExpired(command_id=f"pm:grace:{player}:{int(score)}", room=room, player=player)
            if self._to_private(grace):
                done += 1
                continue
            out = self.engine.submit(grace)
            done += int(out.accepted and bool(out.events))
        if due:  # only what was handled: a grace ending meanwhile is read next time
            self.client.zremrangebyscore(key, 0, max(int(score) for _m, score in due))
        return done

    def _resume_ms(self) -> int:
        graces = [cfg.reconnect_grace_seconds for r in self._room_names if (cfg := self.rooms.get(r)) is not None]
        return int(1000 * max(graces, default=10.0)) + RESUME_SLACK_MS


class BothWork:
    """Several pieces of one bucket's work, stopped together when its lease goes."""

    def __init__(self, parts: Sequence[Any]):
        self.parts = list(parts)

    def begin_stop(self) -> None:
        for p in self.parts:
            begin = getattr(p, "begin_stop", None)
            if begin is not None:
                begin()

    def stop(self) -> None:
        for p in self.parts:
            p.stop()


class PublishingMatches:
    """The match service as the lobby's :class:`engine.service.lobby.MatchRunner`: each command
    the lobby runs in a match (CreateMatch, a Sit, a Leave, a Disconnect…) is published to the
    players' streams as the inbox consumer publishes a player's."""

    def __init__(self, service: Any, publisher: Any):
        self.service = service
        self.publisher = publisher
        self.store = getattr(service, "store", None)

    def execute(self, command: Any) -> Any:
        out = self.service.execute(command)
        if getattr(out, "accepted", False):
            try:
                self.publisher.publish(command, out)
            except Exception as exc:  # stored: a reader's resync shows it
                log.warning("lobby: publishing %s of %s failed: %s", command.type, command.match_id, exc)
        return out

    def load_state(self, match_id: str) -> Any:
        return self.service.load_state(match_id)


def ratings_of(client: Any) -> Callable[[str, str], float | None]:
    """A player's rating in a room's ladder of the running season (its start for a player with
    no match yet), for a ranked room's Join snapshot; None with no season running."""
    from projections.ladders import RedisRatingStore

    store = RedisRatingStore(client)

    def rating(player: str, room: str) -> float | None:
        season = store.current()
        if season is None:
            return None
        skill = store.skill(room, season.name, player) or store.starter(room, season.name)(player)
        return float(skill.rating)

    return rating


def build_lobby(client: Any, store: Any, service: Any, ledger: Any, rooms: Any, clock: Callable[[], int],
                consumer: str, delivery: dict[str, Any]) -> LobbyWorker:
    """The lobby of one serve replica: its engine over the event store's lobby streams, the
    process managers on the feeds, the notes writer and the thread's worker."""
    from engine.service.lobby_notes import LobbyOutbox
    from engine.service.place_claims import PlaceClaims, room_claim, series_claim
    from engine.service.publish import Publisher
    from engine.service.series import SeriesService
    from engine.service.series_lobby import SeriesLobby
    from engine.store.lobby_store import RedisLobbyStore

    buckets = getattr(store, "buckets", keys.DEFAULT_BUCKETS)
    publisher = Publisher(client, consumer="sk-lobby", **delivery)
    holder: list[LobbyWorker] = []

    def series_place(player: str) -> str | None:
        series = _s(client.get(keys.player_series_key(player)))
        return f"private table {series}" if series else None

    claims = PlaceClaims(client)

    def place(player: str, room: str) -> str | None:
        """Where a Join of ``room`` finds ``player`` already: a private table's series (waiting
        for the friend or playing), else the room of the place read model, else the place
        another command claimed; nowhere: ``room`` is claimed for the Join."""
        return series_place(player) or _s(client.hget(keys.place_key(player), "room")) or \
            claims.take(player, room_claim(room))

    def place_state(player: str, series: str) -> str | None:
        """Where a CreateTable or JoinTable of ``series`` finds ``player`` already: queued or
        at a table, or in another series, or claimed; nowhere: ``series`` is claimed."""
        return _s(client.hget(keys.place_key(player), "state")) or series_place(player) or \
            claims.take(player, series_claim(series))

    engine = LobbyEngine(RedisLobbyStore(client, buckets=buckets), PublishingMatches(service, publisher),
                         clock=clock, rooms=rooms, balances=ledger, settlements=ledger,
                         bots=lambda room: holder[0].bot_policy(room) if holder else None,
                         follow_appends=False, places=place, ratings=ratings_of(client))
    outbox = LobbyOutbox(client, publisher, ledger, buckets=buckets, acks=getattr(store, "replica_acks", None))
    manager = LobbyFeedManager(client, engine, consumer=consumer, buckets=[], notes=outbox)
    series = SeriesLobby(client, SeriesService(RedisLobbyStore(client, buckets=buckets), clock=clock, rooms=rooms,
                                               balances=ledger, elsewhere=place_state), engine, publisher,
                         ledger=ledger)
    manager.series = series
    series.claims = claims
    outbox.series_summary = series.summary
    outbox.series_finished = series.finished_after
    engine.series_settled = series.settled
    worker = LobbyWorker(client, engine, manager, publisher, consumer=consumer, rooms=rooms, clock=clock,
                         buckets=buckets)
    worker.claims = claims
    holder.append(worker)
    return worker
