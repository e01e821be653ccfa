"""Replaying a match: fold :func:`engine.match.evolve.apply` over its events, and
check a stored stream for consistency.

:func:`check_stream` is what ``shuangkou replay`` and the property tests use
to audit a match: envelope (seq 1, 2, 3… with no gap, one match id, the
first event MatchCreated), card accounting (R-1.1: from the deal on, the
hands, the table and the set-aside cards are the 108 cards, each once, at
every step) and the rules of each play (the cards were in the player's hand,
it was their turn, the recorded reading is a reading of those cards (R-3,
R-4) and beats the play in front of it (R-5), passes only when following
(R-6.1), a finish by emptying a hand (R-6.3) with the right cards left and
kou (R-7)).  A stream is untrusted input here: a card id that is no card, a
recorded reading that is no reading, an event ``apply`` cannot take are
reported as problems, never raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.rules.cards import NUM_CARDS, format_ranks_lenient
from engine.rules.combo import Combo, beats
from engine.match.events import (
    CardsPlayed,
    EventBase,
    HandDealt,
    MatchAbandoned,
    MatchCreated,
    MatchFinished,
    Passed,
)
from engine.match.evolve import apply
from engine.match.state import MatchState


def replay(events: Iterable[EventBase], snapshot_state: MatchState | None = None,
           match_id: str | None = None) -> MatchState:
    """The state after ``events`` (applied on top of ``snapshot_state`` when given).

    Events at or below the snapshot's version are skipped, so "snapshot + the
    whole stream" and "snapshot + tail" give the same state.
    """
    events = list(events)
    if snapshot_state is not None:
        state = snapshot_state
    else:
        mid = match_id or (events[0].match_id if events else "")
        state = MatchState(match_id=mid)
    for e in events:
        if e.seq <= state.version:
            continue
        state = apply(state, e)
    return state


def check_stream(events: Sequence[EventBase]) -> list[str]:
    """Readable problems found in a whole stream (empty list: the stream is sound)."""
    problems: list[str] = []
    if not events:
        return ["the stream is empty"]
    mid = events[0].match_id
    if not isinstance(events[0], MatchCreated):
        problems.append(f"seq {events[0].seq}: the first event is {events[0].__class__.__name__}, not MatchCreated")
    state = MatchState(match_id=mid)
    for i, e in enumerate(events):
        where = f"seq {e.seq} ({e.__class__.__name__})"
        if e.seq != i + 1:
            problems.append(f"{where}: expected seq {i + 1} (gap or reordering)")
        if e.match_id != mid:
            problems.append(f"{where}: match id {e.match_id!r} differs from {mid!r}")
        if state.over:
            problems.append(f"{where}: event after the match {state.phase}")
        problems.extend(f"{where}: {p}" for p in _rule_problems(state, e))
        try:
            state = apply(state, e)
        except Exception as exc:  # apply never fails on decide's events: report it
            why = "; ".join(x.strip() for x in str(exc).splitlines() if x.strip()) or repr(exc)
            problems.append(f"{where}: apply failed: {type(exc).__name__}: {why}")
            break
        if state.phase in ("playing", "finished"):
            problems.extend(f"{where}: {p}" for p in _card_problems(state))
    return problems


def _card_problems(state: MatchState) -> list[str]:
    pools = [s.hand for s in state.seats if s is not None] + [state.table, state.set_aside]
    allc = [c for pool in pools for c in pool]
    out = []
    if len(allc) != NUM_CARDS:
        out.append(f"cards accounted {len(allc)} != {NUM_CARDS} (hands + table + set aside)")
    seen: set[int] = set()
    dup = sorted({c for c in allc if c in seen or seen.add(c)})  # type: ignore[func-returns-value]
    if dup:
        out.append(f"cards counted twice: {format_ranks_lenient(dup)}")
    bad = [c for c in allc if not 0 <= c < NUM_CARDS]
    if bad:
        out.append(f"invalid card ids {bad}")
    return out


def _readings(cards: Sequence[int], state: MatchState) -> list[Combo]:
    """The readings of recorded cards (none when an id is no card)."""
    from engine.rules.classify import interpretations  # light import path for the CLI

    try:
        return interpretations(list(cards), heavenly=state.heavenly, chain_bomb_twos=state.chain_bomb_twos)
    except ValueError:
        return []


def _rule_problems(state: MatchState, e: EventBase) -> list[str]:
    out: list[str] = []
    if isinstance(e, HandDealt):
        if state.phase != "seating":
            out.append(f"deal in phase {state.phase}")
        if any(s is None for s in state.seats):
            out.append("deal with an empty seat")
    elif isinstance(e, (CardsPlayed, Passed)):
        if state.phase != "playing":
            return [f"{e.type} in phase {state.phase}"]
        i = state.seat_of(e.player)
        if i is None:
            return [f"{e.player!r} is not seated"]
        if state.turn != i:
            out.append(f"{e.player!r} acted out of turn")
        if isinstance(e, Passed):
            if state.to_beat is None:
                out.append(f"{e.player!r} passed while leading (R-6.1)")
            return out
        hand = set(state.seat(i).hand)
        text = format_ranks_lenient(e.cards)
        missing = [c for c in e.cards if c not in hand]
        if missing or len(set(e.cards)) != len(e.cards):
            out.append(f"{e.player!r} played cards not in hand: {format_ranks_lenient(missing) or 'duplicates'}")
        combo = e.reading.combo()
        if combo not in _readings(e.cards, state):
            out.append(f"reading {combo.describe()} is not a reading of {text} (R-3, R-4)")
            return out  # R-5 compares readings only
        prev = state.to_beat
        if (prev is not None and prev.combo in _readings(prev.cards, state)
                and not beats(combo, prev.combo, state.heavenly)):
            out.append(f"{text} ({combo.describe()}) does not beat "
                       f"{format_ranks_lenient(prev.cards)} ({prev.combo.describe()}) (R-5)")
    elif isinstance(e, MatchAbandoned):
        if state.phase != "seating":
            out.append(f"abandoned in phase {state.phase} (only a match not yet dealt is abandoned)")
    elif isinstance(e, MatchFinished):
        if state.phase != "playing":
            out.append(f"finish in phase {state.phase}")
            return out
        for p, n in e.cards_left.items():
            i = state.seat_of(p)
            if i is None:
                out.append(f"cards_left names {p!r}, not seated")
            elif len(state.seat(i).hand) != n:
                out.append(f"cards_left[{p}] = {n} but the hand holds {len(state.seat(i).hand)}")
        if e.reason == "out":
            wi = state.seat_of(e.winner)
            if wi is not None and state.seat(wi).hand:
                out.append(f"winner {e.winner!r} still holds cards (R-6.3)")
            if state.config is not None and e.kou != state.config.kou.kou_of(e.cards_left.get(e.loser, 0)):
                out.append(f"kou {e.kou} does not match {e.cards_left.get(e.loser)} cards left (R-7)")
    return out
