"""Ratings of ranked rooms: a projection of settled matches, per room and season (docs/RANKED.md).

The mathematics is the ``openskill`` library's Plackett-Luce model (for two players it is
the Bradley-Terry / logistic model of a win; no draws in 雙扣).  A player's skill is
``(mu, sigma)``; what players see is the conservative *ordinal* ``mu - 3·sigma``, shown as
``rating = 1000 + 40·ordinal`` (a new player: 1000) and as a tier (:data:`TIERS`).

Which matches count (:func:`rated_match`, pure, from a match's events):

* finished matches of a room whose recorded config says ``ranked = true``; a match
  abandoned before the deal (MatchAbandoned) counts for nothing;
* an escape (R-12) is a loss for the escaper, whoever the trustee made win;
* a match with a bot seat (a ``bot-`` player id, the id the lobby gives its bots) counts only
  in a room with ``rate_bots = true``;
* a private table's match never counts: its recorded config carries ``private = true``
  (the mark the private-table issue adds; any truthy ``private`` key skips the match).

Order: by settlement order -- the MatchFinished time the events record -- ties by match id;
a match belongs to the season whose ``[start, end)`` holds that time.  So replaying the
events (:func:`rebuild`) gives exactly the live projection: the live :meth:`Ladder.apply`
folds a match that arrives after a later one by folding the whole ladder again in order.

>>> m = RatedMatch("m1", "ranked", 5, winner="a", loser="b")
>>> lad = Ladder("ranked", "s1")
>>> ch = lad.apply(m)
>>> (ch.after["a"].rating > 1000, ch.after["b"].rating < ch.before["b"].rating, lad.apply(m))
(True, True, None)
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from openskill.models import PlackettLuce

from engine.match.events import EventBase, MatchAbandoned, MatchCreated, MatchFinished, PlayerEscaped, PlayerSeated
from engine.store import keys

__all__ = [
    "Change", "DEFAULT_MU", "DEFAULT_SIGMA", "Ladder", "RatedMatch", "Season", "Skill", "TIERS",
    "is_bot", "rated_match", "rating_of", "season_of", "soft_reset", "tier_of",
]

MODEL = PlackettLuce()  # mu 25, sigma 25/3, beta 25/6, tau 25/300 (the library's defaults)
DEFAULT_MU: float = MODEL.mu
DEFAULT_SIGMA: float = MODEL.sigma
RATING_BASE = 1000
RATING_SCALE = 40
#: tier ids (stable; names in the browser's i18n files), each from this ordinal up
TIERS: tuple[tuple[str, float], ...] = (
    ("bronze", -math.inf), ("silver", 10.0), ("gold", 15.0), ("platinum", 20.0), ("diamond", 25.0),
    ("master", 30.0),
)
SkipReason = Literal["not_finished", "abandoned", "not_ranked", "private", "bot", "unrated"]


def is_bot(player: str) -> bool:
    """Whether ``player`` is a bot seat: the lobby names its bots ``bot-<n>``, an id no token
    may claim (:func:`engine.store.keys.is_bot_id`)."""
    return keys.is_bot_id(player)


def tier_of(ordinal: float) -> str:
    """The tier id of an ordinal.

    >>> tier_of(0.0), tier_of(15.0), tier_of(29.9), tier_of(31)
    ('bronze', 'gold', 'diamond', 'master')
    """
    ids = [t for t, _ in TIERS]
    return ids[bisect.bisect_right([lo for _, lo in TIERS], ordinal) - 1]


def rating_of(ordinal: float) -> float:
    """The rating shown for an ordinal (``1000 + 40·ordinal``; exact, round it to show it)."""
    return RATING_BASE + RATING_SCALE * ordinal


@dataclass(frozen=True, slots=True)
class Skill:
    """A player's skill in one ladder: ``n`` rated matches so far."""

    mu: float = DEFAULT_MU
    sigma: float = DEFAULT_SIGMA
    n: int = 0

    @property
    def ordinal(self) -> float:
        return self.mu - 3 * self.sigma

    @property
    def rating(self) -> float:
        return rating_of(self.ordinal)

    @property
    def tier(self) -> str:
        return tier_of(self.ordinal)

    def shown(self) -> dict[str, Any]:
        """``{"rating", "tier"}`` as the messages carry it."""
        return {"rating": round(self.rating), "tier": self.tier}

    def to_json(self) -> str:
        return json.dumps([self.mu, self.sigma, self.n])

    @classmethod
    def from_json(cls, text: str | bytes) -> Skill:
        mu, sigma, n = json.loads(text)
        return cls(float(mu), float(sigma), int(n))


def soft_reset(previous: Skill | None, factor: float) -> Skill:
    """A player's start in a new season from their final skill in the last one: ``factor``
    of the way back to a new player's (1: a fresh start, 0: carried over), with no matches.

    >>> soft_reset(Skill(35.0, 2.0, 40), 0.5)
    Skill(mu=30.0, sigma=5.166666666666667, n=0)
    >>> soft_reset(None, 0.0) == Skill()
    True
    """
    if previous is None:
        return Skill()
    return Skill(previous.mu + factor * (DEFAULT_MU - previous.mu),
                 previous.sigma + factor * (DEFAULT_SIGMA - previous.sigma), 0)


@dataclass(frozen=True, slots=True)
class Season:
    """A season: matches finished in ``[start_ms, end_ms)`` (``end_ms`` None: still running)."""

    name: str
    start_ms: int
    end_ms: int | None = None
    soft_reset: float = 1.0

    def holds(self, t_ms: int) -> bool:
        return self.start_ms <= t_ms and (self.end_ms is None or t_ms < self.end_ms)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "start_ms": self.start_ms, "end_ms": self.end_ms, "soft_reset": self.soft_reset}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Season:
        return cls(str(data["name"]), int(data["start_ms"]), None if data.get("end_ms") is None else
                   int(data["end_ms"]), float(data.get("soft_reset", 1.0)))


def season_of(seasons: Iterable[Season], t_ms: int) -> Season | None:
    """The season a match finished at ``t_ms`` belongs to (None: no season ran then)."""
    for s in seasons:
        if s.holds(t_ms):
            return s
    return None


def previous_season(seasons: Sequence[Season], name: str) -> Season | None:
    """The season that started last before ``name`` (its final ratings seed ``name``'s)."""
    ordered = sorted(seasons, key=lambda s: (s.start_ms, s.name))
    names = [s.name for s in ordered]
    i = names.index(name) if name in names else 0
    return ordered[i - 1] if i > 0 else None


@dataclass(frozen=True, slots=True)
class RatedMatch:
    """What a rating needs of a finished match: who won, who lost, when, where.
    ``provisional_matches``: the room's count as the match recorded its config."""

    match_id: str
    room: str
    finished_ms: int
    winner: str
    loser: str
    provisional_matches: int = 10

    @property
    def key(self) -> tuple[int, str]:
        """The settlement order: finish time, then match id."""
        return (self.finished_ms, self.match_id)

    def to_json(self) -> str:
        return json.dumps([self.finished_ms, self.winner, self.loser, self.provisional_matches])

    @classmethod
    def from_json(cls, match_id: str, room: str, text: str | bytes) -> RatedMatch:
        t, w, lo, p = json.loads(text)
        return cls(match_id, room, int(t), str(w), str(lo), int(p))


def rated_match(events: Sequence[EventBase]) -> RatedMatch | SkipReason:
    """The rated result of a match from its events, or why it is not rated.

    >>> rated_match([])
    'not_finished'
    """
    config: dict[str, Any] = {}
    seated: list[str] = []
    escaper: str | None = None
    finish: MatchFinished | None = None
    match_id = ""
    for e in events:
        if isinstance(e, MatchCreated):
            config, match_id = dict(e.config), e.match_id
        elif isinstance(e, PlayerSeated):
            seated.append(e.player)
        elif isinstance(e, PlayerEscaped) and escaper is None:
            escaper = e.player
        elif isinstance(e, MatchFinished):
            finish = e
        elif isinstance(e, MatchAbandoned):
            return "abandoned"
    if finish is None:
        return "not_finished"
    if config.get("private"):
        return "private"
    if not config.get("ranked"):
        return "not_ranked"
    winner, loser = finish.winner, finish.loser
    if escaper is not None and escaper in (winner, loser):
        loser = escaper  # an escape is a loss for the escaper
        winner = finish.loser if escaper == finish.winner else finish.winner
    if winner == loser:
        return "unrated"
    if (is_bot(winner) or is_bot(loser)) and not config.get("rate_bots"):
        return "bot"
    return RatedMatch(match_id or finish.match_id, str(config.get("name", "")), finish.ts, winner, loser,
                      int(config.get("provisional_matches", 10)))


@dataclass(frozen=True)
class Change:
    """What one rated match did: each player's skill before and after it."""

    match: RatedMatch
    season: str
    before: dict[str, Skill]
    after: dict[str, Skill]

    def message(self, player: str) -> dict[str, Any]:
        """The ``rating`` message for ``player`` (docs/PROTOCOL.md)."""
        after = self.after[player]
        return {"kind": "rating", "match": self.match.match_id, "room": self.match.room, "season": self.season,
                "before": self.before[player].shown(), "after": after.shown(),
                "provisional": after.n < self.match.provisional_matches}


def rate(winner: Skill, loser: Skill) -> tuple[Skill, Skill]:
    """The skills after ``winner`` beat ``loser`` (openskill Plackett-Luce)."""
    [[w], [lo]] = MODEL.rate([[MODEL.rating(mu=winner.mu, sigma=winner.sigma)],
                              [MODEL.rating(mu=loser.mu, sigma=loser.sigma)]])
    return Skill(w.mu, w.sigma, winner.n + 1), Skill(lo.mu, lo.sigma, loser.n + 1)


@dataclass
class Ladder:
    """The ratings of one room in one season, folded from its rated matches in order.

    ``start(player)``: a player's skill before their first match of the season (a soft reset
    of the last season's, :func:`soft_reset`; default: a new player's)."""

    room: str
    season: str
    start: Callable[[str], Skill] = field(default=lambda _p: Skill())
    players: dict[str, Skill] = field(default_factory=dict)
    results: dict[str, RatedMatch] = field(default_factory=dict)
    last: tuple[int, str] | None = None
    provisional_matches: int = 10

    def skill(self, player: str) -> Skill:
        got = self.players.get(player)
        return got if got is not None else self.start(player)

    def _fold(self, m: RatedMatch) -> Change:
        before = {m.winner: self.skill(m.winner), m.loser: self.skill(m.loser)}
        w, lo = rate(before[m.winner], before[m.loser])
        self.players[m.winner], self.players[m.loser] = w, lo
        self.last = m.key
        self.provisional_matches = m.provisional_matches
        return Change(m, self.season, before, {m.winner: w, m.loser: lo})

    def apply(self, m: RatedMatch) -> Change | None:
        """Fold ``m`` (None when it was folded before).  A match that sorts before the last
        one folded makes the ladder fold all its matches again, in order."""
        if m.match_id in self.results:
            return None
        self.results[m.match_id] = m
        if self.last is None or m.key > self.last:
            return self._fold(m)
        change: Change | None = None
        self.players, self.last = {}, None
        for r in sorted(self.results.values(), key=lambda r: r.key):
            c = self._fold(r)
            if r.match_id == m.match_id:
                change = c
        return change

    @classmethod
    def build(cls, room: str, season: str, matches: Iterable[RatedMatch],
              start: Callable[[str], Skill] | None = None) -> Ladder:
        """The ladder of ``matches`` folded in settlement order."""
        lad = cls(room, season) if start is None else cls(room, season, start=start)
        for m in sorted(matches, key=lambda r: r.key):
            lad.results[m.match_id] = m
            lad._fold(m)
        return lad

    def same(self, other: Ladder) -> bool:
        """Equal skills (exactly), the same matches."""
        return self.players == other.players and set(self.results) == set(other.results)

    def board(self) -> list[tuple[str, Skill]]:
        """Players best first (rating, then player id descending, as Redis ZREVRANGE)."""
        return sorted(self.players.items(), key=lambda kv: (kv[1].rating, kv[0]), reverse=True)

