"""A whole lobby on the pure models, for the tests: one room's queue, its tables, their matches
(the real engine/match decide, with one-card fixed deals so a dealt match finishes in one
play), and the process managers (engine/lobby/managers.py) whose commands wait in per-target
FIFO lines until a test delivers them, in any interleaving of the targets.  The model's clock
is ``World.now``; nothing here reads a clock or a generator."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from engine.config import RoomConfig, load_config
from engine.lobby import commands as lc
from engine.lobby import events as ev
from engine.lobby import managers
from engine.lobby.decide import BotPolicy, LobbyContext, decide_and_apply
from engine.lobby.evolve import apply as lobby_apply
from engine.lobby.state import QueueState, TableState
from engine.match import commands as mc
from engine.match.decide import Context
from engine.match.decide import decide_and_apply as match_decide
from engine.match.errors import Rejected
from engine.match.state import MatchState

BOT_AFTER_MS = 3_000


def room_config(**changes: Any) -> RoomConfig:
    base = {"test_deals": True, "ready_seconds": 30, "reconnect_grace_seconds": 10,
            "leave_cooldown_seconds": 5, "leave_cooldown_max_seconds": 60}
    return RoomConfig.from_record({**load_config("points").to_record(), **base, **changes})


Target = tuple[str, str]  # ("queue", room) | ("table", id) | ("match", id)


@dataclass
class World:
    cfg: RoomConfig = field(default_factory=room_config)
    bots: bool = True
    now: int = 1_000_000
    queue: QueueState = field(init=False)
    queue_events: list[ev.LobbyEvent] = field(default_factory=list)
    tables: dict[str, TableState] = field(default_factory=dict)
    table_events: dict[str, list[ev.LobbyEvent]] = field(default_factory=dict)
    matches: dict[str, MatchState] = field(default_factory=dict)
    pending: dict[Target, deque[Any]] = field(default_factory=dict)
    confirmed: set[str] = field(default_factory=set)
    ids: int = 0
    rejections: list[tuple[Target, str, str]] = field(default_factory=list)  # (target, command, code)
    #: properties: who left (and has not joined since), who was dealt when
    gone: set[str] = field(default_factory=set)
    table_left: dict[str, set[str]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    joined_at: dict[str, int] = field(default_factory=dict)
    dealt_at: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.queue = QueueState(room=self.cfg.name)

    @property
    def room(self) -> str:
        return self.cfg.name

    # -- ids -------------------------------------------------------------------------------
    def _next(self, prefix: str) -> str:
        self.ids += 1
        return f"{prefix}{self.ids}"

    def _cid(self) -> str:
        return self._next("c")

    # -- running commands ---------------------------------------------------------------------
    def _queue_ctx(self) -> LobbyContext:
        return LobbyContext(now_ms=self.now, room=self.cfg, table_id=f"t{self.ids + 1}x",
                            bot_id=f"bot-{self.ids + 1}",
                            bots=BotPolicy(BOT_AFTER_MS, "normal") if self.bots else None)

    def run_queue(self, command: lc.LobbyCommand) -> Rejected | None:
        ctx = self._queue_ctx()
        self.ids += 1  # the ids the context offered are never offered again
        try:
            events, state = decide_and_apply(self.queue, command, ctx)
        except Rejected as r:
            self.rejections.append((("queue", self.room), command.type, r.code))  # type: ignore[attr-defined]
            return r
        self.queue = state
        self.queue_events += events
        for e in events:
            self._watch_queue(e)
            for c in managers.from_queue(self.room, e):
                self._send(("table", c.table), c)  # type: ignore[attr-defined]
        return None

    def run_table(self, table: str, command: lc.LobbyCommand) -> Rejected | None:
        state = self.tables.get(table, TableState(table=table))
        try:
            events, _after = decide_and_apply(state, command, LobbyContext(now_ms=self.now, room=self.cfg))
        except Rejected as r:
            self.rejections.append((("table", table), command.type, r.code))  # type: ignore[attr-defined]
            return r
        for e in events:
            for mcmd in managers.to_match(state, e):
                self._send(("match", mcmd.match_id), mcmd)
            state = lobby_apply(state, e)
            for c in managers.from_table(state, e):
                self._send(("queue", self.room), c)
            self._watch_table(state, e)
        self.tables[table] = state
        self.table_events.setdefault(table, []).extend(events)
        return None

    def run_match(self, match: str, command: mc.CommandBase) -> Rejected | None:
        state = self.matches.get(match, MatchState(match_id=match))
        escaped = [s.player for s in state.seats if s is not None and s.escaped]
        try:
            events, after = match_decide(state, command, Context(now_ms=self.now, room=self.cfg,
                                                                 deal_on_ready=False))
        except Rejected as r:
            self.rejections.append((("match", match), command.type, r.code))  # type: ignore[attr-defined]
            return r
        self.matches[match] = after
        table = match.rsplit("-", 1)[0]
        for c in managers.from_match(table, match, events, escaped):
            self._send(("table", table), c)
        if any(e.type == "HandDealt" for e in events):  # type: ignore[attr-defined]
            for s in after.seats:
                if s is not None:
                    self.dealt_at.setdefault(s.player, self.now)
        if (after.phase == "seating" and all(s is not None for s in after.seats) and match not in self.confirmed
                and not any(e.type == "PlayerRemoved" for e in events)):  # type: ignore[attr-defined]
            self.confirmed.add(match)  # the lobby's "both sat": the table is told
            self._send(("table", table), lc.ConfirmSeated(command_id=f"confirm:{match}", table=table, match=match))
        if after.phase == "seating" and all(s is not None and s.ready for s in after.seats):
            # both ready: the deal, one card each, seat 0 leads (it finishes with one play)
            self.run_match(match, mc.Deal(command_id=f"deal:{match}", match_id=match, hands=((0,), (1,)), first=0))
        return None

    def _send(self, target: Target, command: Any) -> None:
        self.pending.setdefault(target, deque()).append(command)

    def deliver(self, target: Target) -> None:
        line = self.pending.get(target)
        if not line:
            return
        command = line.popleft()
        if not line:
            del self.pending[target]
        kind, ident = target
        if kind == "queue":
            self.run_queue(command)
        elif kind == "table":
            self.run_table(ident, command)
        else:
            self.run_match(ident, command)

    def deliver_all(self, limit: int = 10_000) -> None:
        for _ in range(limit):
            if not self.pending:
                return
            self.deliver(next(iter(self.pending)))
        raise AssertionError("the process managers never went quiet")

    # -- what players and the system do -------------------------------------------------------
    def join(self, player: str) -> Rejected | None:
        out = self.run_queue(lc.Join(command_id=self._cid(), room=self.room, player=player))
        return out

    def leave(self, player: str) -> Rejected | None:
        return self.run_queue(lc.Leave(command_id=self._cid(), room=self.room, player=player))

    def grace_expired(self, player: str) -> Rejected | None:
        return self.run_queue(lc.GraceExpired(command_id=self._cid(), room=self.room, player=player))

    def returned(self, player: str) -> Rejected | None:
        return self.run_queue(lc.Returned(command_id=self._cid(), room=self.room, player=player))

    def queue_timer(self) -> Rejected | None:
        return self.run_queue(lc.QueueTimer(command_id=self._cid(), room=self.room, version=self.queue.version))

    def current_match(self, player: str) -> str | None:
        placed = self.queue.place_of(player)
        table = self.tables.get(placed.table) if placed else None
        return table.match if table is not None and table.status == "seated" else None

    def ready(self, player: str) -> Rejected | None:
        match = self.current_match(player)
        if match is None:
            return None
        return self.run_match(match, mc.Ready(command_id=self._cid(), match_id=match, player=player))

    def bots_ready(self) -> None:
        """The bot process: Ready in every seated match of a bot table."""
        for t in self.tables.values():
            m = self.matches.get(t.match or "")
            if t.bot and t.status == "seated" and m is not None and m.phase == "seating":
                i = m.seat_of(t.bot)
                if i is not None and not m.seat(i).ready:
                    self.run_match(m.match_id, mc.Ready(command_id=f"bot-ready:{m.match_id}", match_id=m.match_id,
                                                        player=t.bot))

    def play_out(self, match: str) -> Rejected | None:
        m = self.matches.get(match)
        if m is None or m.phase != "playing" or m.turn is None:
            return None
        s = m.seat(m.turn)
        return self.run_match(match, mc.Play(command_id=self._cid(), match_id=match, player=s.player, cards=s.hand))

    def settle(self, table: str) -> Rejected | None:
        t = self.tables.get(table)
        if t is None or t.status != "between" or t.match is None:
            return None
        return self.run_table(table, lc.Settle(command_id=f"settle:{t.match}", table=table, match=t.match))

    def fire_ready_clocks(self) -> None:
        for mid, m in list(self.matches.items()):
            if m.deadline_kind == "ready" and m.deadline_at is not None and m.deadline_at <= self.now:
                self.run_match(mid, mc.ReadyTimeout(command_id=f"rt:{mid}:{m.version}", match_id=mid,
                                                    version=m.version))

    # -- bookkeeping for the properties ------------------------------------------------------
    def _seat(self, player: str, where: str) -> None:
        if player in self.gone:
            self.violations.append(f"{player} left and was {where} without a new Join")

    def _watch_queue(self, e: ev.LobbyEvent) -> None:
        if isinstance(e, ev.PlayerQueued):
            if e.reason == "joined":
                self.gone.discard(e.player)
                self.joined_at[e.player] = e.ts
                self.dealt_at.pop(e.player, None)
            else:
                self._seat(e.player, "requeued")
        elif isinstance(e, ev.TablePaired):
            for p in e.players:
                self._seat(p, f"paired at {e.table}")
        elif isinstance(e, ev.BotSeated):
            self._seat(e.player, f"seated with a bot at {e.table}")
        elif isinstance(e, ev.PlayerLeftQueue) or isinstance(e, ev.LeaveRequested):
            self.gone.add(e.player)
        elif isinstance(e, ev.LeftWithTable):
            self.gone.add(e.player)

    def _watch_table(self, state: TableState, e: ev.LobbyEvent) -> None:
        # the queue has the player's Leave first (the one entry point); a table learns of it
        # when its process manager hands it on: from then on it never seats them again
        left = self.table_left.setdefault(state.table, set())
        if isinstance(e, (ev.LeaveDeferred, ev.LeaveNoted)):
            left.add(e.player)
        if isinstance(e, ev.TableClosed):
            for p, _r in e.removed:
                self.gone.add(p)
        if isinstance(e, (ev.MatchSeated, ev.NextMatchOffered)):
            for p in set(state.people) & left:
                self.violations.append(f"{p} left table {state.table} and was seated in {state.match}")

    # -- invariants ----------------------------------------------------------------------------
    def places(self) -> dict[str, list[str]]:
        where: dict[str, list[str]] = {}
        for w in self.queue.waiting:
            where.setdefault(w.player, []).append("queue")
        for p in self.queue.placed:
            where.setdefault(p.player, []).append(f"placed:{p.table}")
        for t in self.tables.values():
            if t.open:
                for p in t.people:
                    if self.queue.place_of(p) is None or self.queue.place_of(p).table != t.table:  # type: ignore[union-attr]
                        where.setdefault(p, []).append(f"table:{t.table}")
        return where

    def check(self) -> None:
        assert not self.violations, self.violations
        for p, at in self.places().items():
            assert len(at) == 1, f"{p} is in {at}"
        for mid in self.matches:
            table, n = mid.rsplit("-", 1)
            t = self.tables.get(table)
            assert t is not None and t.status != "new" and 1 <= int(n) <= t.n, f"match {mid} has no table"
        bots = {t.bot for t in self.tables.values() if t.bot}
        assert not bots & {w.player for w in self.queue.waiting}, "a bot waits in the queue"
        assert not bots & {p.player for p in self.queue.placed}, "a bot is placed in the queue"
        for t in self.tables.values():
            if t.open and t.bot:
                (person,) = t.people
                placed = self.queue.place_of(person)
                assert placed is not None and placed.table == t.table, f"the bot of {t.table} sits alone"
        from engine.lobby.replay import check_lobby_stream, replay_queue, replay_table
        from engine.lobby.state import decode_queue, encode_queue

        assert replay_queue(self.room, self.queue_events) == self.queue
        assert decode_queue(encode_queue(self.queue)) == self.queue, "the queue's snapshot reads back otherwise"
        assert not self.queue_events or check_lobby_stream(self.queue_events) == []
        for tid, events in self.table_events.items():
            assert replay_table(tid, events) == self.tables[tid]
            assert check_lobby_stream(events) == []

    def quiesce(self, people: list[str], rounds: int = 200) -> None:
        """Everyone leaves; deliver, settle, play, let the clocks run until nothing is open."""
        for p in people:
            self.leave(p)
        for _ in range(rounds):
            self.deliver_all()
            for t in list(self.tables):
                self.settle(t)
                tm = self.tables[t].match
                if tm:
                    self.play_out(tm)
            self.deliver_all()
            busy = any(t.open for t in self.tables.values()) or self.queue.waiting or self.queue.placed \
                or any(not m.over for m in self.matches.values())
            if not busy:
                return
            for p in people:  # a Leave the table refused meanwhile (it moved on): again
                if self.queue.place_of(p) is not None:
                    self.leave(p)
            self.now += self.cfg.ready_seconds * 1000 // 2
            self.fire_ready_clocks()
        open_ = [t.table for t in self.tables.values() if t.open]
        raise AssertionError(f"not quiet: tables {open_}, waiting {self.queue.waiting_players()}, "
                             f"placed {self.queue.placed}")


def player_rules(people: Any) -> Any:
    """A hypothesis state machine's base with a player's own actions (Join, Leave, Ready, a
    lost socket past the grace, a return) and the queue's and bots' clocks, each handed to
    ``self.world``: the pure model's machine and the real stack's share them (``people``:
    the strategy of player ids)."""
    from hypothesis.stateful import RuleBasedStateMachine, rule

    class PlayerRules(RuleBasedStateMachine):
        world: Any

        @rule(p=people)
        def join(self, p: str) -> None:
            self.world.join(p)

        @rule(p=people)
        def leave(self, p: str) -> None:
            self.world.leave(p)

        @rule(p=people)
        def ready(self, p: str) -> None:
            self.world.ready(p)

        @rule(p=people)
        def grace_expired(self, p: str) -> None:
            self.world.grace_expired(p)

        @rule(p=people)
        def returned(self, p: str) -> None:
            self.world.returned(p)

        @rule()
        def queue_timer(self) -> None:
            self.world.queue_timer()

        @rule()
        def bots_ready(self) -> None:
            self.world.bots_ready()

    return PlayerRules
