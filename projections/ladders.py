"""Where the ladders live: seasons, each ranked room's ratings per season, the leaderboard.

Two stores share one contract (tests/test_ratings.py): :class:`MemoryRatingStore` (embedded
mode, tests, bench/matchmaking.py) and :class:`RedisRatingStore` (keys in
:mod:`engine.store.keys`: ``sk:{rk:<room>:<season>}:…`` per ladder, so ladders spread over a
cluster; ``sk:{seasons}:…`` for the season list).  :class:`RatingProjector` is the live
projection (the projection runner calls it for each settled match, projections/runner.py);
:func:`rebuild` replays every match's events into fresh ladders (``shuangkou ratings
rebuild``) and must give exactly what the live projection holds.

A Redis write is one Lua script per match (the ladder's keys share its tag): it applies
the fold only if the ladder's last folded match and its number of matches are still what the
fold started from, and the match is not there yet; otherwise the projector reads again and retries.  So a
redelivered settlement changes nothing, and two projectors never lose a match.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.match.events import EventBase
from engine.store import keys
from engine.store.base import EventStore
from projections.ratings import (
    Change,
    Ladder,
    RatedMatch,
    Season,
    Skill,
    is_bot,
    previous_season,
    rated_match,
    season_of,
    soft_reset,
    tier_of,
    RATING_BASE,
    RATING_SCALE,
)

SEASON_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")
#: neighbours shown above and below a player (``around=me``)
NEIGHBOURS = 5
MAX_LIMIT = 1000


class SeasonError(ValueError):
    """A season command that cannot be done (``code``: ``bad_name``, ``exists``, ``none_running``,
    ``bad_reset``)."""

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code = code


def board_entry(rank: int, player: str, score: float, names: dict[str, str | None]) -> dict[str, Any]:
    """One leaderboard entry: ``{"rank", "player", "name", "rating", "tier", "bot"}`` (``score``:
    the board's exact rating; ``bot``: a bot seat of a room that rates bots, which has no name)."""
    ordinal = (score - RATING_BASE) / RATING_SCALE
    return {"rank": rank, "player": player, "name": names.get(player), "rating": round(score),
            "tier": tier_of(ordinal), "bot": is_bot(player)}


class RatingStore(ABC):
    """Seasons and ladders.  ``apply`` is idempotent per match id."""

    # -- seasons ----------------------------------------------------------------------
    @abstractmethod
    def seasons(self) -> list[Season]:
        """Every season, oldest first."""

    @abstractmethod
    def _put_season(self, season: Season) -> None: ...

    def current(self) -> Season | None:
        running = [s for s in self.seasons() if s.end_ms is None]
        return running[-1] if running else None

    def start_season(self, name: str, now_ms: int, soft_reset: float = 1.0) -> Season:
        """Start season ``name`` now (ending the running one now); ``soft_reset``: how far each
        player's start is pulled back from their last season's skill to a new player's (0..1)."""
        if not SEASON_NAME.fullmatch(name):
            raise SeasonError("bad_name", f"a season's name is 1-40 letters, digits, '_', '-' or '.', got {name!r}")
        if not 0.0 <= soft_reset <= 1.0:
            raise SeasonError("bad_reset", f"--soft-reset is 0..1 (0: carried over, 1: a fresh start), got {soft_reset}")
        existing = self.seasons()
        if any(s.name == name for s in existing):
            raise SeasonError("exists", f"season {name!r} exists already")
        if existing and now_ms < max(s.start_ms for s in existing):
            raise SeasonError("bad_time", "a season cannot start before the last one started")
        running = self.current()
        if running is not None:
            self._put_season(Season(running.name, running.start_ms, now_ms, running.soft_reset))
        season = Season(name, now_ms, None, soft_reset)
        self._put_season(season)
        return season

    def end_season(self, now_ms: int) -> Season:
        """End the running season now; its ladders stay queryable."""
        running = self.current()
        if running is None:
            raise SeasonError("none_running", "no season is running (shuangkou season start NAME)")
        ended = Season(running.name, running.start_ms, max(now_ms, running.start_ms), running.soft_reset)
        self._put_season(ended)
        return ended

    def season(self, name: str | None) -> Season | None:
        """The season named ``name`` (None: the running one, else the last one)."""
        seasons = self.seasons()
        if name is None:
            return self.current() or (seasons[-1] if seasons else None)
        return next((s for s in seasons if s.name == name), None)

    def starter(self, room: str, season: str) -> Callable[[str], Skill]:
        """A player's skill before their first match of ``season`` in ``room``: the soft
        reset of their final skill in the season before (a new player's without one)."""
        seasons = self.seasons()
        this = next((s for s in seasons if s.name == season), None)
        prev = previous_season(seasons, season)
        if this is None or prev is None or this.soft_reset >= 1.0:
            return lambda _p: Skill()
        factor = this.soft_reset
        cache: dict[str, Skill] = {}

        def start(player: str) -> Skill:
            if player not in cache:
                cache[player] = soft_reset(self.skill(room, prev.name, player), factor)
            return cache[player]

        return start

    # -- ladders ----------------------------------------------------------------------
    def refold_after(self, room: str, season: str) -> list[str]:
        """A match of ``season`` came late (after the next season began): the seasons after it
        that start from it (a soft reset below 1) fold their ladder of ``room`` again, in order,
        so that they equal a rebuild.  The seasons refolded."""
        seasons = self.seasons()
        names = [s.name for s in seasons]
        done: list[str] = []
        if season not in names:
            return done
        kept = {s for r, s in self.ladders() if r == room}
        for later in seasons[names.index(season) + 1:]:
            if later.soft_reset >= 1.0 or later.name not in kept:
                break
            old = self.ladder(room, later.name)
            self.replace(Ladder.build(room, later.name, old.results.values(), self.starter(room, later.name)))
            done.append(later.name)
        return done

    @abstractmethod
    def apply(self, m: RatedMatch, season: str) -> Change | None:
        """Fold one rated match into its room's ladder of ``season`` (None: folded before)."""

    @abstractmethod
    def ladder(self, room: str, season: str) -> Ladder:
        """The whole ladder as stored."""

    @abstractmethod
    def replace(self, ladder: Ladder) -> None:
        """Store ``ladder`` in place of what is stored (a rebuild)."""

    @abstractmethod
    def ladders(self) -> list[tuple[str, str]]:
        """``(room, season)`` of every ladder kept."""

    @abstractmethod
    def skill(self, room: str, season: str, player: str) -> Skill | None: ...

    @abstractmethod
    def top(self, room: str, season: str, start: int, stop: int) -> list[tuple[str, float]]:
        """Board positions ``start..stop`` (0-based, inclusive), best first: (player, exact rating)."""

    @abstractmethod
    def rank(self, room: str, season: str, player: str) -> int | None:
        """The player's 0-based position on the board (None: not on it)."""

    @abstractmethod
    def names(self, players: list[str]) -> dict[str, str | None]:
        """Display names, None for a player who hides theirs (or has none)."""

    def leaderboard(self, room: str, season: str, limit: int = 100, me: str | None = None) -> dict[str, Any]:
        """``{"room", "season", "entries"}`` (the top ``limit``); with ``me`` also ``"me"``: the
        player's own entry with ``neighbours`` (:data:`NEIGHBOURS` above and below, the player
        among them), or None when the player has no rating in that ladder."""
        limit = max(1, min(limit, MAX_LIMIT))
        rows = self.top(room, season, 0, limit - 1)
        mine: list[tuple[str, float]] = []
        pos = self.rank(room, season, me) if me is not None else None
        if pos is not None:
            mine = self.top(room, season, max(0, pos - NEIGHBOURS), pos + NEIGHBOURS)
        names = self.names(list(dict.fromkeys([p for p, _ in rows] + [p for p, _ in mine])))
        return board_answer(room, season, rows, me, pos, mine, names)


def board_answer(room: str, season: str, rows: list[tuple[str, float]], me: str | None, pos: int | None,
                 mine: list[tuple[str, float]], names: dict[str, str | None]) -> dict[str, Any]:
    """The leaderboard's answer from the board's rows (the top, and ``mine``: the rows from
    ``max(0, pos - NEIGHBOURS)`` around ``me`` at 0-based ``pos``) and the display names."""
    out: dict[str, Any] = {"room": room, "season": season,
                           "entries": [board_entry(i + 1, p, s, names) for i, (p, s) in enumerate(rows)]}
    if me is not None:
        if pos is None:
            out["me"] = None
        else:
            lo = max(0, pos - NEIGHBOURS)
            neighbours = [board_entry(lo + i + 1, p, s, names) for i, (p, s) in enumerate(mine)]
            own = next(e for e in neighbours if e["player"] == me)
            out["me"] = {**own, "neighbours": neighbours}
    return out


class MemoryRatingStore(RatingStore):
    """Everything in dicts (one process)."""

    def __init__(self) -> None:
        self._seasons: dict[str, Season] = {}
        self._ladders: dict[tuple[str, str], Ladder] = {}
        self.display_names: dict[str, str] = {}
        self.hidden: set[str] = set()

    def seasons(self) -> list[Season]:
        return sorted(self._seasons.values(), key=lambda s: (s.start_ms, s.name))

    def _put_season(self, season: Season) -> None:
        self._seasons[season.name] = season

    def _get(self, room: str, season: str) -> Ladder:
        lad = self._ladders.get((room, season))
        if lad is None:
            lad = self._ladders[(room, season)] = Ladder(room, season, start=self.starter(room, season))
        return lad

    def apply(self, m: RatedMatch, season: str) -> Change | None:
        return self._get(m.room, season).apply(m)

    def ladder(self, room: str, season: str) -> Ladder:
        return self._get(room, season)

    def replace(self, ladder: Ladder) -> None:
        self._ladders[(ladder.room, ladder.season)] = ladder

    def ladders(self) -> list[tuple[str, str]]:
        return sorted(self._ladders)

    def skill(self, room: str, season: str, player: str) -> Skill | None:
        lad = self._ladders.get((room, season))
        return None if lad is None else lad.players.get(player)

    def top(self, room: str, season: str, start: int, stop: int) -> list[tuple[str, float]]:
        lad = self._ladders.get((room, season))
        board = [] if lad is None else lad.board()
        return [(p, s.rating) for p, s in board[start:stop + 1]]

    def rank(self, room: str, season: str, player: str) -> int | None:
        lad = self._ladders.get((room, season))
        if lad is None or player not in lad.players:
            return None
        return [p for p, _ in lad.board()].index(player)

    def names(self, players: list[str]) -> dict[str, str | None]:
        return {p: None if p in self.hidden else self.display_names.get(p) for p in players}


_COMMIT = (Path(__file__).with_name("ladder_commit.lua")).read_text()
NAMES_KEY = keys.NAMES_KEY  # gateway/names.py: player -> display name
HIDDEN_KEY = keys.HIDDEN_NAMES_KEY  # set: players who hide their name from the leaderboards


def _s(v: Any) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


class RedisRatingStore(RatingStore):
    """The ladders in Redis (one Lua script per folded match, keys under the ladder's tag)."""

    def __init__(self, client: Any):
        self.client = client
        self._commit = client.register_script(_COMMIT)

    def seasons(self) -> list[Season]:
        raw = self.client.hgetall(keys.SEASONS)
        out = [Season.from_json(json.loads(_s(v))) for v in raw.values()]
        return sorted(out, key=lambda s: (s.start_ms, s.name))

    def _put_season(self, season: Season) -> None:
        self.client.hset(keys.SEASONS, season.name, json.dumps(season.to_json()))

    def _keys(self, room: str, season: str) -> list[str]:
        return [keys.ladder_key(room, season, part) for part in ("players", "board", "results", "meta")]

    def _skills(self, room: str, season: str, players: list[str]) -> dict[str, Skill]:
        raw = self.client.hmget(keys.ladder_key(room, season, "players"), players)
        return {p: Skill.from_json(v) for p, v in zip(players, raw) if v is not None}

    def _write(self, ladder_keys: list[str], expect: str, m: RatedMatch | None, skills: dict[str, Skill],
               replace_all: bool) -> str:
        args: list[Any] = [expect, m.match_id if m else "", m.to_json() if m else "",
                           json.dumps(list(m.key)) if m else "", "1" if replace_all else "0"]
        for p, sk in skills.items():
            args += [p, sk.to_json(), repr(sk.rating)]
        return _s(self._commit(keys=ladder_keys, args=args))

    def apply(self, m: RatedMatch, season: str) -> Change | None:
        ks = self._keys(m.room, season)
        self.client.sadd(keys.LADDERS, f"{m.room}:{season}")
        for _ in range(100):
            if self.client.hexists(ks[2], m.match_id):
                return None
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(ks[3], "last")
            pipe.hlen(ks[2])
            last_raw, folded = pipe.execute()
            last_text = "" if last_raw is None else _s(last_raw)
            expect = f"{last_text}|{int(folded)}"  # what the script checks before it writes
            last = None if last_raw is None else tuple(json.loads(last_text))
            if last is None or m.key > last:
                start = self.starter(m.room, season)
                stored = self._skills(m.room, season, [m.winner, m.loser])
                lad = Ladder(m.room, season, start=start, players=dict(stored), last=last)  # type: ignore[arg-type]
                change = lad.apply(m)
                assert change is not None
                status = self._write(ks, expect, m, change.after, replace_all=False)
            else:  # it sorts before a match folded already: fold the whole ladder again
                lad = self.ladder(m.room, season)
                change = lad.apply(m)
                if change is None:
                    return None
                status = self._write(ks, expect, m, lad.players, replace_all=True)
            if status == "applied":
                return change
            if status == "duplicate":
                return None
            # "moved": another projector folded a match meanwhile: read again
        raise RuntimeError(f"ladder {m.room}/{season}: could not fold {m.match_id} (too much contention)")

    def ladder(self, room: str, season: str) -> Ladder:
        ks = self._keys(room, season)
        players = {_s(p): Skill.from_json(v) for p, v in self.client.hgetall(ks[0]).items()}
        results = {_s(k): RatedMatch.from_json(_s(k), room, v) for k, v in self.client.hgetall(ks[2]).items()}
        last_raw = self.client.hget(ks[3], "last")
        last = None if last_raw is None else tuple(json.loads(_s(last_raw)))
        return Ladder(room, season, start=self.starter(room, season), players=players, results=results,
                      last=last)  # type: ignore[arg-type]

    def replace(self, ladder: Ladder) -> None:
        ks = self._keys(ladder.room, ladder.season)
        self.client.sadd(keys.LADDERS, f"{ladder.room}:{ladder.season}")
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(*ks)
        if ladder.players:
            pipe.hset(ks[0], mapping={p: s.to_json() for p, s in ladder.players.items()})
            pipe.zadd(ks[1], {p: s.rating for p, s in ladder.players.items()})
        if ladder.results:
            pipe.hset(ks[2], mapping={mid: r.to_json() for mid, r in ladder.results.items()})
        if ladder.last is not None:
            pipe.hset(ks[3], "last", json.dumps(list(ladder.last)))
        pipe.execute()

    def ladders(self) -> list[tuple[str, str]]:
        out = []
        for v in self.client.smembers(keys.LADDERS):
            room, _, season = _s(v).rpartition(":")
            out.append((room, season))
        return sorted(out)

    def skill(self, room: str, season: str, player: str) -> Skill | None:
        return self._skills(room, season, [player]).get(player)

    def top(self, room: str, season: str, start: int, stop: int) -> list[tuple[str, float]]:
        rows = self.client.zrevrange(keys.ladder_key(room, season, "board"), start, stop, withscores=True)
        return [(_s(p), float(s)) for p, s in rows]

    def rank(self, room: str, season: str, player: str) -> int | None:
        r = self.client.zrevrank(keys.ladder_key(room, season, "board"), player)
        return None if r is None else int(r)

    def names(self, players: list[str]) -> dict[str, str | None]:
        if not players:
            return {}
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(NAMES_KEY, players)
        pipe.smismember(HIDDEN_KEY, players)
        names, hidden = pipe.execute()
        return {p: None if h else (None if n is None else _s(n)) for p, n, h in zip(players, names, hidden)}

    def hide_name(self, player: str, hide: bool) -> None:
        """Hide (or show again) the player's name on every leaderboard."""
        if hide:
            self.client.sadd(HIDDEN_KEY, player)
        else:
            self.client.srem(HIDDEN_KEY, player)


@dataclass
class RatingProjector:
    """The live projection: a settled match's events → its ladder, and each (human) player's
    ``rating`` message through ``publish(player, message)``."""

    store: RatingStore
    publish: Callable[[str, dict[str, Any]], None] | None = None

    def project(self, events: list[Any]) -> Change | None:
        """Fold a finished match's events (None: not rated, no season, or folded before)."""
        m = rated_match(events)
        if isinstance(m, str):
            return None
        season = season_of(self.store.seasons(), m.finished_ms)
        if season is None:
            return None
        change = self.store.apply(m, season.name)
        if change is not None and season.end_ms is not None:
            self.store.refold_after(m.room, season.name)
        if change is not None and self.publish is not None:
            for player in (m.winner, m.loser):
                if not is_bot(player):
                    self.publish(player, change.message(player))
        return change


@dataclass(frozen=True)
class RebuildReport:
    """What :func:`rebuild` found per room: the rebuilt ladder, whether the stored one equals it,
    and the rated matches of the stored one whose events were nowhere to read (``missing``:
    archived or deleted; then nothing was written); ``written``: the rebuilt ladders were stored."""

    season: str
    ladders: dict[str, Ladder]
    same: dict[str, bool]
    missing: dict[str, list[str]] = field(default_factory=dict)
    written: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"season": self.season, "rooms": {
            room: {"players": len(lad.players), "matches": len(lad.results), "same": self.same[room],
                   "missing": len(self.missing.get(room, ()))}
            for room, lad in sorted(self.ladders.items())}, "same": all(self.same.values()),
            "written": self.written}


def rebuild(events: EventStore, store: RatingStore, season_name: str, write: bool = True,
            match_ids: Iterable[str] | None = None,
            archived: Mapping[str, Sequence[EventBase]] | None = None) -> RebuildReport:
    """Replay every match's events (the store's, then ``archived``'s for the matches the store
    no longer holds) into fresh ladders of ``season_name``, compare each with the stored one,
    and (``write``) store the rebuilt ladders -- only when every rated match of the stored
    ladders was read again: a ladder is never rebuilt without the matches an archive took."""
    season = store.season(season_name)
    if season is None:
        raise SeasonError("unknown", f"no season {season_name!r} (shuangkou season list)")
    by_room: dict[str, list[RatedMatch]] = {}
    read: set[str] = set()
    ids = list(events.match_ids() if match_ids is None else match_ids)
    known = set(ids)
    ids += [mid for mid in (archived or {}) if mid not in known]
    for mid in ids:
        evs = list(events.load(mid)) or list((archived or {}).get(mid, ()))
        if evs:
            read.add(mid)
        m = rated_match(evs)
        if isinstance(m, RatedMatch) and season.holds(m.finished_ms):
            by_room.setdefault(m.room, []).append(m)
    rooms = set(by_room) | {room for room, s in store.ladders() if s == season.name}
    ladders = {room: Ladder.build(room, season.name, by_room.get(room, ()), store.starter(room, season.name))
               for room in rooms}
    stored = {room: store.ladder(room, season.name) for room in rooms}
    same = {room: lad.same(stored[room]) for room, lad in ladders.items()}
    missing = {room: sorted(gone) for room in rooms if (gone := set(stored[room].results) - read)}
    written = write and not missing
    if written:
        for lad in ladders.values():
            store.replace(lad)
    return RebuildReport(season.name, ladders, same, missing, written)

