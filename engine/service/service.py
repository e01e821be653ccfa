"""The command service: load a match, decide, append -- with retries.

:class:`MatchService` is the only place where the pure domain meets the
world: it reads the clock and the random source (for a deal), builds the
:class:`engine.match.decide.Context`, and appends the decided events to the
:class:`engine.store.base.EventStore` together with the new state's deadline.

* Idempotency: a command id the store has already seen returns the stored
  events with ``duplicate=True`` (whether the retry would now be accepted or
  refused), and nothing is appended.
* Optimistic concurrency: on :class:`WrongVersion` (another writer appended
  since the load) the service reloads and decides again, up to ``retries``
  times; after that the :class:`WrongVersion` propagates (the caller -- the
  inbox consumer -- redelivers the command).
* Snapshots: every ``snapshot_every`` events the new state is saved
  (:func:`engine.match.state.encode_state`); loading reads the snapshot and the
  tail of the stream after it.
* A :class:`Rejected` never raises: it comes back in the :class:`Outcome`.
* ``on_commit(outcome)`` is called after each append of new events (the
  deadline scheduler of ``workers`` hooks in here).
* State cache (optional, :class:`engine.service.state_cache.StateCache`): ``execute``
  decides against the cached state of the match without reading the store and
  appends with that state's version as the expected version -- the append's
  atomic version check is what validates the cache.  On :class:`WrongVersion`
  the service catches up from the stream (that first, optimistic attempt does
  not count against ``retries``); a refusal decided on an unverified cached
  state is checked against a fresh load before it is reported.
  ``load_state`` reads only the events after the cached version.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from engine.rules.cards import DECK_SIZE
from engine.service.shuffle import RandomSource, SeedSource, secure_server_seed, shuffled_deck
from engine.config import RoomConfig
from engine.match.commands import CommandBase, CreateMatch, Deal, Ready, Say, Sit, Sync
from engine.match.decide import DEALT, Context, decide_and_apply
from engine.match.errors import Rejected
from engine.match.events import EventBase
from engine.match.replay import replay
from engine.match.state import MatchState, decode_state, encode_state
from engine.service.command_service import CommandService
from engine.service.state_cache import StateCache
from engine.store.base import AppendRequest, AppendResult, EventStore, Snapshot, Write, WrongVersion
from engine.store.redis_errors import is_transient

_log = logging.getLogger(__name__)


def _stalls(reply: object) -> bool:
    """A pipelined append's reply that says its node cannot take or confirm writes now
    (transient: NOREPLICAS, CLUSTERDOWN, TRYAGAIN, a lost connection); not MOVED/ASK,
    which the command run alone follows at once."""
    import redis.exceptions as rex

    return (isinstance(reply, Exception) and not isinstance(reply, (WrongVersion, rex.MovedError, rex.AskError))
            and is_transient(reply))


def _node_bound(exc: BaseException) -> bool:
    """A transient error of the one node holding the match (too few replicas acknowledged,
    a Cluster node down or mid-fail-over), not of Redis as a whole."""
    import redis.exceptions as rex

    return (isinstance(exc, (rex.ClusterDownError, rex.TryAgainError, rex.MasterDownError))
            or (isinstance(exc, rex.ResponseError) and str(exc).startswith("NOREPLICAS")))


class BalanceSource(Protocol):
    """Where Sit balances come from: the engine's ledger (projections.ledger.Ledger)."""

    def balance(self, player: str, mode: Literal["points", "wealth"]) -> int: ...


class Carry(Protocol):
    """A publisher whose outputs an append may carry (:meth:`MatchService.execute_many`):
    the Redis it writes to, and the stream entries it publishes for an outcome (None or
    empty: nothing to carry, it publishes that outcome itself)."""

    @property
    def redis(self) -> Any: ...

    def outputs_of(self, command: CommandBase, outcome: Outcome) -> Sequence[Write] | None: ...


class RoomSource(Protocol):
    """The registered rooms (engine.service.rooms.RoomRegistry)."""

    def get(self, name: str) -> RoomConfig | None: ...


class FixedBalances:
    """Balances from a mapping (scripts, the terminal game, tests): ``{player: n}`` for any mode,
    or ``{(player, mode): n}``; 0 for anyone else.

    >>> FixedBalances({"a": 500}).balance("a", "wealth"), FixedBalances({}).balance("b", "points")
    (500, 0)
    """

    def __init__(self, balances: Mapping[Any, int]):
        self._balances: dict[Any, int] = dict(balances)

    def balance(self, player: str, mode: str) -> int:
        return int(self._balances.get((player, mode), self._balances.get(player, 0)))


@dataclass(frozen=True)
class Outcome:
    """What one command did."""

    events: tuple[EventBase, ...]  # appended now, or the stored ones of a duplicate command id
    state: MatchState  # the match after the command (unchanged on a rejection)
    rejection: Rejected | None = None
    duplicate: bool = False
    attempts: int = field(default=1, compare=False)
    #: its publication (the inbox's outputs) was written with its events, in the append's
    #: own step (:meth:`MatchService.execute_many` ``carry``): not to be published again,
    #: but for ``leftover``
    published: bool = field(default=False, compare=False)
    #: with ``published``: the entries of its publication the append could not carry (on a
    #: Redis Cluster, the streams another node holds), the caller's to write
    leftover: tuple[Write, ...] = field(default=(), compare=False)

    @property
    def accepted(self) -> bool:
        return self.rejection is None


class _MatchAggregate:
    """The match as the command service's aggregate."""

    def __init__(self, service: MatchService):
        self.service = service

    def id_of(self, command: CommandBase) -> str:
        return command.match_id

    def empty(self, ident: str) -> MatchState:
        return MatchState(match_id=ident)

    def version(self, state: MatchState) -> int:
        return state.version

    def replay(self, events: Sequence[EventBase], state: MatchState) -> MatchState:
        return replay(events, state, match_id=state.match_id) if events else state

    def context(self, command: CommandBase, state: MatchState) -> Context:
        return self.service._context(command, state)

    def decide_and_apply(self, state: MatchState, command: CommandBase,
                         ctx: Context) -> tuple[list[EventBase], MatchState]:
        events, new = decide_and_apply(state, command, ctx)
        return list(events), new


class _MatchStreams:
    """The event store as the match's streams: the snapshot as the base, the deadline with
    each append."""

    def __init__(self, service: MatchService):
        self.service = service

    def load(self, ident: str, after: int = 0) -> list[EventBase]:
        return self.service.store.load(ident, after=after)

    def version(self, ident: str) -> int:
        return self.service.store.version(ident)

    def base(self, ident: str) -> MatchState | None:
        snap = self.service.store.load_snapshot(ident)
        if snap is None:
            return None
        try:
            return decode_state(snap.state)
        except Exception:  # an unreadable snapshot: the full stream
            return None

    def append(self, ident: str, expected_version: int, command_id: str, events: Sequence[EventBase],
               state: MatchState) -> AppendResult:
        return self.service.store.append(ident, expected_version, command_id, events, state.deadline())

    def command_events(self, ident: str, command_id: str) -> list[EventBase]:
        return list(self.service.store.command_events(ident, command_id))

    def confirm(self, ident: str) -> None:
        """A duplicate found without an append is answered only once its original write is on
        the replicas (``--replica-acks``; its WAIT may have fallen short, issue 35 §3)."""
        self.service.store.confirm_replicated(ident)


class _MatchCache:
    """The process's :class:`StateCache` as the command service's cache."""

    def __init__(self, cache: StateCache):
        self.cache = cache

    def get(self, ident: str) -> MatchState | None:
        state: MatchState | None = self.cache.get(ident)
        return state

    def put(self, ident: str, state: MatchState) -> None:
        self.cache.put(state)

    def replace(self, ident: str, state: MatchState) -> None:
        self.cache.replace(state)


class MatchService:
    def __init__(self, store: EventStore, clock: Callable[[], int], rng: RandomSource,
                 snapshot_every: int = 50, retries: int = 5, deal_on_ready: bool = True,
                 on_commit: Callable[[Outcome], None] | None = None,
                 state_cache: StateCache | None = None,
                 balances: BalanceSource | None = None, rooms: RoomSource | None = None,
                 server_seeds: SeedSource = secure_server_seed):
        self.store = store
        self.clock = clock
        self.rng = rng
        self.snapshot_every = snapshot_every
        self.retries = retries
        #: give decide a shuffled deck with Ready so the second Ready deals at once;
        #: scripts with a fixed deal turn this off and send Deal themselves
        self.deal_on_ready = deal_on_ready
        #: called with each freshly appended Outcome (not on rejections or duplicates);
        #: the timer workers use it to schedule the new state's deadline
        #: (workers/scheduler.py); a failure in it is logged, never undoes the commit
        self.on_commit = on_commit
        #: newest known state per match (shared with the timer workers of the process)
        self.state_cache = state_cache
        #: where a Sit's balance comes from (the engine's ledger; None: every player holds 0)
        self.balances = balances
        #: the registered rooms a CreateMatch may name (None: none registered)
        self.rooms = rooms
        #: draws the 32-byte server seed of each new match (docs/FAIRNESS.md): ``secrets``
        #: in production; tests and simulations pass a reproducible one
        self.server_seeds = server_seeds
        #: the one command path every aggregate shares (engine/service/command_service.py)
        self._commands: CommandService[MatchState, CommandBase] = CommandService(
            _MatchAggregate(self), _MatchStreams(self), cache=_MatchCache(state_cache) if state_cache is not None else None,
            retries=retries, reads_truth=lambda c: isinstance(c, (Sync, Say)))

    # -- loading ----------------------------------------------------------------
    def load_state(self, match_id: str) -> MatchState:
        """The current state: the cached state (or the snapshot, if any) + the events after it."""
        cache = self.state_cache
        if cache is None:
            return self._load_fresh(match_id)
        cached = cache.get(match_id)
        if cached is None:
            state = self._load_fresh(match_id)
            cache.put(state)
            return state
        tail = self.store.load(match_id, after=cached.version)
        if not tail:
            return cached
        state = replay(tail, cached)
        cache.put(state)
        return state

    def cached_version(self, match_id: str) -> int | None:
        """The version of the cached state of a match (a lower bound: versions only grow),
        without I/O; None when nothing is cached (or there is no cache)."""
        return None if self.state_cache is None else self.state_cache.version(match_id)

    def _load_fresh(self, match_id: str) -> MatchState:
        """Snapshot (if any) + the events after it (never the cache)."""
        base = None
        snap = self.store.load_snapshot(match_id)
        if snap is not None:
            try:
                base = decode_state(snap.state)
            except Exception:  # an unreadable snapshot: fall back to the full stream
                base = None
        after = base.version if base is not None else 0
        tail = self.store.load(match_id, after=after)
        return replay(tail, base, match_id=match_id)

    # -- commands ---------------------------------------------------------------
    def _context(self, command: CommandBase, state: MatchState | None = None) -> Context:
        now = int(self.clock())
        if isinstance(command, Sit):  # the balance from the engine's own ledger
            mode = state.config.mode if state is not None and state.config is not None else "points"
            balance = self.balances.balance(command.player, mode) if self.balances is not None else 0
            return Context(now_ms=now, balance=int(balance))
        if isinstance(command, CreateMatch):
            room = None
            if command.room is not None:
                room = self.rooms.get(command.room) if self.rooms is not None else None
            return Context(now_ms=now, room=room, server_seed=bytes(self.server_seeds()))
        wants_deck = isinstance(command, Deal) and command.hands is None
        # a test room (test_deals) waits for an explicit Deal: fixed hands from the operator channel
        test_room = state is not None and state.config is not None and state.config.test_deals
        wants_deck = wants_deck or (isinstance(command, Ready) and self.deal_on_ready and not test_room)
        if not wants_deck:
            return Context(now_ms=now, deal_on_ready=False)
        if state is not None and state.server_seed is not None:  # a fair match: decide computes the deck
            return Context(now_ms=now, deal_on_ready=self.deal_on_ready)
        deck = tuple(shuffled_deck(self.rng))
        randrange = getattr(self.rng, "randrange", None)
        if randrange is not None:
            lead = int(randrange(DEALT))
        else:  # the RandomSource protocol only promises shuffle
            idx = list(range(DEALT))
            self.rng.shuffle(idx)
            lead = idx[0]
        assert len(deck) == 2 * DECK_SIZE
        return Context(now_ms=now, deck=deck, lead_index=lead, deal_on_ready=self.deal_on_ready)

    def _stored_events_of(self, match_id: str, command_id: str) -> tuple[EventBase, ...]:
        # the command-id hash, then only that command's seqs: a refusal costs the same at
        # 10 events and at 30,000 (issue 13 §6); accepted commands never get here
        return tuple(self.store.command_events(match_id, command_id))

    def stored_events(self, match_id: str, command_id: str) -> tuple[EventBase, ...]:
        """The events command ``command_id`` appended to the match (empty: none, or unknown).
        Looks the id up in the store's command index (EventStore.command_events)."""
        return self._stored_events_of(match_id, command_id)

    def _verify(self, match_id: str, state: MatchState, actual: int | None = None) -> MatchState:
        """The current state of a match whose cached ``state`` may be stale.

        ``actual``: the stream's version reported by a WrongVersion (None: no hint).  A
        stream ahead of ``state`` is caught up from its tail, a stream at ``state``'s
        version confirms it; anything else (a stream behind the cache: deleted or
        rebuilt) is loaded afresh."""
        cache = self.state_cache
        if actual is None or actual > state.version:
            # the tail after the cached version (usually empty): a refusal checked so costs the
            # same at 10 events and at 30,000 (issue 13 §6)
            tail = self.store.load(match_id, after=state.version)
            if tail and tail[0].seq == state.version + 1 and (actual is None or tail[-1].seq >= actual):
                new = replay(tail, state)
                if cache is not None:
                    cache.put(new)
                return new
            if not tail and actual is None and state.version and self.store.version(match_id) == state.version:
                return state  # the cache is current
        fresh = self._load_fresh(match_id)
        if cache is not None:
            cache.replace(fresh)
        return fresh

    def execute(self, command: CommandBase) -> Outcome:
        """Run one command along the command service's one path (engine/service/
        command_service.py): the cached state or the store's, decide, append, then the
        cache, the snapshot and ``on_commit``."""
        out = self._commands.execute(command)
        if out.committed and out.before is not None:
            return self._committed(out.before, out.state, out.events, out.attempts)
        return Outcome(out.events, out.state, out.rejection, out.duplicate, out.attempts)

    def _committed(self, state: MatchState, new_state: MatchState, events: tuple[EventBase, ...],
                   attempt: int, published: bool = False, leftover: tuple[Write, ...] = ()) -> Outcome:
        """What follows an append of ``events`` on ``state``: the cache, the snapshot, the hook."""
        if self.state_cache is not None:
            self.state_cache.put(new_state)
        try:  # the append was the commit: nothing after it may make the command look failed
            self._maybe_snapshot(state, new_state)
        except Exception:  # the next multiple of snapshot_every writes one; loads replay a longer tail
            _log.exception("could not save the snapshot of match %s at v%d", state.match_id, new_state.version)
        outcome = Outcome(events, new_state, None, False, attempt, published, leftover)
        if self.on_commit is not None:
            try:
                self.on_commit(outcome)
            except Exception:  # the deadline sweeper re-fires what a failed hook missed
                _log.exception("on_commit hook failed for match %s", state.match_id)
        return outcome

    # -- several commands (one inbox read) --------------------------------------------------
    def execute_many(self, commands: Sequence[CommandBase], carry: Carry | None = None) -> list[Outcome | Exception]:
        """:meth:`execute` of each command, in order, with the appends pipelined (issue 13 §3).

        One result per command: its :class:`Outcome`, or the exception :meth:`execute`
        would have raised for it (a WrongVersion it gave up on, an engine bug, a Redis
        error).  Each command of a match whose state is cached is decided against that
        state and its append joins a round sent in one pipeline
        (:meth:`EventStore.append_many`); a match has at most one append in a round (a
        second command of the same match sends the round first, then is decided on the
        state the first one made).  An append the store did not take -- WrongVersion
        (another writer), a duplicate command id, an error reply -- is run again alone
        by :meth:`execute` (catch up, decide again: nothing is lost).  Everything else
        goes through :meth:`execute` at once: a refusal (checked there against the
        stream), a Sync, a match not cached.

        After a *transient* failure (:func:`engine.store.redis_errors.is_transient`:
        Redis down, OOM, …) nothing more is tried: that command and every later one
        not finished yet get that exception (the inbox leaves them pending; a command
        whose append did go through is a duplicate when it comes again).

        ``carry`` (the inbox's publisher): each appended round command's publication
        goes with its events, in the append's own step, when the store can write to the
        publisher's Redis (:meth:`EventStore.can_carry`): one round trip per read less,
        and no window between the events and their updates.  Those outcomes come back
        ``published`` (on a Redis Cluster with the ``leftover`` entries of streams another
        node holds, :meth:`EventStore.carries`); every other outcome (a refusal, a
        duplicate, a command run alone) is the caller's to publish, as without ``carry``."""
        if carry is not None and not self.store.can_carry(carry.redis):
            carry = None
        results: list[Outcome | Exception | None] = [None] * len(commands)
        round_: list[tuple[int, CommandBase, MatchState, tuple[EventBase, ...], MatchState]] = []
        failed: Exception | None = None
        #: matches with an outcome the caller publishes itself: nothing later of theirs is
        #: carried (it would reach their players' streams first)
        held: set[str] = set()
        #: streams an earlier round left to the caller (another Cluster node's): nothing later
        #: to them is carried either, should the slot map move meanwhile
        apart: set[str] = set()
        #: matches whose append hit a transient error of their node alone (NOREPLICAS,
        #: CLUSTERDOWN): their later commands wait with it, other matches go on
        stalled: dict[str, Exception] = {}
        for i, command in enumerate(commands):
            if failed is not None:
                results[i] = failed
                continue
            if command.match_id in stalled:
                results[i] = stalled[command.match_id]
                continue
            try:
                if any(p[1].match_id == command.match_id for p in round_):
                    failed = self._send_round(round_, results, carry, held, stalled, apart)
                    if command.match_id in stalled:
                        results[i] = stalled[command.match_id]
                        round_ = []
                        continue
                    round_ = []
                    if failed is not None:
                        results[i] = failed
                        continue
                planned = self._plan(command)
                if planned is None:
                    held.add(command.match_id)
                    results[i] = self.execute(command)
                else:
                    round_.append((i, command, *planned))
            except Exception as exc:
                results[i] = exc
                held.add(command.match_id)  # its dead letter is the caller's to publish
                if _node_bound(exc):
                    stalled[command.match_id] = exc  # its node's trouble: the other matches go on
                elif is_transient(exc):
                    failed = exc
        if failed is None:
            self._send_round(round_, results, carry, held, stalled, apart)
        else:
            for p in round_:  # decided, never sent: redelivered
                results[p[0]] = failed
        return [r if r is not None else RuntimeError("not executed") for r in results]

    def _plan(self, command: CommandBase) -> tuple[MatchState, tuple[EventBase, ...], MatchState] | None:
        """``(state, events, new state)`` of a command decided on its match's cached state,
        to append in a round; None when :meth:`execute` handles it alone (no cache, not
        cached, a Sync or a Say, a refusal, nothing to append).  A CreateMatch of a match
        not cached is decided on the empty match: the append expects version 0, so a match
        that exists after all (a retried or a second create) comes back WrongVersion or
        duplicate and is run alone, as a miss would have been."""
        cache = self.state_cache
        if cache is None or isinstance(command, (Sync, Say)):
            return None
        state = cache.get(command.match_id) if cache.version(command.match_id) is not None else None
        if state is None:
            if not isinstance(command, CreateMatch):
                return None  # not cached: execute loads it (and counts the one miss)
            state = MatchState(match_id=command.match_id)
        try:
            events, new_state = decide_and_apply(state, command, self._context(command, state))
        except Rejected:  # decided again by execute, and checked against the stream there
            return None
        if not events:
            return None
        return state, tuple(events), new_state

    def _send_round(self, round_: Sequence[tuple[int, CommandBase, MatchState, tuple[EventBase, ...], MatchState]],
                    results: list[Outcome | Exception | None], carry: Carry | None = None,
                    held: set[str] | None = None, stalled: dict[str, Exception] | None = None,
                    apart: set[str] | None = None) -> Exception | None:
        """Append a round in one pipeline and fill in its results; the transient failure
        that stopped it, if any (its unfinished commands then hold that exception).
        ``held``: matches whose commands carry nothing; a command run alone here joins them.
        A transient error reply of one request (its node's NOREPLICAS, CLUSTERDOWN, a lost
        connection to that node) is that command's result, not run again here, and its
        match goes into ``stalled``: the other nodes' commands stand."""
        if not round_:
            return None
        held = held if held is not None else set()
        apart = apart if apart is not None else set()
        #: per command: None (nothing offered), else its publication split in what the
        #: append carries and what is left for the caller (another Cluster node's streams)
        split: list[tuple[tuple[Write, ...], tuple[Write, ...]] | None] = []
        for _i, cmd, _state, events, new in round_:
            writes = None if cmd.match_id in held else self._carried(carry, cmd, events, new)
            if writes is None:
                split.append(None)
                continue
            local = [ok and w.stream not in apart
                     for w, ok in zip(writes, self.store.carries(cmd.match_id, [w.stream for w in writes]))]
            split.append((tuple(w for w, ok in zip(writes, local) if ok),
                          tuple(w for w, ok in zip(writes, local) if not ok)))
        requests = [AppendRequest(cmd.match_id, state.version, cmd.command_id, events, after.deadline(),
                                  () if parts is None else parts[0])
                    for (_i, cmd, state, events, after), parts in zip(round_, split)]
        try:
            replies = self.store.append_many(requests)
        except Exception as exc:
            if not is_transient(exc):
                raise
            for p in round_:
                results[p[0]] = exc
            return exc
        failed: Exception | None = None
        for (i, cmd, state, events, new), reply, parts in zip(round_, replies, split):
            if isinstance(reply, AppendResult) and not reply.duplicate:
                # carried: every entry it was given (none given: nothing to carry, all left over)
                published = parts is not None and (reply.wrote or not parts[0])
                results[i] = self._committed(state, new, events, 1, published,
                                             parts[1] if published and parts is not None else ())
                if not published:  # the caller publishes it after the appends: nothing later
                    held.add(cmd.match_id)  # of its match may be carried past it
                elif parts is not None:
                    apart.update(w.stream for w in parts[1])
                continue
            if failed is not None:
                results[i] = failed
                continue
            held.add(cmd.match_id)
            if _stalls(reply):
                results[i] = reply  # type: ignore[assignment]
                if stalled is not None:
                    stalled[cmd.match_id] = reply  # type: ignore[assignment]
                continue
            try:  # another writer, a retried command id, an error reply: this command alone
                if isinstance(reply, WrongVersion) and state.version:  # a create's empty match: execute loads it
                    self._verify(cmd.match_id, state, reply.actual)
                results[i] = self.execute(cmd)
            except Exception as exc:
                results[i] = exc
                if is_transient(exc):
                    failed = exc
        return failed

    @staticmethod
    def _carried(carry: Carry | None, command: CommandBase, events: tuple[EventBase, ...],
                 new: MatchState) -> tuple[Write, ...] | None:
        """The writes of ``command``'s publication a round's append may carry; None without
        ``carry``, or when the publisher cannot build them now (it publishes them afterwards)."""
        if carry is None:
            return None
        try:
            writes = carry.outputs_of(command, Outcome(events, new))
        except Exception:
            _log.exception("could not build the publication of %s with its append", command.command_id)
            return None
        return None if writes is None else tuple(writes)

    def _maybe_snapshot(self, old: MatchState, new: MatchState) -> None:
        n = self.snapshot_every
        if n > 0 and new.version // n > old.version // n:
            self.store.save_snapshot(new.match_id, Snapshot(version=new.version, state=encode_state(new)))
