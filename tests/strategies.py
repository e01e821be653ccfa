"""Hypothesis strategies and a driver that plays random legal matches.

A match is driven through :class:`engine.service.service.MatchService` on an
:class:`engine.store.memory.InMemoryEventStore`: random deals come from seeded
shuffles (R-1.5), and every step picks at random among the legal plays of
the player on turn (``engine.rules.moves.legal_plays``), a pass, a turn timeout, a
trusteeship request or cancel, a disconnect or reconnect, a rare escape, and
some deliberately bad commands (cards not held, not a combination, not your
turn, stale timers) so the rejection path is walked too.  When the player on
turn is in trusteeship the driver sends what the timer worker would:
``TrusteeAct`` for the current version.

``on_step(step)`` is called after every command with the state before, the
command and the :class:`engine.service.service.Outcome`, so properties can be checked
at every step.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from engine.service.shuffle import seeded_random, seeded_server_seeds
from engine.match.commands import (
    CancelTrustee,
    CommandBase,
    CreateMatch,
    Disconnect,
    Escape,
    Pass,
    Play,
    Ready,
    Reconnect,
    RequestTrustee,
    Sit,
    TrusteeAct,
    TurnTimeout,
)
from engine.config import RoomConfig, load_config
from engine.rules.moves import legal_plays, pick_cards
from engine.service.service import FixedBalances, MatchService, Outcome
from engine.match.state import MatchState
from engine.store.memory import InMemoryEventStore

START = 1_700_000_000_000


class Clock:
    def __init__(self, now: int = START):
        self.now = now

    def __call__(self) -> int:
        return self.now


@dataclass(frozen=True)
class MatchSpec:
    """What a random match is made of (hypothesis draws these)."""

    seed: int
    mode: str = "points"
    escape_policy: str = "forfeit"
    reclaim: bool = False
    chaos: float = 0.15  # share of steps that are not a plain legal play/pass
    snapshot_every: int = 7

    def config(self) -> RoomConfig:
        base = load_config(self.mode)
        rec = base.to_record()
        rec.update(escape_policy=self.escape_policy, reclaim_after_reconnect=self.reclaim)
        return RoomConfig.from_record(rec)


@dataclass
class Step:
    before: MatchState
    command: CommandBase
    outcome: Outcome
    store_version_before: int


@dataclass
class MatchRun:
    spec: MatchSpec
    store: InMemoryEventStore
    service: MatchService
    state: MatchState
    steps: list[Step] = field(default_factory=list)
    players: tuple[str, str] = ("a", "b")

    @property
    def match_id(self) -> str:
        return self.state.match_id


def match_specs(max_chaos: float = 0.3) -> st.SearchStrategy[MatchSpec]:
    return st.builds(
        MatchSpec,
        seed=st.integers(0, 2**32 - 1),
        mode=st.sampled_from(["points", "wealth"]),
        escape_policy=st.sampled_from(["forfeit", "trustee"]),
        reclaim=st.booleans(),
        chaos=st.floats(0.0, max_chaos),
        snapshot_every=st.integers(1, 20),
    )


def play_match(spec: MatchSpec, on_step: Callable[[Step], Any] | None = None,
               max_steps: int = 600, match_id: str = "m1", reproducible: bool = True) -> MatchRun:
    """Play a random match of ``spec`` through a :class:`MatchService` on an in-memory store.
    ``reproducible`` (the default): the server seed drawn from ``spec.seed`` too, so the whole
    match, its deal and commitment included, is the same on every run and a failing example
    replays; False: the service's own random server seeds, as in production."""
    rnd = random.Random(spec.seed)
    clock = Clock()
    store = InMemoryEventStore()
    balance = 0 if spec.mode == "points" else 1000
    balances = FixedBalances({p: balance + rnd.randint(0, 5000) for p in ("a", "b")})
    seeds = {"server_seeds": seeded_server_seeds(spec.seed)} if reproducible else {}
    service = MatchService(store, clock, seeded_random(spec.seed), snapshot_every=spec.snapshot_every,
                           balances=balances, **seeds)
    run = MatchRun(spec, store, service, MatchState(match_id=match_id))
    counter = [0]

    def send(cls: type[CommandBase], **fields: Any) -> Outcome:
        counter[0] += 1
        clock.now += rnd.randint(1, 3000)
        cmd = cls(command_id=f"c{counter[0]}", match_id=match_id, **fields)
        before = run.state
        v0 = store.version(match_id)
        out = service.execute(cmd)
        run.state = out.state
        step = Step(before, cmd, out, v0)
        run.steps.append(step)
        if on_step is not None:
            on_step(step)
        return out

    cfg = spec.config()
    send(CreateMatch, config=cfg.to_record())
    a, b = run.players
    send(Sit, player=a)
    send(Sit, player=b)
    send(Ready, player=a)
    send(Ready, player=b)

    for _ in range(max_steps):
        s = run.state
        if s.phase != "playing":
            break
        seat = s.seat(s.turn)  # type: ignore[arg-type]
        if seat.trusteed:
            d = s.deadline()
            if d is not None:
                clock.now = max(clock.now, d.at_ms)
            send(TrusteeAct, version=s.version)
            continue
        if rnd.random() < spec.chaos:
            _chaos(rnd, run, send)
            continue
        prev = s.to_beat.combo if s.to_beat else None
        plays = legal_plays(list(seat.hand), prev, s.heavenly)
        if prev is not None and (not plays or rnd.random() < 0.15):
            send(Pass, player=seat.player)
            continue
        combo = rnd.choice(plays)
        cards = pick_cards(seat.hand, combo.counts)
        if rnd.random() < 0.5:
            send(Play, player=seat.player, cards=cards, reading_kind=combo.kind, reading_rank=combo.rank)
        else:
            send(Play, player=seat.player, cards=cards)
    return run


def _chaos(rnd: random.Random, run: MatchRun, send: Callable[..., Outcome]) -> None:
    s = run.state
    me = s.seat(s.turn)  # type: ignore[arg-type]
    other = s.seat(1 - s.turn)  # type: ignore[operator]
    who = rnd.choice([me, other])
    r = rnd.random()
    if r < 0.25:
        send(TurnTimeout, version=s.version)
    elif r < 0.35:
        send(TurnTimeout, version=s.version - rnd.randint(1, 3))  # stale timer
    elif r < 0.45:
        send(RequestTrustee, player=who.player)
    elif r < 0.52:
        send(CancelTrustee, player=who.player)
    elif r < 0.60:
        send(Disconnect, player=who.player)
    elif r < 0.70:
        send(Reconnect, player=who.player)
    elif r < 0.73:
        send(Escape, player=who.player)
    elif r < 0.80:
        send(Play, player=other.player, cards=(other.hand[0],))  # not your turn
    elif r < 0.88:
        missing = sorted(set(range(108)) - set(me.hand))
        send(Play, player=me.player, cards=(rnd.choice(missing),))  # not in hand
    elif r < 0.94:
        send(Play, player=me.player, cards=tuple(me.hand[:2]) if len(me.hand) >= 2 else me.hand)
    else:
        send(Pass, player=me.player)
