"""The suspicion score of a pair of accounts (pure functions over match records).

A pair {A, B} is looked at in both directions: *giver* → *receiver*.  For a direction the
score is the sum of the surprises of a few per-match signals of the giver (docs/INTEGRITY.md):
how unlikely the giver's count against the receiver is (one-sided binomial tail,
``-log10``, capped per signal: :data:`CAPS`) when the giver's true rate is the rate they show against
everyone else, shrunk towards the population's rate with a weight of :data:`PRIOR_MATCHES`
matches and never below the signal's floor:

======== ==================================================================== =====
signal   a match counts when the giver …                                      floor
======== ==================================================================== =====
escape   escaped                                                              0.02
trustee  asked for trusteeship                                                0.02
win_pass passed while a play that beats would have emptied the hand          0.02
conceded lost after passing at every chance (3 or more) where a non-bomb      0.01
         play would have beaten
passive  passed at least 3 times, and at least half the times, a non-bomb     0.05
         play would have beaten
heavy    lost with the double kou (12 cards or more left, R-7)               0.10
held     lost still holding a bomb                                            0.10
broke    split a bomb into a smaller combination                              0.10
======== ==================================================================== =====

plus ``quality``: the giver's sampled regrets against the receiver against their regrets
against everyone else (or the population's, with fewer than 8 of their own), one-sided
Mann-Whitney U, ``-log10 p``, capped.  The outcome signals (``heavy``, ``held``, ``broke``)
add at most :data:`OUTCOMES_CAP` together; with the quality that stays below the default
threshold, so a pair is flagged only with a choice signal of the giver's behind it.

An escape's surprise counts twice (:data:`WEIGHTS`: it forfeits 12 X at once, R-12).
A direction scores 0 until the giver lost :data:`MIN_LOSSES` matches to the receiver: a
player who loses nothing dumps nothing (the net coins moved are reported with the evidence,
not required: a dumper who also wins honestly may still come out even).  The share of the
giver's matches that are against the receiver is reported, never scored (friends at a
private table play only each other).  The pair's score is its higher direction's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CAP", "CAPS", "DEFAULT_MIN_SCORE", "OUTCOMES", "OUTCOMES_CAP", "FLOORS", "MIN_LOSSES", "MIN_MATCHES", "WEIGHTS", "PRIOR_MATCHES", "SIGNALS", "Rates",
           "indicators", "population", "score_pair", "surprise"]

#: the default ``--min-score`` of ``shuangkou integrity report`` (fixed before the benchmark run)
DEFAULT_MIN_SCORE = 10.0
#: the largest surprise one signal adds
CAP = 12.0
#: a direction needs this many matches of the pair before it scores
MIN_MATCHES = 3
#: the population's rate weighs as much as this many of the giver's own matches
PRIOR_MATCHES = 10.0
#: the lowest base rate a signal is tested against (people escape, misclick, play badly)
FLOORS: dict[str, float] = {"escape": 0.02, "trustee": 0.02, "win_pass": 0.02, "conceded": 0.01, "passive": 0.05,
                            "heavy": 0.10, "held": 0.10, "broke": 0.10}
SIGNALS: tuple[str, ...] = tuple(FLOORS)
#: an escape forfeits 12 X at once (R-12), the largest transfer one choice makes: its surprise counts twice
WEIGHTS: dict[str, float] = {"escape": 2.0}
#: a direction needs this many matches the giver lost to the receiver before it scores
MIN_LOSSES = 3
#: the most one signal adds: what the giver chose (escapes, passes, trusteeship) up to
#: :data:`CAP`; outcomes a weaker player shows too (heavy losses, bombs held or split) and
#: the sampled quality up to a third of it
CAPS: dict[str, float] = {"escape": CAP, "trustee": CAP, "win_pass": CAP, "conceded": CAP, "passive": CAP,
                          "heavy": CAP / 3, "held": CAP / 3, "broke": CAP / 3, "quality": CAP / 3}
#: the outcome signals together add at most this: with the quality they stay below the flag
#: threshold, so only a choice of the giver's can flag a pair (a weak player is no dumper)
OUTCOMES: tuple[str, ...] = ("heavy", "held", "broke")
OUTCOMES_CAP = CAP / 3
_QUALITY_MIN = 4
_BASELINE_MIN = 8


def indicators(row: dict[str, Any]) -> dict[str, bool]:
    """Which signals one player's row of a match record (features.match_record ``f``) shows.

    >>> sorted(k for k, v in indicators({"esc": 1, "lost": 1, "left": 14}).items() if v)
    ['escape', 'heavy']
    """
    vpass, fopp = int(row.get("vpass", 0)), int(row.get("fopp", 0))
    lost = bool(row.get("lost"))
    return {"escape": int(row.get("esc", 0)) > 0,
            "trustee": int(row.get("treq", 0)) > 0,
            "win_pass": int(row.get("wpass", 0)) > 0,
            "conceded": lost and vpass >= 3 and vpass >= fopp,
            "passive": vpass >= 3 and 2 * vpass >= fopp,
            "heavy": lost and int(row.get("left", 0)) >= 12,
            "held": lost and bool(row.get("held")),
            "broke": int(row.get("broke", 0)) > 0}


def surprise(k: int, n: int, p: float, cap: float = CAP) -> float:
    """``-log10 P(X ≥ k)`` for X ~ Binomial(n, p), capped at ``cap`` (0 when k is at most
    the expected count: nothing unusual, and no tail to compute).

    >>> surprise(0, 20, 0.1), surprise(20, 20, 0.5) == CAP
    (0.0, False)
    >>> round(surprise(20, 20, 0.5), 2)
    6.02
    """
    if k <= 0 or n <= 0 or k <= n * p:
        return 0.0
    return min(cap, _tail(k, n, round(min(max(p, 1e-9), 1.0), 4)))


@functools.lru_cache(maxsize=65536)
def _tail(k: int, n: int, p: float) -> float:
    from scipy.stats import binom

    tail = float(binom.sf(k - 1, n, p))
    return 99.0 if tail <= 0 else max(0.0, -math.log10(tail))


@dataclass
class Rates:
    """Per signal (matches showing it, matches) over a set of player rows, plus regrets."""

    counts: dict[str, list[int]] = field(default_factory=lambda: {s: [0, 0] for s in SIGNALS})
    regrets: list[float] = field(default_factory=list)

    def add(self, row: dict[str, Any], regrets: Iterable[float] = ()) -> None:
        for s, on in indicators(row).items():
            self.counts[s][0] += int(on)
            self.counts[s][1] += 1
        self.regrets.extend(regrets)

    def rate(self, s: str) -> float:
        k, n = self.counts[s]
        return k / n if n else 0.0

    @property
    def matches(self) -> int:
        return self.counts[SIGNALS[0]][1]


def _regrets(rec: dict[str, Any], player: str) -> list[float]:
    return [float(q[1]) for q in (rec.get("q") or {}).get(player, [])]


def population(records: Iterable[dict[str, Any]]) -> Rates:
    """Every person's rows of ``records`` together (the prior of every signal)."""
    pop = Rates()
    for rec in records:
        for p, row in rec["f"].items():
            pop.add(row, _regrets(rec, p))
    return pop


def _direction(giver: str, receiver: str, vs: Sequence[dict[str, Any]], base: Rates, pop: Rates) -> dict[str, Any]:
    mine = Rates()
    losses = 0
    net = 0
    flow_x = 0.0
    for rec in vs:
        row = rec["f"][giver]
        mine.add(row, _regrets(rec, giver))
        net += int(row.get("net", 0))
        losses += int(bool(row.get("lost")))
        flow_x += -int(row.get("net", 0)) / max(1, int(rec.get("X", 1)))
    n = mine.matches
    signals: dict[str, dict[str, Any]] = {}
    total = 0.0
    outcomes = 0.0
    for s in SIGNALS:
        k = mine.counts[s][0]
        kb, nb = base.counts[s]
        p0 = max(FLOORS[s], (kb + PRIOR_MATCHES * pop.rate(s)) / (nb + PRIOR_MATCHES))
        sp = min(CAPS[s], WEIGHTS.get(s, 1.0) * surprise(k, n, p0, CAPS[s]))
        signals[s] = {"k": k, "n": n, "base_rate": round(p0, 4), "surprise": round(sp, 2)}
        if s in OUTCOMES:
            outcomes += sp
        else:
            total += sp
    total += min(OUTCOMES_CAP, outcomes)
    q: dict[str, Any] = {"n": len(mine.regrets), "mean": _mean(mine.regrets), "baseline_n": len(base.regrets),
                         "baseline_mean": _mean(base.regrets), "surprise": 0.0}
    ref = base.regrets if len(base.regrets) >= _BASELINE_MIN else pop.regrets
    q["baseline"] = "own" if ref is base.regrets else "population"
    if len(mine.regrets) >= _QUALITY_MIN and len(ref) >= _BASELINE_MIN:
        from scipy.stats import mannwhitneyu

        pval = float(mannwhitneyu(mine.regrets, ref, alternative="greater").pvalue)
        q["surprise"] = round(CAPS["quality"] if pval <= 0 else min(CAPS["quality"], max(0.0, -math.log10(pval))), 2)
        total += q["surprise"]
    signals["quality"] = q
    scored = n >= MIN_MATCHES and losses >= MIN_LOSSES
    return {"giver": giver, "receiver": receiver, "matches": n, "losses": losses, "net_coins": -net, "net_x": round(flow_x, 2),
            "score": round(total, 2) if scored else 0.0, "raw_score": round(total, 2), "signals": signals}


def _mean(xs: Sequence[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def score_pair(a: str, b: str, records_by_player: Mapping[str, Sequence[dict[str, Any]]], pop: Rates,
               since_ts: int | None = None) -> dict[str, Any]:
    """The evidence and score of the pair {a, b} from every record of either player.

    ``records_by_player``: each player's match records (against anyone); ``since_ts``: only
    matches after this (ms) count as the pair's evidence (a dismissal: new evidence only);
    the baselines always use every match.  Returns ``{"a", "b", "matches", "share", "score",
    "directions": [giver→receiver evidence, …], "top"}``."""
    share: dict[str, float] = {}
    out_dirs = []
    vs_all: list[dict[str, Any]] = []
    for giver, receiver in ((a, b), (b, a)):
        recs = records_by_player.get(giver, ())
        vs_all = [r for r in recs if receiver in r["players"]]
        others = [r for r in recs if receiver not in r["players"]]
        share[giver] = round(len(vs_all) / len(recs), 4) if recs else 0.0
        base = Rates()
        for rec in others:
            base.add(rec["f"][giver], _regrets(rec, giver))
        vs = [r for r in vs_all if since_ts is None or int(r["ts"]) > since_ts]
        out_dirs.append(_direction(giver, receiver, vs, base, pop))
    out_dirs.sort(key=lambda d: -d["score"])
    top = out_dirs[0]
    return {"a": a, "b": b, "matches": len(vs_all), "share": share, "score": top["score"],
            "giver": top["giver"] if top["score"] > 0 else None, "directions": out_dirs}
