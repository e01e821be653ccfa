"""The integrity projection's state in Redis, and the projection itself.

:class:`IntegrityProjection` takes a settled match (its events), makes its record
(:func:`~projections.integrity.features.match_record`), samples decisions to score for
quality (:func:`sample`), stores the record under both players, rescores the pair and
keeps the pair's evidence, its flag and the metric ``shuangkou_integrity_flags_total``.
Recording a match is idempotent per match id (a redelivered feed entry changes nothing).

Keys (engine/store/keys.py) and their TTL policy (docs/INTEGRITY.md):

* ``sk:integrity:m:{<player>}`` -- hash match id → record; expires 90 days after the
  player's last scored match (the baseline window);
* ``sk:integrity:pair:<a|b>`` -- the pair's evidence as last scored; expires 30 days after the
  pair's last match;  ``sk:integrity:scores`` -- zset pair → score (> 0), pruned on read when
  the evidence key expired;
* ``sk:integrity:dismissed:<a|b>`` -- an operator's review; expires after 180 days;
* ``sk:integrity:population`` / ``…:population:regrets`` -- the population's rates (no TTL:
  a few hundred bytes).

:class:`IntegrityRunner` follows the bucket feeds with the consumer group ``sk-integrity``
like the ledger's runner (projections/runner.py): finished matches only, each acknowledged
after it was recorded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.match.events import EventBase
from engine.store import keys
from projections.integrity.features import match_record, pair_key
from projections.integrity.score import DEFAULT_MIN_SCORE, SIGNALS, Rates, score_pair
from projections.metrics import INTEGRITY_FLAGS
from projections.settlement import Settlement

log = logging.getLogger(__name__)

__all__ = ["FLAGS", "IntegrityProjection", "IntegrityRunner", "IntegrityStore", "RECORD_TTL_S", "PAIR_TTL_S",
           "DISMISS_TTL_S", "Evaluate", "sample"]

DAY = 86_400
RECORD_TTL_S = 90 * DAY
PAIR_TTL_S = 30 * DAY
DISMISS_TTL_S = 180 * DAY
POP_REGRETS = 2000
CACHED_PLAYERS = 10_000
#: a pair whose score (before the match) is at least this has its matches sampled closely
WATCH_SCORE = 5.0
#: decisions sampled of the losing player of a watched pair's match; 1 in BACKGROUND_EVERY
#: other matches gives one decision of each player (everyone's baseline)
WATCH_DECISIONS = 2
BACKGROUND_EVERY = 16
#: a pair is rescored after a match that shows a choice signal (escape, trusteeship asked,
#: a pass that gave a win or a play away) or was sampled for quality, and every
#: RESCORE_EVERY-th match of the pair otherwise (outcomes alone move a score slowly)
RESCORE_EVERY = 5

FLAGS = INTEGRITY_FLAGS


_UNREAD: Any = object()


def _s(v: bytes | str) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else v


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def sample(record: dict[str, Any], watched: bool) -> dict[int, str]:
    """The decisions of ``record`` to score for quality, {seq: player}: up to
    :data:`WATCH_DECISIONS` of the loser's when the pair is ``watched``; else one of each
    player's (one of the two, drawn) in one match of :data:`BACKGROUND_EVERY` (chosen by the match id: a rebuild
    samples the same)."""
    rng = random.Random(_digest(record["m"]))
    picks: dict[int, str] = {}
    dec: dict[str, list[int]] = record.get("dec") or {}
    if watched:
        loser = next(p for p in record["players"] if p != record["winner"])
        seqs = dec.get(loser, [])
        for seq in rng.sample(seqs, min(WATCH_DECISIONS, len(seqs))):
            picks[seq] = loser
    elif _digest(record["m"]) % BACKGROUND_EVERY == 0:
        p = rng.choice(record["players"])
        if dec.get(p):
            picks[rng.choice(dec[p])] = p
    return picks


@dataclass
class IntegrityStore:
    """The integrity projection's keys on one Redis client (a real one or fakeredis)."""

    client: Any
    #: player -> their decoded records, reused while the hash holds as many (records are
    #: written once, never changed: HSETNX); bounded by :data:`CACHED_PLAYERS`
    _cache: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False)

    def add(self, record: dict[str, Any]) -> bool:
        """Store ``record`` under both players; False when it was stored before (nothing changes)."""
        text = json.dumps(record, separators=(",", ":"))
        pipe = self.client.pipeline(transaction=False)
        for p in record["players"]:
            k = keys.integrity_records_key(p)
            pipe.hsetnx(k, record["m"], text)
            pipe.expire(k, RECORD_TTL_S)
        added = pipe.execute()[0::2]
        fresh = [p for p, a in zip(record["players"], added) if a]
        for p in fresh:  # keep a cached list whole: it had every record but this one
            cached = self._cache.get(p)
            if cached is not None:
                self._cache[p] = sorted([*cached, json.loads(text)], key=lambda r: (int(r["ts"]), r["m"]))
        if fresh:
            self._count(record, fresh)
        return bool(fresh)

    def _count(self, record: dict[str, Any], players: Sequence[str]) -> None:
        from projections.integrity.score import indicators

        pipe = self.client.pipeline(transaction=False)
        for player in players:
            for s, on in indicators(record["f"][player]).items():
                if on:
                    pipe.hincrby(keys.INTEGRITY_POPULATION, f"{s}:k", 1)
            regrets = [q[1] for q in (record.get("q") or {}).get(player, [])]
            if regrets:
                pipe.lpush(keys.INTEGRITY_POP_REGRETS, *[str(r) for r in regrets])
                pipe.ltrim(keys.INTEGRITY_POP_REGRETS, 0, POP_REGRETS - 1)
        pipe.hincrby(keys.INTEGRITY_POPULATION, "rows", len(players))
        pipe.execute()

    def records(self, player: str) -> list[dict[str, Any]]:
        """Every stored record of ``player``, oldest first."""
        return self._records(player, None)

    def _records(self, player: str, stored: int | None) -> list[dict[str, Any]]:
        """:meth:`records`, ``stored``: the hash's length when already read (None: read it)."""
        k = keys.integrity_records_key(player)
        cached = self._cache.get(player)
        if cached is not None and (self.client.hlen(k) if stored is None else int(stored)) == len(cached):
            return cached
        raw = self.client.hvals(k)
        out = sorted((json.loads(_s(v)) for v in raw), key=lambda r: (int(r["ts"]), r["m"]))
        if len(self._cache) >= CACHED_PLAYERS:
            self._cache.pop(next(iter(self._cache)))
        self._cache[player] = out
        return out

    def population(self) -> Rates:
        return self._population(self.client.hgetall(keys.INTEGRITY_POPULATION),
                                self.client.lrange(keys.INTEGRITY_POP_REGRETS, 0, -1))

    @staticmethod
    def _population(counts: dict[Any, Any] | None, regrets: Sequence[Any]) -> Rates:
        pop = Rates()
        raw = {_s(k): int(v) for k, v in (counts or {}).items()}
        for s in SIGNALS:
            pop.counts[s] = [raw.get(f"{s}:k", 0), raw.get("rows", 0)]
        pop.regrets = [float(v) for v in regrets]
        return pop

    def dismissal(self, pair: str) -> dict[str, Any] | None:
        raw = self.client.hgetall(keys.integrity_dismissed_key(pair))
        return {_s(k): _s(v) for k, v in raw.items()} if raw else None

    def dismiss(self, a: str, b: str, reason: str, now_ms: int, by: str = "operator") -> dict[str, Any]:
        """Mark {a, b} reviewed at ``now_ms``: only evidence from later matches can flag it again."""
        pair = pair_key(a, b)
        ev = self.evidence(pair)
        row = {"reason": reason, "at": str(now_ms), "by": by, "score": str(ev["score"] if ev else 0.0)}
        k = keys.integrity_dismissed_key(pair)
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(k)
        pipe.hset(k, mapping=row)
        pipe.expire(k, DISMISS_TTL_S)
        pipe.zrem(keys.INTEGRITY_SCORES, pair)
        pipe.execute()
        return row

    def score(self, a: str, b: str, pop: Rates | None = None) -> dict[str, Any]:
        """The pair's evidence now (new evidence only, after a dismissal)."""
        pair = pair_key(a, b)
        pipe = self.client.pipeline(transaction=False)  # every read in one round trip
        pipe.hgetall(keys.integrity_dismissed_key(pair))
        pipe.hlen(keys.integrity_records_key(a))
        pipe.hlen(keys.integrity_records_key(b))
        if pop is None:
            pipe.hgetall(keys.INTEGRITY_POPULATION)
            pipe.lrange(keys.INTEGRITY_POP_REGRETS, 0, -1)
        got = pipe.execute()
        dis = {_s(k): _s(v) for k, v in got[0].items()} if got[0] else None
        since = int(dis["at"]) if dis else None
        recs = {a: self._records(a, got[1]), b: self._records(b, got[2])}
        out = score_pair(a, b, recs, pop or self._population(got[3], got[4]), since_ts=since)
        out["pair"] = pair
        out["dismissed"] = dis
        giver = out["giver"]
        other = (b if giver == a else a) if giver else None
        out["worst"] = worst_decisions(recs[giver], giver, other, since) if giver and other else []
        out["concessions"] = concessions(recs[giver], giver, other, since) if giver and other else []
        return out

    def keep(self, evidence: dict[str, Any], before: Any = _UNREAD) -> bool:
        """Store a pair's evidence and score; True when it crossed the default threshold now
        (counted in ``shuangkou_integrity_flags_total``).  ``before``: the pair's stored score
        when the caller already read it (None: none)."""
        pair = evidence["pair"]
        if before is _UNREAD:
            before = self.client.zscore(keys.INTEGRITY_SCORES, pair)
        pipe = self.client.pipeline(transaction=False)
        pipe.set(keys.integrity_pair_key(pair), json.dumps(evidence, separators=(",", ":")), ex=PAIR_TTL_S)
        if evidence["score"] > 0:
            pipe.zadd(keys.INTEGRITY_SCORES, {pair: evidence["score"]})
        else:
            pipe.zrem(keys.INTEGRITY_SCORES, pair)
        pipe.execute()
        crossed = evidence["score"] >= DEFAULT_MIN_SCORE and (before is None or float(before) < DEFAULT_MIN_SCORE)
        if crossed:
            FLAGS.inc()
        return crossed

    def evidence(self, pair: str) -> dict[str, Any] | None:
        raw = self.client.get(keys.integrity_pair_key(pair))
        return json.loads(_s(raw)) if raw else None

    def ranked(self, min_score: float, since_ms: int | None = None) -> list[dict[str, Any]]:
        """Pairs scoring at least ``min_score`` (highest first) whose last match is after ``since_ms``."""
        out = []
        for pair, _score in self.client.zrevrangebyscore(keys.INTEGRITY_SCORES, "+inf", min_score, withscores=True):
            pair = _s(pair)
            ev = self.evidence(pair)
            if ev is None:  # its evidence expired (no match for 30 days): drop it from the index
                self.client.zrem(keys.INTEGRITY_SCORES, pair)
                continue
            if since_ms is not None and int(ev.get("last_ts", 0)) < since_ms:
                continue
            out.append(ev)
        return out


def worst_decisions(records: Sequence[dict[str, Any]], giver: str, receiver: str, since: int | None,
                    n: int = 5) -> list[dict[str, Any]]:
    """The giver's sampled decisions against the receiver with the largest regret, each with
    its replay position (match id and event seq)."""
    rows = []
    for rec in records:
        if receiver not in rec["players"] or (since is not None and int(rec["ts"]) <= since):
            continue
        for seq, r, chosen, best in (rec.get("q") or {}).get(giver, []):
            rows.append({"match": rec["m"], "seq": seq, "regret": r, "chosen": chosen, "best": best})
    rows.sort(key=lambda x: -x["regret"])
    return rows[:n]


def concessions(records: Sequence[dict[str, Any]], giver: str, receiver: str, since: int | None,
                n: int = 10) -> list[dict[str, Any]]:
    """The giver's concessions against the receiver (newest first), each a replay position."""
    rows = []
    for rec in reversed(records):
        if receiver not in rec["players"] or (since is not None and int(rec["ts"]) <= since):
            continue
        for seq, what in (rec.get("ev") or {}).get(giver, []):
            rows.append({"match": rec["m"], "seq": seq, "what": what})
            if len(rows) >= n:
                return rows
    return rows


def _pair_matches(ev: dict[str, Any] | None) -> int:
    return int(ev.get("matches", 0)) if ev else 0


def _shows_choice(record: dict[str, Any]) -> bool:
    from projections.integrity.score import indicators

    return any(on for row in record["f"].values() for s, on in indicators(row).items()
               if s in ("escape", "trustee", "win_pass", "conceded", "passive"))


#: scores sampled decisions: (events, {seq: player}) → [{"seq", "player", "regret", "chosen",
#: "best"}, …] -- :func:`engine.tools.quality.evaluate` (the bots' layer: passed in, never imported here)
Evaluate = Callable[[Sequence[EventBase], dict[int, str]], list[dict[str, Any]]]


@dataclass
class IntegrityProjection:
    """Settled matches → records, quality samples, pair scores and flags.  ``evaluate``: what
    scores the sampled decisions (:func:`engine.tools.quality.evaluate`; None: no quality
    signal); ``cpu_ms``: CPU time spent (a figure for the bench)."""

    store: IntegrityStore
    evaluate: Evaluate | None = None
    cpu_ms: float = 0.0
    matches: int = 0
    on_flag: Callable[[dict[str, Any]], None] | None = None

    def observe(self, events: Sequence[EventBase], settlement: Settlement | None = None) -> dict[str, Any] | None:
        """Record one finished match (idempotent); the pair's new evidence, or None (not scored)."""
        t0 = time.thread_time()
        try:
            rec = match_record(events, settlement)
            if rec is None:
                return None
            a, b = rec["players"]
            pair = pair_key(a, b)
            pipe = self.store.client.pipeline(transaction=False)
            pipe.hexists(keys.integrity_records_key(a), rec["m"])
            pipe.zscore(keys.INTEGRITY_SCORES, pair)
            pipe.get(keys.integrity_pair_key(pair))
            seen, before, raw = pipe.execute()
            if seen:
                return None
            ev = json.loads(_s(raw)) if raw else None
            watched = before is not None and float(before) >= WATCH_SCORE and ev is not None
            picks = sample(rec, watched) if self.evaluate is not None else {}
            if picks and self.evaluate is not None:
                q: dict[str, list[list[Any]]] = {}
                for row in self.evaluate(events, picks):
                    q.setdefault(str(row["player"]), []).append([row["seq"], row["regret"], row["chosen"],
                                                                 row["best"]])
                rec["q"] = q
            rec.pop("dec", None)
            self.store.add(rec)
            if not (picks or ev is None or _shows_choice(rec) or _pair_matches(ev) % RESCORE_EVERY == 0):
                ev["matches"] = _pair_matches(ev) + 1
                ev["last_ts"], ev["last_match"] = rec["ts"], rec["m"]
                self.store.client.set(keys.integrity_pair_key(pair), json.dumps(ev, separators=(",", ":")),
                                      ex=PAIR_TTL_S)
                self.matches += 1
                return ev
            evidence = self.store.score(a, b)
            evidence["last_ts"] = rec["ts"]
            evidence["last_match"] = rec["m"]
            if self.store.keep(evidence, before) and self.on_flag is not None:
                self.on_flag(evidence)
            self.matches += 1
            return evidence
        finally:
            self.cpu_ms += (time.thread_time() - t0) * 1000


@dataclass
class IntegrityRunner:
    """Feed → finished matches → :class:`IntegrityProjection`, acknowledging each entry after it."""

    event_store: Any
    projection: IntegrityProjection
    feed: Any
    errors: list[tuple[str, str]] = field(default_factory=list)

    def run_once(self, count: int = 100) -> int:
        batch = self.feed.read(count)
        for d in batch:
            try:
                if d.entry.finished is False:
                    continue
                events = self.event_store.load(d.entry.match_id)
                self.projection.observe(events)
            except Exception as exc:  # noqa: BLE001 - one bad match never blocks the feed
                from engine.store.transient import is_transient

                if is_transient(exc):
                    raise
                log.exception("integrity: match %s could not be scored", d.entry.match_id)
                self.errors.append((d.entry.match_id, f"{type(exc).__name__}: {exc}"))
        if batch:
            self.feed.ack_all(batch)
        return len(batch)

    def drain(self, count: int = 100) -> int:
        total = 0
        while n := self.run_once(count):
            total += n
        return total

    def run_forever(self, stop: threading.Event, idle_seconds: float = 1.0) -> None:
        while not stop.is_set():
            try:
                if self.run_once() == 0:
                    stop.wait(idle_seconds)
            except Exception as exc:  # noqa: BLE001 - transient: retried
                log.warning("integrity runner: %s; retrying", exc)
                stop.wait(idle_seconds)

