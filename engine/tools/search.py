"""The ``hard`` bot's search: determinized Monte Carlo over the cards the player cannot see.

For one decision, :func:`search` takes a few candidate plays, then repeatedly deals the
opponent a hand sampled from the unseen cards (108 minus the own hand minus the table,
:func:`engine.tools.view.unseen_cards`: the opponent's hand and the set-aside together,
R-1.3) of the size the view shows, and plays every candidate out to the end of the match
with the plan policy (:func:`engine.tools.plan.follow_plan`) on both sides.  Each
playout is scored with the room's settlement terms (R-7 kou, R-8.4 doubling, R-8.5
contribution); the candidate with the best mean wins.  Every candidate is played on the
same sampled hands (common random numbers), so the comparison is fair on few samples.

The search stops at a *node budget* (playout moves, reproducible: the same seed and the
same view give the same play on any machine) and, only as a safety cap, at a time budget.
It reads nothing but the :class:`~engine.tools.view.PlayerView`.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.config import RoomConfig
from engine.rules.cards import rank_of
from engine.rules.combo import Combo, HeavenlyPosition
from engine.tools.plan import Counts, follow_plan, plan, remove
from engine.tools.view import PlayerView, unseen_cards

__all__ = ["Budget", "Scoring", "search"]

_MAX_MOVES = 400  # a playout never runs longer (both hands shrink every play; passes alternate)


@dataclass(frozen=True, slots=True)
class Budget:
    """How much one decision may search: ``nodes`` playout moves (the reproducible limit)
    and ``ms`` milliseconds of the thread's CPU time (a cap for a slow machine only; CPU
    time, so a busy machine does not cut a search short and change its answer)."""

    nodes: int = 1000
    ms: float = 80.0


@dataclass(frozen=True, slots=True)
class Scoring:
    """The settlement terms a playout is scored with, in units of the base X (R-8.6)."""

    kou: tuple[int, int, int] = (1, 2, 4)       # a: flat, single, double
    single_from: int = 7
    double_from: int = 12
    contribution: tuple[int, ...] = (0,) * 13   # c by xiang 0..12
    doubling: tuple[int, ...] = (1,) * 13       # b by xiang 0..12

    @classmethod
    def of(cls, config: RoomConfig | None) -> Scoring:
        if config is None:
            from engine.config import load_config
            config = load_config("points")
        k = config.kou
        c = tuple(config.contribution.get(x, 0) if x >= 4 else 0 for x in range(13))
        b = tuple(config.doubling.get(x, 1) if x >= 4 else 1 for x in range(13))
        return cls((k.flat, k.single, k.double), k.single_from, k.double_from, c, b)

    def amount(self, loser_left: int, winner_xiang: int, loser_xiang: int) -> int:
        """What the winner receives: X·a·b + X·(c_W − c_L), with X = 1."""
        a = self.kou[2] if loser_left >= self.double_from else self.kou[1] if loser_left >= self.single_from \
            else self.kou[0]
        w, lo = min(winner_xiang, 12), min(loser_xiang, 12)
        return a * self.doubling[w] + self.contribution[w] - self.contribution[lo]


def playout(hands: list[Counts], sizes: list[int], xiang: list[int], prev: Combo | None, turn: int,
            heavenly: HeavenlyPosition, twos: bool, scoring: Scoring) -> tuple[float, int]:
    """Play the match out with the plan policy on both sides; seat 0 is the searcher.

    ``prev`` is the play in front of ``turn`` (None: ``turn`` leads).  Returns (the value
    for seat 0: +1 a win / −1 a loss plus a tenth of the amount won or lost, moves made).
    """
    plans = [plan(hands[0], twos), plan(hands[1], twos)]
    moves = 0
    while moves < _MAX_MOVES:
        p = turn
        c = follow_plan(hands[p], plans[p], prev, sizes[1 - p], heavenly, twos)
        moves += 1
        turn = 1 - p
        if c is None:
            prev = None  # a pass ends the trick; the other player leads
            continue
        hands[p] = remove(hands[p], c.counts)
        sizes[p] -= c.size
        if any(g is c for g in plans[p]):
            plans[p] = [g for g in plans[p] if g is not c]
        else:
            plans[p] = plan(hands[p], twos)
        if c.xiang is not None and c.xiang > xiang[p]:
            xiang[p] = c.xiang
        if sizes[p] == 0:
            amount = scoring.amount(sizes[1 - p], xiang[p], xiang[1 - p])
            return ((1.0 if p == 0 else -1.0) * (1 + 0.1 * amount), moves)
        prev = c
    return (0.0, moves)


def _sample(pool: Sequence[int], k: int, rng: random.Random) -> Counts:
    v = [0] * 15
    for c in rng.sample(pool, k):
        v[c] += 1
    return tuple(v)


def search(view: PlayerView, hand: Counts, candidates: Sequence[Combo | None], rng: random.Random,
           budget: Budget, start_xiang: tuple[int, int], scoring: Scoring,
           clock: Callable[[], float] = time.thread_time) -> int:
    """The index of the chosen candidate (None in ``candidates`` = pass).

    The first candidate is the default (the ``normal`` choice): another one is chosen
    only when its playouts beat the default's on the same samples by more than one
    standard error of the paired difference, so noise never replaces a sound play.
    ``start_xiang``: the effective xiang each side has so far (the player's, the
    opponent's), from the bombs in the view.
    """
    if len(candidates) <= 1:
        return 0
    pool = [rank_of(c) for c in unseen_cards(view)]
    k = min(view.opponent_cards, len(pool))
    values: list[list[float]] = [[] for _ in candidates]
    nodes = 0
    stop = clock() + budget.ms / 1000.0
    size = sum(hand)
    twos, heavenly = view.chain_bomb_twos, view.heavenly
    while True:
        opp = _sample(pool, k, rng)
        for i, cand in enumerate(candidates):
            if cand is None:  # pass: the opponent leads the next trick
                v, n = playout([hand, opp], [size, k], list(start_xiang), None, 1, heavenly, twos, scoring)
            else:
                if cand.size == size:
                    return i
                x0 = max(start_xiang[0], cand.xiang or 0)
                v, n = playout([remove(hand, cand.counts), opp], [size - cand.size, k],
                               [x0, start_xiang[1]], cand, 1, heavenly, twos, scoring)
            values[i].append(v)
            nodes += n
        if nodes >= budget.nodes or clock() >= stop:
            break
    base = values[0]
    best, best_gain = 0, 0.0
    for i in range(1, len(candidates)):
        diffs = [a - b for a, b in zip(values[i], base)]
        gain = sum(diffs) / len(diffs)
        if len(diffs) > 1 and gain > 0:
            sd = statistics.pstdev(diffs)
            if gain > sd / math.sqrt(len(diffs) - 1) and gain > best_gain:
                best, best_gain = i, gain
    return best
