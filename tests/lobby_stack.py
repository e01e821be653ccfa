"""A whole lobby on the real stack, for the tests: the room's queue and its tables in a
:class:`engine.store.lobby_store.RedisLobbyStore`, their matches in a
:class:`engine.store.redis_store.RedisEventStore` run by the real
:class:`engine.service.service.MatchService`, the managers of
:class:`engine.service.lobby.LobbyEngine`, the settlement by the real projection runner into
the real ledger -- all on one Redis client (a redis-server, or a Redis Cluster).  One-card
fixed deals (a test room), so a dealt match finishes with one play; the clock is ``now``."""

from __future__ import annotations

import random
from typing import Any

from engine.config import RoomConfig, load_config
from engine.lobby import commands as lc
from engine.lobby import events as ev
from engine.lobby.decide import BotPolicy
from engine.lobby.replay import check_lobby_stream, replay_queue, replay_table
from engine.match import commands as mc
from engine.lobby.state import decode_queue, encode_queue
from engine.service.lobby import LobbyEngine, Snapshots
from engine.service.lobby_feed import LobbyFeedManager
from engine.service.lobby_notes import OutboxNotes, messages_of
from engine.match.events import MatchFinished, PlayerEscaped, PlayerRemoved
from engine.service.service import MatchService
from engine.store.lobby_store import RedisLobbyStore
from engine.store.redis_store import RedisEventStore
from projections.ledger import RedisLedger
from projections.runner import ProjectionRunner, RedisFeed

BOT_AFTER_MS = 3_000
#: the queue saved every 3 events, so a crash's new engine starts from a snapshot (check():
#: the state it loads is the whole stream's replay)
QUEUE_SNAPSHOTS_OFTEN = Snapshots(encode_queue, decode_queue, 3)


def room_config(name: str = "points", **changes: Any) -> RoomConfig:
    base = {"name": name, "test_deals": True, "ready_seconds": 20, "reconnect_grace_seconds": 10,
            "leave_cooldown_seconds": 2, "leave_cooldown_max_seconds": 16}
    return RoomConfig.from_record({**load_config("points").to_record(), **base, **changes})


class StackWorld:
    def __init__(self, client: Any, cfg: RoomConfig | None = None, bots: bool = True, feed: bool = False):
        """``feed``: the managers follow the feeds (engine/service/lobby_feed.py) instead of
        the engine's own lines."""
        self.client = client
        self.feed_mode = feed
        self.cfg = cfg or room_config()
        self.rooms = {self.cfg.name: self.cfg}
        self.now = 1_000_000
        self.ids = 0
        self.bots = bots
        self.store = RedisEventStore(client)
        self.lobby_store = RedisLobbyStore(client)
        self.ledger = RedisLedger(client)
        self.matches = MatchService(self.store, clock=lambda: self.now, rng=random.Random(7), rooms=self.rooms,
                                    balances=self.ledger, deal_on_ready=False)
        self.feed = RedisFeed(client, consumer="lobby-test", claim_idle_ms=None)
        self.feed.ensure_groups()
        self.projections = ProjectionRunner(self.store, self.ledger, self.feed)
        #: properties: who left (and has not joined since), what each player was told
        self.gone: set[str] = set()
        self.table_left: dict[str, set[str]] = {}
        self.violations: list[str] = []
        #: the lobby messages each player was told, and the command id of each one's last Join
        self.told: dict[str, list[dict[str, Any]]] = {}
        self.joins: dict[str, str] = {}
        self.outbox = OutboxNotes(client)
        self.engine = self._engine()
        self.manager = self._manager()

    def _engine(self) -> LobbyEngine:
        return LobbyEngine(self.lobby_store, self.matches, clock=lambda: self.now, rooms=self.rooms,
                           balances=self.ledger, settlements=self.ledger,
                           bots=BotPolicy(BOT_AFTER_MS, "normal") if self.bots else None,
                           table_ids=self._table_id, bot_ids=lambda: self._next("bot-"), on_event=self._watch,
                           follow_appends=not self.feed_mode, notes=self._note,
                           queue_snapshots=QUEUE_SNAPSHOTS_OFTEN)

    def _manager(self) -> LobbyFeedManager | None:
        if not self.feed_mode:
            return None
        return LobbyFeedManager(self.client, self.engine, consumer="lobby-test", rooms=lambda: [self.room])

    def drain(self) -> None:
        """Every manager command, until nothing is left to do."""
        if self.manager is not None:
            self.manager.run_until_quiet()
        else:
            self.engine.drain()

    def step(self, picks: list[int]) -> None:
        """Some of the managers' work: a round of the feeds, or commands of the lines picked."""
        if self.manager is not None:
            self.manager.run_once(count=max(picks) % 5 + 1)
            return
        for i in picks:
            targets = list(self.engine.pending)
            if not targets:
                return
            self.engine.deliver(targets[i % len(targets)])

    @property
    def room(self) -> str:
        return self.cfg.name

    def _next(self, prefix: str) -> str:
        self.ids += 1
        return f"{prefix}{self.ids}"

    def _table_id(self) -> str:
        return self._next("t") + "x"

    def crash(self) -> None:
        """The lobby's process dies (its lines and caches are lost) and a new one recovers
        from the stored streams."""
        self.engine = self._engine()
        self.manager = self._manager()
        if self.manager is None:  # the feeds' consumer group keeps what the manager had not done
            self.engine.recover([self.room])

    # -- what players and the system do -------------------------------------------------------
    def join(self, p: str) -> Any:
        cid = self._next("c")
        self.joins[p] = cid
        return self.engine.submit(lc.Join(command_id=cid, room=self.room, player=p))

    def leave(self, p: str) -> Any:
        return self.engine.submit(lc.Leave(command_id=self._next("c"), room=self.room, player=p))

    def grace_expired(self, p: str) -> Any:
        return self.engine.submit(lc.GraceExpired(command_id=self._next("c"), room=self.room, player=p))

    def returned(self, p: str) -> Any:
        return self.engine.submit(lc.Returned(command_id=self._next("c"), room=self.room, player=p))

    def queue_timer(self) -> Any:
        q = self.engine.queue(self.room)
        return self.engine.submit(lc.QueueTimer(command_id=self._next("c"), room=self.room, version=q.version))

    def tables(self) -> dict[str, Any]:
        return {t: self.engine.table(t) for t in self.lobby_store.table_ids()}

    def current_match(self, p: str) -> str | None:
        placed = self.engine.queue(self.room).place_of(p)
        if placed is None:
            return None
        t = self.engine.table(placed.table)
        return t.match if t.status == "seated" else None

    def ready(self, p: str) -> None:
        match = self.current_match(p)
        if match is not None:
            self.engine.run_match(mc.Ready(command_id=self._next("c"), match_id=match, player=p))
            self._deal(match)

    def _deal(self, match: str) -> None:
        m = self.matches.load_state(match)
        if m.phase == "seating" and all(s is not None and s.ready for s in m.seats):
            self.engine.run_match(mc.Deal(command_id=f"deal:{match}", match_id=match, hands=((0,), (1,)), first=0))

    def bots_ready(self) -> None:
        for t in self.tables().values():
            if t.bot and t.status == "seated" and t.match:
                m = self.matches.load_state(t.match)
                i = m.seat_of(t.bot)
                if m.phase == "seating" and i is not None and not m.seat(i).ready:
                    self.engine.run_match(mc.Ready(command_id=f"bot-ready:{t.match}", match_id=t.match,
                                                   player=t.bot))
                    self._deal(t.match)

    def play_out(self, match: str) -> None:
        m = self.matches.load_state(match)
        if m.phase == "playing" and m.turn is not None:
            s = m.seat(m.turn)
            self.engine.run_match(mc.Play(command_id=self._next("c"), match_id=match, player=s.player, cards=s.hand))

    def settle(self) -> None:
        """The projection runner settles what finished; the lobby hears it from the ledger."""
        while self.projections.run_once():
            pass
        if self.manager is not None:
            self.manager.run_until_quiet()
        else:
            self.engine.settle_due(sorted(self.lobby_store.table_ids()))

    def fire_ready_clocks(self, every_match: bool = False) -> None:
        """The timer workers: each due deadline (ready, turn, trustee) of a seated table's match,
        or (``every_match``) of every match in the store."""
        timers = {"ready": mc.ReadyTimeout, "turn": mc.TurnTimeout, "trustee": mc.TrusteeAct}
        if every_match:
            ids = list(self.store.match_ids())
        else:
            ids = [t.match for t in self.tables().values() if t.match is not None and t.status == "seated"]
        for mid in ids:
            for _ in range(50):  # a trustee acts, then the next deadline may be due too
                m = self.matches.load_state(mid)
                kind = m.deadline_kind
                if kind not in timers or m.deadline_at is None or m.deadline_at > self.now:
                    break
                cls = timers[kind]
                self.engine.run_match(cls(command_id=f"{kind}:{mid}:{m.version}", match_id=mid, version=m.version))

    # -- bookkeeping ----------------------------------------------------------------------------
    def _seat(self, player: str, where: str) -> None:
        if player in self.gone:
            self.violations.append(f"{player} left and was {where} without a new Join")

    def _watch(self, e: ev.LobbyEvent) -> None:
        if isinstance(e, ev.PlayerQueued):
            if e.reason == "joined":
                self.gone.discard(e.player)
            else:
                self._seat(e.player, "requeued")
        elif isinstance(e, ev.TablePaired):
            for p in e.players:
                self._seat(p, f"paired at {e.table}")
        elif isinstance(e, ev.BotSeated):
            self._seat(e.player, f"seated with a bot at {e.table}")
        elif isinstance(e, (ev.PlayerLeftQueue, ev.LeaveRequested, ev.LeftWithTable)):
            self.gone.add(e.player)
        elif isinstance(e, (ev.LeaveDeferred, ev.LeaveNoted)):
            self.table_left.setdefault(e.aggregate, set()).add(e.player)
        elif isinstance(e, (ev.MatchSeated, ev.NextMatchOffered)) and self.table_left.get(e.aggregate):
            self.violations.append(f"{sorted(self.table_left[e.aggregate])} left {e.aggregate} and were seated "
                                   f"in {e.match}")
        elif isinstance(e, ev.TableClosed):
            for p, _r in e.removed:
                self.gone.add(p)

    def _note(self, e: ev.LobbyEvent, table: Any) -> None:
        """The lobby's messages never contradict the player's match stream: a ``seated`` names a
        match the player sits in, not over; a ``removed`` ``not_ready`` / ``escaped`` follows the
        match's removal / escape; a ``queued`` after a Join names that Join."""
        self.outbox(e, table)  # the real stream too (engine/service/lobby_notes.py)
        for player, m in messages_of(e, table):
            self.told.setdefault(player, []).append(m)
            where = f"{player} told {m['state']} ({m['reason']}) for {m['match']}"
            if m["state"] == "seated":
                ms = self.matches.load_state(m["match"])
                if ms.seat_of(player) is None or ms.over:
                    self.violations.append(f"{where}: not seated there, or it is over")
            elif m["state"] == "removed" and m["reason"] in ("not_ready", "escaped"):
                events = self.store.load(m["match"])
                saw = any(isinstance(x, PlayerRemoved) and x.player == player and x.reason == "not_ready"
                          for x in events) if m["reason"] == "not_ready" else any(
                    (isinstance(x, PlayerEscaped) and x.player == player)
                    or (isinstance(x, MatchFinished) and x.reason == "escape" and x.loser == player) for x in events)
                if not saw:
                    self.violations.append(f"{where}: the match says nothing of it")
            elif m["state"] == "queued" and m["reason"] is None and m["command_id"] != self.joins.get(player):
                self.violations.append(f"{where}: names {m['command_id']}, not the Join {self.joins.get(player)}")

    # -- invariants -------------------------------------------------------------------------------
    def check(self) -> None:
        assert not self.violations, self.violations
        q = self.engine.queue(self.room)
        stored_q = self.lobby_store.load(ev.queue_aggregate(self.room))
        assert replay_queue(self.room, stored_q) == q, "the queue's replay differs from its live state"
        assert not stored_q or check_lobby_stream(stored_q) == []
        tables = self.tables()
        where: dict[str, list[str]] = {}
        for w in q.waiting:
            where.setdefault(w.player, []).append("queue")
        for p in q.placed:
            where.setdefault(p.player, []).append(f"placed:{p.table}")
        for tid, t in tables.items():
            events = self.lobby_store.load(ev.table_aggregate(tid))
            assert replay_table(tid, events) == t and check_lobby_stream(events) == []
            if t.open:
                for p in t.people:
                    placed = q.place_of(p)
                    if placed is None or placed.table != tid:
                        where.setdefault(p, []).append(f"table:{tid}")
                if t.bot:
                    (person,) = t.people
                    placed = q.place_of(person)
                    assert placed is not None and placed.table == tid, f"the bot of {tid} sits alone"
        for p, at in where.items():
            assert len(at) == 1, f"{p} is in {at}"
        bots = {t.bot for t in tables.values() if t.bot}
        assert not bots & {w.player for w in q.waiting}, "a bot waits in the queue"
        for mid in self.store.match_ids():
            table, _, n = mid.rpartition("-")
            t = tables.get(table)
            assert t is not None and 1 <= int(n) <= t.n, f"match {mid} has no table"

    def quiesce(self, people: list[str], rounds: int = 100) -> None:
        """Everyone leaves; deliver, settle, play, let the clocks run until nothing is open."""
        for p in people:
            self.leave(p)
        for _ in range(rounds):
            self.drain()
            self.settle()
            for t in self.tables().values():
                if t.match:
                    self.play_out(t.match)
            self.drain()
            q = self.engine.queue(self.room)
            tables = self.tables()
            if not any(t.open for t in tables.values()) and not q.waiting and not q.placed:
                return
            for p in people:
                if q.place_of(p) is not None:
                    self.leave(p)
            self.now += self.cfg.ready_seconds * 1000 // 2
            self.fire_ready_clocks()
        raise AssertionError(f"not quiet: {[t for t, s in self.tables().items() if s.open]}")
