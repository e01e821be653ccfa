"""Every match that is not finished has a deadline, always (issue 23 item 8; R-13.1, R-13.2).

The invariant, checked after every single appended event over random orders of the seating
commands (Sit of three players, Ready, Leave, Disconnect/Reconnect, Escape, the ready and
turn timers), straight through the pure ``decide`` + ``apply``:

    a match that is not over (finished or abandoned) has a deadline.  (Between the second
    Ready and the deal of the same decision both are seated and ready: the next event is the
    HandDealt.)  Since issue 22 a seating match with nobody seated has its ready clock too: a
    match nobody completes ends with MatchAbandoned.

The incident it pins: the ready timer removed the first player before a delayed second Sit
arrived; the second player sat and was Ready, alone, and no deadline was set (the match
stayed in seating for good).  Now the ready clock runs while a seat is empty, and at its end
the lone ready player is removed ``no_opponent`` and the match is abandoned (issue 22).
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.match.commands import (
    Disconnect,
    Escape,
    Leave,
    Ready,
    ReadyTimeout,
    Reconnect,
    Sit,
    TurnTimeout,
)
from engine.match.decide import Context, decide
from engine.match.errors import Rejected
from engine.match.evolve import apply
from engine.match.state import MatchState
from engine.service.shuffle import seeded_random, shuffled_deck
from tests.test_decide import M, cfg

PLAYERS = ("a", "b", "c")
STEP = st.one_of(
    st.tuples(st.sampled_from(["sit", "ready", "leave", "disconnect", "reconnect", "escape"]),
              st.sampled_from(PLAYERS)),
    st.tuples(st.sampled_from(["ready_timeout", "turn_timeout"]), st.none()),
)


def waits_legitimately(s: MatchState, next_event: str | None = None) -> bool:
    """The invariant: over (finished or abandoned), or a deadline, or both seated and ready with
    the deal as the next event of the same decision."""
    if s.over or s.deadline() is not None:
        return True
    if s.phase != "seating":
        return False
    return all(x is not None and x.ready for x in s.seats) and next_event == "HandDealt"


def _command(m: M, step: tuple[str, str | None]) -> object:
    kind, player = step
    if kind == "ready_timeout":
        return m.cmd(ReadyTimeout, version=m.state.version)
    if kind == "turn_timeout":
        return m.cmd(TurnTimeout, version=m.state.version)
    cls = {"sit": Sit, "ready": Ready, "leave": Leave, "disconnect": Disconnect, "reconnect": Reconnect,
           "escape": Escape}[kind]
    return m.cmd(cls, player=player)


def run(steps: list[tuple[str, str | None]], seed: int) -> M:
    m = M(cfg(ready_seconds=30), seat=False)
    assert waits_legitimately(m.state)
    for step in steps:
        m.now += 1000
        ctx = Context(now_ms=m.now, deck=shuffled_deck(seeded_random(seed)), lead_index=seed % 54)
        try:
            events = decide(m.state, _command(m, step), ctx)
        except Rejected:
            continue
        for i, e in enumerate(events):  # after every appended event, not only after every command
            m.state = apply(m.state, e)
            m.history.append(e)
            following = events[i + 1].type if i + 1 < len(events) else None
            assert waits_legitimately(m.state, following), (
                f"no deadline after {e.type} ({step}): phase {m.state.phase}, seats "
                f"{[(x.player, x.ready) if x else None for x in m.state.seats]}")
    return m


@settings(max_examples=300, deadline=None)
@given(st.lists(STEP, max_size=40), st.integers(0, 10_000))
@example([("sit", "a"), ("sit", "b"), ("ready", "a"), ("ready", "b"), ("turn_timeout", None)], 0)  # dealt
@example([("sit", "a"), ("ready_timeout", None), ("sit", "b"), ("ready", "b"), ("sit", "c"), ("ready", "c")], 1)
def test_a_match_never_waits_without_a_deadline(steps, seed) -> None:
    run(steps, seed)


def test_a_sit_after_a_ready_timer_removal_finds_the_match_over() -> None:  # the incident, R-13.2
    m = run([("sit", "a"), ("ready_timeout", None), ("sit", "b"), ("ready", "b")], seed=1)
    assert [(e.type, getattr(e, "reason", None)) for e in m.history[1:]] == [
        ("PlayerSeated", None), ("PlayerRemoved", "not_ready"), ("MatchAbandoned", "not_ready")]
    assert m.state.phase == "abandoned" and m.state.deadline() is None  # the late Sit was refused
    m = run([("sit", "b"), ("ready", "b"), ("ready_timeout", None)], seed=1)
    assert [(e.type, e.reason) for e in m.history[-2:]] == [("PlayerRemoved", "no_opponent"),
                                                            ("MatchAbandoned", "seat_empty")]
    assert m.state.deadline() is None and waits_legitimately(m.state)
    m = run([], seed=1)  # nobody ever sits: the clock runs from the creation
    assert m.state.deadline() is not None and m.state.deadline().kind == "ready"


def test_the_property_can_fail() -> None:
    """A positive control: the pre-fix state (one ready player, no deadline) breaks the invariant."""
    m = run([("sit", "a"), ("ready", "a")], seed=1)
    stuck = MatchState(**{**{f: getattr(m.state, f) for f in m.state.__dataclass_fields__},
                          "deadline_at": None, "deadline_kind": None})
    assert not waits_legitimately(stuck)
