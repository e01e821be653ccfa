"""Play quality from the player's own view: how much a chosen move gave away (the integrity
projection's quality signal, docs/INTEGRITY.md; handed to
:class:`projections.integrity.store.IntegrityProjection` as its ``evaluate``).

For one decision, :func:`regret` takes the player's :class:`~engine.tools.view.PlayerView`
(their hand, the table, the play in front, the opponent's card count -- never the
opponent's cards), the ``hard`` bot's candidate moves (:func:`engine.tools.bot.candidates`)
plus the move actually made, and plays every one out on the same opponent hands sampled
from the unseen cards with the plan policy on both sides (:func:`engine.tools.search.playout`,
common random numbers, the search ``hard`` plays with).  The estimate of the chance to win
of a move is the share of its playouts won; the regret is the best candidate's chance minus
the chosen move's (0 … 1).  A move that empties the hand has regret 0.

Reproducible: the samples come from a generator seeded with the match id and the event's
seq, so a rebuild gives the same figures.  The cost is bounded by ``nodes`` playout moves
per decision (:data:`NODES`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any

from engine.match.events import CardsPlayed, EventBase, Passed
from engine.match.evolve import apply
from engine.match.state import MatchState
from engine.rules.cards import rank_of
from engine.rules.combo import Combo
from engine.tools.bot import candidates
from engine.tools.plan import Counts, counts, remove
from engine.tools.search import Scoring, playout
from engine.tools.view import PlayerView, unseen_cards, view_of

__all__ = ["MAX_CANDIDATES", "NODES", "evaluate", "regret", "seeded"]

#: playout moves per evaluated decision (``hard`` plays with 1,000; a review needs fewer)
NODES = 400
#: candidates weighed per decision: ``hard``'s first ones (``normal``'s choice first) and the
#: move made -- fewer moves, more sampled opponent hands within the same budget
MAX_CANDIDATES = 4


def seeded(match_id: str, seq: int) -> random.Random:
    """The generator of one decision's samples (stable across processes and runs)."""
    digest = hashlib.blake2b(f"{match_id}:{seq}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def _key(c: Combo | None) -> tuple[object, ...]:
    return (None,) if c is None else (c.counts, c.kind)


def regret(view: PlayerView, chosen: Combo | None, rng: random.Random, nodes: int = NODES,
           scoring: Scoring | None = None) -> tuple[float, Combo | None]:
    """(the chance to win lost by ``chosen`` against the best candidate, that candidate).

    ``chosen`` None is a pass.  0 when the chosen move empties the hand or is the only one."""
    h: Counts = counts(view.hand)
    size = sum(h)
    if chosen is not None and chosen.size == size:
        return 0.0, chosen
    cands: list[Combo | None] = list(candidates(view, h))[:MAX_CANDIDATES]
    if _key(chosen) not in {_key(c) for c in cands}:
        cands[-1:] = [cands[-1], chosen] if len(cands) < MAX_CANDIDATES else [chosen]
    if len(cands) <= 1:
        return 0.0, chosen
    scoring = scoring or Scoring.of(view.config)
    pool = [rank_of(c) for c in unseen_cards(view)]
    k = min(view.opponent_cards, len(pool))
    twos, heavenly = view.chain_bomb_twos, view.heavenly
    start = (max((b.xiang or 0 for b in view.my_bombs), default=0),
             max((b.xiang or 0 for b in view.opponent_bombs), default=0))
    wins = [0] * len(cands)
    samples = 0
    spent = 0
    while spent < nodes:
        v = [0] * 15
        for c in rng.sample(pool, k):
            v[c] += 1
        opp = tuple(v)
        samples += 1
        for i, cand in enumerate(cands):
            if cand is None:
                value, n = playout([h, opp], [size, k], list(start), None, 1, heavenly, twos, scoring)
            elif cand.size == size:
                value, n = 1.0, 1
            else:
                x0 = max(start[0], cand.xiang or 0)
                value, n = playout([remove(h, cand.counts), opp], [size - cand.size, k], [x0, start[1]], cand, 1,
                                   heavenly, twos, scoring)
            wins[i] += value > 0
            spent += n
    rates = [w / samples for w in wins]
    mine = rates[[_key(c) for c in cands].index(_key(chosen))]
    best = max(range(len(cands)), key=lambda i: rates[i])
    return max(0.0, rates[best] - mine), cands[best]


def evaluate(events: Sequence[EventBase], picks: dict[int, str], nodes: int = NODES) -> list[dict[str, Any]]:
    """The regret of the decisions at the event seqs ``picks`` ({seq: player}) of one match:
    ``[{"seq", "player", "regret", "chosen", "best"}, …]`` (``chosen``/``best``: the moves
    as card-rank text, ``pass``), in seq order."""
    from engine.rules.moves import format_counts

    def text(c: Combo | None) -> str:
        return "pass" if c is None else format_counts(c.counts)

    out: list[dict[str, Any]] = []
    if not events:
        return out
    state = MatchState(match_id=events[0].match_id)
    scoring: Scoring | None = None
    last = max(picks, default=-1)
    for e in events:
        if e.seq > last:  # nothing picked later: no need to fold the rest
            break
        if e.seq in picks and isinstance(e, (CardsPlayed, Passed)) and e.player == picks[e.seq]:
            view = view_of(state, e.player)
            if view is not None and view.hand:
                chosen = e.reading.combo() if isinstance(e, CardsPlayed) else None
                if scoring is None:
                    scoring = Scoring.of(view.config)
                r, best = regret(view, chosen, seeded(e.match_id, e.seq), nodes, scoring)
                out.append({"seq": e.seq, "player": e.player, "regret": round(r, 4), "chosen": text(chosen),
                            "best": text(best)})
        state = apply(state, e)
    return out
