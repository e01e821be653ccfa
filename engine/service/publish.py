"""Publishing: what one command's outcome writes to the players' streams, and dead letters.

:class:`Publisher` turns an outcome into stream entries (:class:`Write`, no I/O)
and writes them in one pipeline.  The inbox consumer (engine/service/inbox.py)
batches the writes of several messages; the timer workers publish the outcome
of the commands they run through :meth:`Publisher.publish`.

>>> from engine.store import keys, wire
>>> Write(keys.outbox_key("alice"), {"kind": "rejected"}, 200).stream
'sk:out:{alice}'

Formats: docs/PROTOCOL.md ("Outbound streams").
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgpack
import redis
from redis.exceptions import NoScriptError

from engine.match.commands import MAX_COMMAND_BYTES, CommandBase
from engine.match.errors import BadCommand
from engine.match.commands import Ready, Say, Sync
from engine.match.events import (
    SCHEMA_VERSION,
    EventBase,
    HandDealt,
    MatchFinished,
    PlayerDisconnected,
    PlayerEscaped,
    PlayerReconnected,
    ClockExtended,
    PlayerRemoved,
    PlayerSeated,
    Reading,
    TrusteeshipEnded,
    TrusteeshipStarted,
)
from engine.match.events import public_event_dict
from engine.match.protocols import OutcomeLike
from engine.rules.cards import NUM_RANKS, RANK_LABELS, sort_cards
from engine.match.state import MatchState
from engine.store import keys, replies, scripts, wire
from engine.store.base import Write
from projections.views import redact_event, view_common, view_for

log = logging.getLogger("shuangkou.gateway")

INTERNAL_ERROR = "internal_error"  # gateway-level rejection code: the engine failed on the command


DEFAULT_OUTBOX_TTL = 86_400  # s: an outbox/reply stream nobody wrote to for a day expires
DEFAULT_OUTBOX_MAXLEN = 200  # entries kept per outbox/reply stream (MAXLEN ~)
DEFAULT_FULL_VIEW_EVERY = 60  # an update carries the full view at least every N versions


@dataclasses.dataclass
class GatewayStats:
    processed: int = 0  # messages handled and acknowledged
    accepted: int = 0
    rejected: int = 0
    duplicates: int = 0
    dead: int = 0
    retried: int = 0  # left pending after a transient failure (redelivered later)
    published: int = 0  # entries written to player/reply streams
    oversized: int = 0  # inbox entries over MAX_ENTRY_BYTES (dead-lettered as a record, the inbox trimmed soon)
    fenced: int = 0  # updates refused: the player's stream held their version of the match or a higher one (Stale)


@dataclasses.dataclass(frozen=True)
class Stale:
    """The reply of an update :meth:`Publisher.write` did not write: the player's stream
    already holds version ``last`` of the match, at or above the update's (engine/store/publish.lua)."""

    last: int


def _followed(writes: Sequence[Write]) -> set[int]:
    """The indexes of the updates (:attr:`Write.version` set) that another write of the same
    stream follows in ``writes``.

    >>> w = [Write("s", {}, 9, version=1), Write("t", {}, 9, version=1), Write("s", {}, 9, version=2),
    ...      Write("u", {}, 9, version=1), Write("u", {}, 9)]
    >>> sorted(_followed(w))
    [0, 3]
    """
    later: set[str] = set()
    out: set[int] = set()
    for k in range(len(writes) - 1, -1, -1):
        w = writes[k]
        if w.version is not None and w.stream in later:
            out.add(k)
        later.add(w.stream)
    return out


def _fenced_reply(reply: Any) -> Any:
    """publish.lua's reply (field/value pairs) as the entry id written, or :class:`Stale`."""
    if isinstance(reply, Exception):
        return reply
    fields = replies.fields(reply)
    if text(fields["status"]) == "stale":
        return Stale(int(fields["last"]))
    return fields["id"]


#: engine/store/publish.lua (its comment lines left empty): a player's update, refused when
#: it would take the match back; called by EVALSHA of :data:`PUBLISH_SHA` or sent whole by
#: EVAL (:meth:`Publisher.write`)
PUBLISH_LUA = scripts.sent_by_eval("publish.lua")
PUBLISH_SHA = scripts.sha(PUBLISH_LUA)


#: events after which every recipient's update carries the full view: a seating, the deal,
#: the finish, and the rare changes of a player's status (connection, trusteeship, escape, removal)
_VIEW_EVENTS: tuple[type[EventBase], ...] = (
    PlayerSeated, HandDealt, MatchFinished, PlayerDisconnected, PlayerReconnected, TrusteeshipStarted, TrusteeshipEnded,
    PlayerEscaped, PlayerRemoved, ClockExtended,
)


#: the events :func:`projections.views.redact_event` changes per recipient (every other one
#: reaches each recipient as its public fields)
_PER_RECIPIENT: tuple[type[EventBase], ...] = (PlayerSeated, HandDealt)

#: players whose sorted hand :meth:`Publisher._own_hand` keeps at most (then it starts afresh)
HAND_CACHE_PLAYERS = 10_000


def text(value: Any) -> str:
    """A Redis reply value as text (bytes decoded as UTF-8, bad bytes replaced)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _plain(obj: Any) -> Any:
    """msgpack ``default``: pydantic models, dataclasses, sets -> plain data."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="python")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)


def pack(data: Any) -> bytes:
    return msgpack.packb(data, use_bin_type=True, default=_plain)  # type: ignore[no-any-return]


def short_str(value: Any) -> str | None:
    """``value`` if it is a usable id (a non-empty, encodable str of ≤ 200 characters), else None."""
    if not isinstance(value, str) or not 0 < len(value) <= 200:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no stream can be named after it
        return None
    return value


def recipients(state: MatchState, events: Iterable[EventBase]) -> list[str]:
    """The players who hear of ``events``: the seated ones, and any player an event names
    (e.g. a player removed before the deal still hears of it)."""
    players: list[str] = []
    for seat in state.seats:
        if seat is not None and seat.player not in players:
            players.append(seat.player)
    for e in events:
        p = getattr(e, "player", None)
        if isinstance(p, str) and p not in players:
            players.append(p)
    return players


def safe_text(value: str, limit: int = 2000) -> str:
    """``value`` cut to ``limit`` characters and made encodable (lone surrogates escaped)."""
    return value[:limit].encode("utf-8", "backslashreplace").decode("utf-8")


#: what an event in an update leaves out: the update's own match and command ids and the
#: event schema version; in a ``reading``, the fields at their defaults (null, empty)
_UPDATE_DROPS = ("match_id", "command_id", "v")
_READING_DEFAULTS: dict[str, Any] = {name: ([] if f.default == () else f.default)
                                     for name, f in Reading.model_fields.items() if not f.is_required()}
_DEFAULT_ACTOR = "player"  # CardsPlayed/Passed ``by`` when absent


def compact_event(data: dict[str, Any]) -> dict[str, Any]:
    """A redacted event as an update carries it (docs/PROTOCOL.md, "Updates"): without
    the update's own ``match_id`` and ``command_id``, the schema version ``v``, ``by``
    when it is ``"player"``, and, in a ``reading``, without the fields at their defaults
    and the trailing zeros of ``counts``.  :func:`expand_event` undoes it.

    >>> e = {"match_id": "m", "command_id": "c", "v": 1, "seq": 7, "type": "CardsPlayed", "by": "player",
    ...      "reading": {"kind": "single", "top": 3, "size": 1, "counts": [0, 1, 0, 0], "xiang": None,
    ...                  "jokers_as": []}}
    >>> compact_event(e)
    {'seq': 7, 'type': 'CardsPlayed', 'reading': {'kind': 'single', 'top': 3, 'size': 1, 'counts': [0, 1]}}
    >>> full = expand_event(compact_event(e), "m", "c")
    >>> full["reading"]["jokers_as"], len(full["reading"]["counts"]), full["by"]
    ([], 15, 'player')
    """
    out = {k: v for k, v in data.items() if k not in _UPDATE_DROPS}
    if out.get("by") == _DEFAULT_ACTOR:
        del out["by"]
    reading = out.get("reading")
    if isinstance(reading, dict):
        reading = {k: v for k, v in reading.items() if not (k in _READING_DEFAULTS and v in (None, [], ()))}
        counts = reading.get("counts")
        if isinstance(counts, (list, tuple)):
            n = len(counts)
            while n and counts[n - 1] == 0:
                n -= 1
            reading["counts"] = list(counts[:n])
        out["reading"] = reading
    return out


def expand_event(data: dict[str, Any], match_id: str, command_id: str, seq: int | None = None,
                 ts: int | None = None) -> dict[str, Any]:
    """An event of a compact update in its full redacted form (what :func:`compact_event`
    and :func:`compact_body` dropped; ``seq``/``ts`` fill in those the update left out)."""
    out = {"match_id": match_id, "command_id": command_id, "v": SCHEMA_VERSION, **data}
    if "seq" not in out and seq is not None:
        out["seq"] = seq
    if "ts" not in out and ts is not None:
        out["ts"] = ts
    if out.get("type") in ("CardsPlayed", "Passed"):
        out.setdefault("by", _DEFAULT_ACTOR)
    reading = out.get("reading")
    if isinstance(reading, dict):
        full = {**{k: (list(v) if isinstance(v, list) else v) for k, v in _READING_DEFAULTS.items()}, **reading}
        counts = full.get("counts")
        if isinstance(counts, list) and len(counts) < NUM_RANKS:
            full["counts"] = counts + [0] * (NUM_RANKS - len(counts))
        out["reading"] = full
    return out


def compact_body(events: Sequence[dict[str, Any]], duplicate: bool) -> dict[str, Any]:
    """The ``events`` part of an update's body: each event compact (:func:`compact_event`);
    unless the update is a re-publication, without ``seq`` (the events are the versions
    ``version - len(events) + 1 … version``) and with one ``ts`` for the body when the
    events share it.  :func:`expand_events` undoes it.

    >>> body = compact_body([{"seq": 4, "ts": 9, "type": "Passed"}, {"seq": 5, "ts": 9, "type": "Passed"}], False)
    >>> body
    {'ts': 9, 'events': [{'type': 'Passed'}, {'type': 'Passed'}]}
    >>> [(e["seq"], e["ts"], e["by"]) for e in expand_events(body, "m", "c", 5)]
    [(4, 9, 'player'), (5, 9, 'player')]
    """
    compact = [compact_event(e) for e in events]
    body: dict[str, Any] = {}
    if duplicate:  # a re-publication: its events are older than ``version``, they keep their seq
        body["duplicate"] = True
    else:
        for e in compact:
            e.pop("seq", None)
        stamps = {e.get("ts") for e in compact}
        if len(stamps) == 1 and None not in stamps:
            body["ts"] = stamps.pop()
            for e in compact:
                del e["ts"]
    body["events"] = compact
    return body


def expand_events(body: dict[str, Any], match_id: str, command_id: str, version: int | None) -> list[Any]:
    """The full redacted events of a compact update's ``body`` (:func:`compact_body`)."""
    events = body.get("events")
    if not isinstance(events, list):
        return []
    first = None if version is None or body.get("duplicate") else int(version) - len(events) + 1
    ts = body.get("ts")
    return [expand_event(e, match_id, command_id, None if first is None else first + i, ts)
            if isinstance(e, dict) else e for i, e in enumerate(events)]


#: a brief reading's fields at their defaults, left out of the stored brief (:func:`compact_brief`)
_BRIEF_READING_DEFAULTS: dict[str, Any] = {"xiang": None, "chain": None, "regular": None, "m": None,
                                           "bomb_sizes": None, "jokers_as": []}


#: the order of a brief's fields in its stored form (:func:`compact_brief`)
_BRIEF_FIELDS = ("phase", "turn", "trick", "deadline_ms", "cards_left", "last_play", "hand", "trick_plays")


def compact_brief(brief: dict[str, Any]) -> list[Any]:
    """A brief (``projections.views.brief``) as an update's body stores it: its fields in the
    order of :data:`_BRIEF_FIELDS` without the ``version`` (the entry's own field), the play to
    beat as ``[player, cards, reading]``, the reading as ``[kind, rank, size]`` and a map of
    its other fields that are not at their defaults, when there are any, and of the trick's
    plays only those before the play to beat (which is the trick's last), each as
    ``[player, cards, kind, rank, xiang]`` (30-170 bytes of msgpack, 54 on average: the hand
    costs one byte a card; each of the trick's earlier plays adds its own, 19 bytes a single
    of ``alice``).  :func:`expand_brief` undoes it.

    >>> b = {"version": 9, "phase": "playing", "turn": "b", "trick": 1, "deadline_ms": 5, "cards_left": {"a": 26},
    ...      "last_play": {"player": "a", "cards": [0], "reading": {"kind": "single", "rank": "3", "size": 1,
    ...                    "xiang": None, "chain": None, "regular": None, "m": None, "bomb_sizes": None,
    ...                    "jokers_as": []}}, "hand": [4, 5],
    ...      "trick_plays": [{"player": "a", "cards": [0], "reading": {"kind": "single", "rank": "3", "xiang": None}}]}
    >>> compact_brief(b)
    ['playing', 'b', 1, 5, {'a': 26}, ['a', [0], ['single', '3', 1]], [4, 5], []]
    >>> expand_brief(compact_brief(b), 9) == b
    True
    """
    out = [brief.get(k) for k in _BRIEF_FIELDS]
    lp = brief["last_play"]
    if lp is not None:
        r = lp["reading"]
        extra = {k: v for k, v in r.items()
                 if k in _BRIEF_READING_DEFAULTS and v != _BRIEF_READING_DEFAULTS[k]}
        out[5] = [lp["player"], lp["cards"], [r["kind"], r["rank"], r["size"], *([extra] if extra else [])]]
    plays = brief.get("trick_plays") or []
    out[7] = [[p["player"], p["cards"], p["reading"]["kind"], p["reading"]["rank"], p["reading"]["xiang"]]
              for p in plays[:-1]]
    return out


def stored_brief(state: MatchState) -> list[Any]:
    """``compact_brief(brief(state))`` built straight from the state, without the brief's
    dicts (the hand None: the publisher puts each recipient's in).

    >>> from engine.match.state import Seat
    >>> from projections.views import brief
    >>> st = MatchState(match_id="m", phase="playing", seats=(Seat(player="a", hand=(3, 1)), Seat(player="b")))
    >>> stored_brief(st) == compact_brief(brief(st))
    True
    """
    lp = state.to_beat
    last = None
    if lp is not None:
        r = lp.combo.to_json()
        extra = {k: v for k, v in r.items()
                 if k in _BRIEF_READING_DEFAULTS and v != _BRIEF_READING_DEFAULTS[k]}
        s = state.seats[lp.seat]
        last = [s.player if s is not None else "", list(lp.cards),
                [r["kind"], r["rank"], r["size"], *([extra] if extra else [])]]
    n = state.trick_plays
    earlier: list[Any] = []
    if n > 1:
        seats = state.seats
        for p in state.history[len(state.history) - n:-1]:
            s = seats[p.seat]
            earlier.append([s.player if s is not None else "", list(p.cards), p.kind, RANK_LABELS[p.top], p.xiang])
    at = state.deadline_at if state.deadline_kind is not None else None
    return [state.phase, state.current_player, state.trick, at,
            {s.player: len(s.hand) for s in state.seats if s is not None}, last, None, earlier]


def expand_brief(stored: list[Any], version: int) -> dict[str, Any]:
    """The full brief of an update from its stored form (:func:`compact_brief`) and the entry's
    version (one stored by an engine before ``hand`` and ``trick_plays``: no hand, the play to
    beat as the trick's only known play)."""
    out: dict[str, Any] = {"version": version, **dict(zip(_BRIEF_FIELDS, stored))}
    out.setdefault("hand", None)
    earlier = out.get("trick_plays") or []
    plays: list[dict[str, Any]] = [{"player": p[0], "cards": list(p[1]),
                                    "reading": {"kind": p[2], "rank": p[3], "xiang": p[4]}} for p in earlier]
    lp = out.get("last_play")
    if isinstance(lp, (list, tuple)) and len(lp) == 3:
        kind, rank, size, *extra = lp[2]
        defaults = {k: (list(v) if isinstance(v, list) else v) for k, v in _BRIEF_READING_DEFAULTS.items()}
        reading = {"kind": kind, "rank": rank, "size": size, **defaults, **(extra[0] if extra else {})}
        out["last_play"] = {"player": lp[0], "cards": list(lp[1]), "reading": reading}
        plays.append({"player": lp[0], "cards": list(lp[1]),
                      "reading": {"kind": kind, "rank": rank, "xiang": reading["xiang"]}})
    if isinstance(out.get("hand"), (list, tuple)):
        out["hand"] = list(out["hand"])
    out["trick_plays"] = plays
    return out


def _kinds() -> tuple[str, ...]:
    from typing import get_args

    from engine.rules.combo import Kind

    return tuple(get_args(Kind))


#: a reading's kinds in the order a stored history row names them (:func:`compact_view`)
_KINDS = _kinds()
_KIND_INDEX = {k: i for i, k in enumerate(_KINDS)}


def compact_view(view: dict[str, Any]) -> dict[str, Any]:
    """A view as an outbox entry stores it: its ``history`` (every play of the match) as rows
    ``[trick, seat, cards, kind index, top rank index, xiang]`` -- about 10 bytes of msgpack a
    play instead of 75; the rest as it is (a copy when it changes).  :func:`expand_view` undoes it.

    >>> v = {"seats": [{"player": "a"}, {"player": "b"}], "history": [
    ...     {"trick": 1, "player": "b", "cards": [28, 29, 82, 83], "reading": {"kind": "bomb", "rank": "10", "xiang": 4}}]}
    >>> compact_view(v)["history"]
    [[1, 1, [28, 29, 82, 83], 6, 7, 4]]
    >>> expand_view(compact_view(v)) == v
    True
    """
    history = view.get("history")
    if not history:
        return view
    seat_of = {s["player"]: i for i, s in enumerate(view.get("seats") or ()) if s is not None}
    rows = [[p["trick"], seat_of[p["player"]], p["cards"], _KINDS.index(p["reading"]["kind"]),
             RANK_LABELS.index(p["reading"]["rank"]), p["reading"]["xiang"]] for p in history]
    return {**view, "history": rows}


def history_rows(state: MatchState) -> list[Any] | None:
    """``compact_view(view_for(state, …))["history"]`` straight from the state's plays (the
    same for every recipient); None when a play's seat is empty (then only
    :func:`compact_view` says what the view stores).

    >>> from engine.match.state import PlayRecord, Seat
    >>> from projections.views import view_for
    >>> st = MatchState(match_id="m", seats=(Seat(player="a"), Seat(player="b")),
    ...                 history=(PlayRecord(1, 1, (28, 29, 82, 83), "bomb", 7, 4),))
    >>> history_rows(st) == compact_view(view_for(st, "a"))["history"]
    True
    """
    seats = state.seats
    rows: list[Any] = []
    for p in state.history:
        if seats[p.seat] is None:
            return None
        rows.append([p.trick, p.seat, list(p.cards), _KIND_INDEX[p.kind], p.top, p.xiang])
    return rows


def expand_view(view: Any) -> Any:
    """The full view of an outbox entry's stored one (:func:`compact_view`); any other value as it is."""
    if not isinstance(view, dict):
        return view
    history = view.get("history")
    if not history or not isinstance(history[0], (list, tuple)):
        return view
    seats = view.get("seats") or ()
    out = []
    for trick, seat, cards, kind, top, xiang in history:
        s = seats[seat] if 0 <= seat < len(seats) else None
        out.append({"trick": trick, "player": s["player"] if s else "", "cards": list(cards),
                    "reading": {"kind": _KINDS[kind], "rank": RANK_LABELS[top], "xiang": xiang}})
    return {**view, "history": out}


def rejection_fields(match_id: str | None, cmd_id: str | None, code: str, reason: str) -> dict[str, Any]:
    return {"kind": "rejected", "match": match_id or "", "command_id": cmd_id or "",
            "code": code, "reason": safe_text(reason)}


#: an inbox entry larger than this (all its fields) is never kept whole: its dead letter is a record of
#: its size and the first DEAD_HEAD_BYTES of each field (issue 23 item 7)
MAX_ENTRY_BYTES = MAX_COMMAND_BYTES
DEAD_HEAD_BYTES = 1024
DEFAULT_DEAD_MAXLEN = 10_000  # sk:dead keeps about this many dead letters (serve --dead-maxlen)


def entry_bytes(fields: dict[str, Any]) -> int:
    """The size of an inbox entry: its field names and values (bytes or text).

    >>> entry_bytes({"c": b"x" * 10, "reply_to": "sk:reply:g"})
    29
    """
    return sum(len(k) + (len(v) if isinstance(v, (bytes, str)) else len(str(v))) for k, v in fields.items())


def dead_record(fields: dict[str, Any]) -> dict[str, Any]:
    """What a dead letter keeps of an entry: the entry itself when it is at most
    :data:`MAX_ENTRY_BYTES`, else ``entry_bytes`` and, per field, its first
    :data:`DEAD_HEAD_BYTES` and its size (``<field>_bytes``), marked ``truncated``.

    >>> r = dead_record({"c": b"x" * 100_000})
    >>> len(r["c"]), r["c_bytes"], r["entry_bytes"], r["truncated"]
    (1024, 100000, 100001, '1')
    >>> dead_record({"c": b"abc"})
    {'c': b'abc'}
    """
    total = entry_bytes(fields)
    out: dict[str, Any] = {}
    for k, v in fields.items():
        if isinstance(v, str):
            v = safe_text(v, MAX_ENTRY_BYTES + 1)
        if total > MAX_ENTRY_BYTES and isinstance(v, (bytes, str)) and len(v) > DEAD_HEAD_BYTES:
            out[f"{k}_bytes"] = len(fields[k])
            v = v[:DEAD_HEAD_BYTES]
        out[k] = v
    if total > MAX_ENTRY_BYTES:
        out["entry_bytes"] = total
        out["truncated"] = "1"
    return out


class Publisher:
    """Builds and writes the outputs of commands (updates, rejections, replies, dead letters).

    ``consumer`` names the writer in dead letters; ``on_dead(code, reason)`` is
    called for each dead letter (a metric); ``stats`` is shared with the inbox consumer.
    """

    def __init__(self, redis_client: redis.Redis, *, consumer: str, stats: GatewayStats | None = None,
                 outbox_maxlen: int = DEFAULT_OUTBOX_MAXLEN, outbox_ttl: int | None = DEFAULT_OUTBOX_TTL,
                 full_view_every: int = DEFAULT_FULL_VIEW_EVERY, dead_maxlen: int = DEFAULT_DEAD_MAXLEN,
                 on_dead: Callable[[str, str], None] | None = None):
        if outbox_maxlen < 1:
            raise ValueError(f"outbox_maxlen must be at least 1, got {outbox_maxlen}")
        if outbox_ttl is not None and outbox_ttl < 1:
            raise ValueError(f"outbox_ttl must be at least 1 s (or None: never expire), got {outbox_ttl}")
        self.redis = redis_client
        self.consumer = consumer
        self.stats = stats if stats is not None else GatewayStats()
        self.outbox_maxlen = outbox_maxlen
        #: seconds an outbox or reply stream lives after its last entry (None: for ever)
        self.outbox_ttl = outbox_ttl
        #: a player's update carries the full view when it crosses a multiple of this
        #: version (and on a join, the deal, the finish, a duplicate); 1: always
        self.full_view_every = max(1, int(full_view_every))
        self.dead_maxlen = dead_maxlen
        self.on_dead = on_dead
        #: per player: the hand tuple of the last state published and its cards in rank order
        self._hands: dict[str, tuple[tuple[int, ...], list[int]]] = {}

    def _delivery(self, stream: str, fields: dict[str, Any], version: int | None = None,
                  duplicate: bool = False) -> Write:
        """An entry of a player's outbox or of a reply stream (capped, expiring when idle; a
        reply stream is read by polling, never on notices: it gets none).  ``version``: an
        update of that version, fenced (:meth:`write`)."""
        return Write(stream, fields, self.outbox_maxlen, self.outbox_ttl,
                     notice=not stream.startswith(keys.REPLY_PREFIX), version=version, duplicate=duplicate)

    # -- writing --------------------------------------------------------------------------
    def write(self, writes: Sequence[Write], raise_on_error: bool = True, rider: wire.Rider | None = None) -> list[Any]:
        """The writes in order, one round trip per node (no MULTI: each stream is on its own),
        each followed by its notice (``SPUBLISH <stream> ""``: engine/store/keys.py "Notices";
        unless :attr:`Write.notice` is False).  Raises if any of them failed, or with
        ``raise_on_error=False`` returns each write's reply (an error reply as the exception);
        a connection failure raises.

        Sent packed by :func:`engine.store.wire.by_node` on each node's own connection (on a
        Redis Cluster: every node holding some of the streams, by the Cluster client's slot
        map, all written before any is read; a slot that moved or a node away: those writes
        through the Cluster client's pipeline, which follows and retries); for a client that
        module cannot serve, redis-py's pipeline (on a Cluster, split by node).

        A player's update (:attr:`Write.version` set) goes through engine/store/publish.lua: it
        is not written when the stream already holds the update of its version of its match, or
        any entry of a higher one -- a delayed write, or one of a replica that lost its bucket's
        lease, never takes a player back, and a round sent again after its reply was lost writes
        each update once.  Its reply is then :class:`Stale` (counted in
        :attr:`GatewayStats.fenced`; not an error: the newer writer published what the player
        needs).

        The script is called by EVALSHA for a stream's last write in ``writes``, by EVAL for an
        update that another write of its stream follows (a later update, a rejection, a sync).
        A node without the script (restarted, promoted, flushed) answers NOSCRIPT and runs
        nothing; those updates go again by EVAL after the round.  Nothing of their streams came
        after them in the round, so each stream keeps the order of ``writes``.

        ``rider`` (:class:`engine.store.wire.Rider`): taken by the round trip of the node it
        names, after that node's writes (the inbox's next read, :func:`engine.store.wire.by_node`)."""
        if not writes:
            return []
        commands: list[tuple[Any, ...]] = []
        routes: list[str] = []
        followed = _followed(writes)
        for k, w in enumerate(writes):
            flat = [x for kv in w.fields.items() for x in kv]
            if w.version is not None:
                call = ("EVAL", PUBLISH_LUA) if k in followed else ("EVALSHA", PUBLISH_SHA)
                commands.append((*call, 2, w.stream, keys.stream_fence_key(w.stream),
                                 w.fields.get("match", ""), int(w.version), "1" if w.duplicate else "0", w.maxlen,
                                 "" if w.ttl is None else int(w.ttl), "1" if w.notice else "0", *flat))
                routes.append(w.stream)
                continue
            if not flat:
                raise redis.DataError("XADD fields must be a non-empty dict")
            commands.append(("XADD", w.stream, "MAXLEN", "~", w.maxlen, "*", *flat))
            routes.append(w.stream)
            if w.ttl is not None:
                commands.append(("EXPIRE", w.stream, w.ttl))
                routes.append(w.stream)
            if w.notice:
                commands.append(("SPUBLISH", w.stream, ""))  # the notice: a reader's wake-up (keys.py "Notices")
                routes.append(w.stream)
        replies = self._send(commands, routes, rider)
        lost = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if lost:  # a node without the script: it ran none of them
            log.info("publish.lua: NOSCRIPT for %d update(s), sent again by EVAL", len(lost))
            again = self._send([("EVAL", PUBLISH_LUA, *commands[i][2:]) for i in lost], [routes[i] for i in lost])
            for i, reply in zip(lost, again):
                replies[i] = reply
        out: list[Any] = []
        at = 0
        for w in writes:  # one reply per write: the XADD's, or the error of its XADD or EXPIRE
            if w.version is not None:  # one script
                reply = _fenced_reply(replies[at])
                at += 1
                if isinstance(reply, Stale):
                    self.stats.fenced += 1
                    log.info("%s: update of %s at v%d not written, the stream is at v%d", w.stream,
                             text(w.fields.get("match", "")), w.version, reply.last)
                out.append(reply)
                continue
            n = 1 + (w.ttl is not None) + w.notice
            mine = replies[at:at + n]
            at += n
            if w.notice and isinstance(mine[-1], redis.exceptions.NoPermissionError):
                mine = mine[:-1]  # a notice an ACL refuses (an old one, mid-upgrade) only delays a reader
            errors = [r for r in mine if isinstance(r, Exception)]
            out.append(errors[0] if errors else mine[0])
        if raise_on_error:
            for r in out:
                if isinstance(r, Exception):
                    raise r
        return out

    def _send(self, commands: list[tuple[Any, ...]], routes: list[str], rider: wire.Rider | None = None) -> list[Any]:
        """Packed, one round trip per node (engine/store/wire.py); else redis-py's pipeline."""
        replies = wire.by_node(self.redis, commands, routes, rider)
        if replies is None:
            pipe = self.redis.pipeline(transaction=False)
            for c in commands:
                pipe.execute_command(*c)
            replies = pipe.execute(raise_on_error=False)
        return replies

    def publish(self, command: CommandBase, outcome: OutcomeLike, reply_to: str | None = None,
                msg_id: Any = None) -> None:
        """Publish one command's outcome: per-player ``update`` entries (each player's
        redacted events and view) or the sender's ``rejected`` entry, and the
        ``reply_to`` report when given.  The timer workers call this for the
        commands they run (no inbox message: ``reply_to`` and ``msg_id`` None)."""
        writes = self.outputs(command, outcome, reply_to, msg_id)
        self.write(writes)
        self.stats.published += len(writes)

    # -- building -------------------------------------------------------------------------
    def _wants_view(self, player: str, events: Sequence[EventBase], version: int, duplicate: bool) -> bool:
        """Does ``player``'s update carry the full view?  On a seating, the deal, the finish,
        a change of a player's status (:data:`_VIEW_EVENTS`), a duplicate (a re-publication:
        what came before may be lost), and whenever the update crosses a multiple of
        ``full_view_every`` (docs/PROTOCOL.md, "Resync")."""
        n = self.full_view_every
        if duplicate or n == 1:
            return True
        if (version - len(events)) // n != version // n:
            return True
        for e in events:
            if isinstance(e, _VIEW_EVENTS):
                return True
        return False

    def _own_hand(self, state: MatchState, player: str) -> list[int] | None:
        """:func:`projections.views.own_hand`, sorted again only when the player's hand
        changed (a hand is a new tuple whenever it does); never mutated by the caller."""
        me = state.seat_of(player)
        if me is None:
            return None
        hand = state.seat(me).hand
        kept = self._hands.get(player)
        if kept is not None and kept[0] is hand:
            return kept[1]
        if len(self._hands) >= HAND_CACHE_PLAYERS:
            self._hands.clear()
        ids = sort_cards(hand)
        self._hands[player] = (hand, ids)
        return ids

    def tally(self, command: CommandBase, outcome: OutcomeLike) -> None:
        """Count one outcome in :attr:`stats` (accepted, rejected or duplicate)."""
        if outcome.rejection is not None:
            self.stats.rejected += 1
        elif outcome.duplicate and not isinstance(command, Sync):
            self.stats.duplicates += 1
        else:
            self.stats.accepted += 1

    def outputs(self, command: CommandBase, outcome: OutcomeLike, reply_to: str | None = None,
                msg_id: Any = None, tally: bool = True) -> list[Write]:
        """The stream entries :meth:`publish` writes for one outcome (no I/O), counted in
        :attr:`stats` unless ``tally`` is False (:meth:`tally` then, once it is published)."""
        out: list[Write] = []
        cmd_id = command.command_id
        match_id = command.match_id
        rejection = outcome.rejection
        state = outcome.state
        version = int(state.version)
        if tally:
            self.tally(command, outcome)
        if rejection is not None:
            player = short_str(getattr(command, "player", None))
            if player is not None:
                fields = rejection_fields(match_id, cmd_id, rejection.code, rejection.reason)
                fields["version"] = version
                if version > 0:  # the player's current view: decide again on it
                    fields["body"] = pack({"match_id": match_id, "command_id": cmd_id, "version": version,
                                           "view": compact_view(view_for(state, player))})
                out.append(self._delivery(keys.outbox_key(player), fields))
            status = "rejected"
        elif isinstance(command, Sync):
            sync_body = {"match_id": match_id, "command_id": cmd_id, "version": version,
                         "view": compact_view(view_for(state, command.player))}
            out.append(self._delivery(keys.outbox_key(command.player),
                                      {"kind": "sync", "match": match_id, "command_id": cmd_id,
                                       "version": version, "body": pack(sync_body)}))
            status = "accepted"
        elif isinstance(command, Say):
            out.extend(self._delivery(keys.outbox_key(p), fields) for p, fields in say_entries(command, state))
            status = "accepted"
        else:
            status = "duplicate" if outcome.duplicate else "accepted"
            events = tuple(outcome.events)
            player = short_str(getattr(command, "player", None))
            if not events and isinstance(command, Ready) and player is not None:
                # a Ready that changed nothing (engine.match.decide.ready_changes_nothing): answered
                out.append(self._delivery(keys.outbox_key(player),
                                          {"kind": "ack", "match": match_id, "command_id": cmd_id,
                                           "version": version}))
            if events:
                duplicate = bool(outcome.duplicate)
                # what does not depend on the recipient, once per command (issue 13 §4): each
                # event's public fields, the whole body when no event is redacted per recipient,
                # whether it carries the view, and the player-independent part of the view
                publics = [public_event_dict(e) for e in events]
                shared = None if any(isinstance(e, _PER_RECIPIENT) for e in events) else compact_body(publics, duplicate)
                wants_view = self._wants_view("", events, version, duplicate)
                common: dict[str, Any] | None = None
                rows: list[Any] | None = None
                if wants_view:
                    rows = history_rows(state)
                    common = view_common(state, with_history=rows is None)
                # the brief (docs/PROTOCOL.md §8): all but the recipient's own hand is public
                brief_row = None if wants_view else stored_brief(state)
                for player in recipients(state, events):
                    # compact (docs/PROTOCOL.md "Updates"): the entry's fields say the match,
                    # the command and the version; the events follow ``version - len(events)``
                    if shared is not None:
                        body = dict(shared)
                    else:
                        body = compact_body([redact_event(e, player, state=state, public=pub)
                                             for e, pub in zip(events, publics)], duplicate)
                    if brief_row is None:  # no brief: the gateway reads it off the view
                        view = view_for(state, player, common)
                        body["view"] = compact_view(view) if rows is None else {**view, "history": rows}
                    else:
                        brief_row[6] = self._own_hand(state, player)
                        body["brief"] = brief_row
                    out.append(self._delivery(keys.outbox_key(player),
                                              {"kind": "update", "match": match_id, "command_id": cmd_id,
                                               "version": version, "body": pack(body)}, version, duplicate))
        if reply_to is not None:
            reply = {"kind": status, "match": match_id, "command_id": cmd_id, "version": version,
                     "inbox_id": msg_id if msg_id is not None else ""}
            if rejection is not None:
                reply["code"] = rejection.code
                reply["reason"] = safe_text(rejection.reason)
            out.append(self._delivery(reply_to, reply))
        return out

    def rejection_writes(self, msg_id: Any, reason: str, code: str, loose: dict[str, Any],
                         reply_to: str | None) -> list[Write]:
        """A refusal of a message that is not a valid command but names its sender (``loose``:
        its map as far as it could be read): a ``rejected`` entry on the player's stream
        and/or the reply stream; empty when nobody can be told (then: a dead letter)."""
        player = short_str(loose.get("player"))
        cmd_id = short_str(loose.get("command_id"))
        match_id = short_str(loose.get("match_id"))
        out: list[Write] = []
        if player is not None:
            out.append(self._delivery(keys.outbox_key(player), rejection_fields(match_id, cmd_id, code, reason)))
        if reply_to is not None:
            out.append(self._delivery(reply_to, {"kind": "rejected", "match": match_id or "",
                                                 "command_id": cmd_id or "", "code": code,
                                                 "reason": reason[:2000], "inbox_id": msg_id}))
        if out:
            self.stats.rejected += 1
        return out

    def dead_writes(self, msg_id: Any, fields: dict[str, Any], reason: str, loose: dict[str, Any] | None,
                    reply_to: str | None = None, code: str = BadCommand.code) -> list[Write]:
        """Dead-letter the message (:func:`dead_record`: never whole when over 64 KB) with its reason
        in ``sk:dead`` (about ``dead_maxlen`` kept), and tell the sender when it is
        identifiable (``loose``: the message's map as far as it could be read).  Counted
        and reported to ``on_dead`` now; written with the batch."""
        reason = safe_text(reason)
        self.stats.dead += 1
        log.warning("inbox %s dead-lettered: %s", text(msg_id), reason)
        if self.on_dead is not None:
            try:
                self.on_dead(code, reason)
            except Exception:
                log.exception("the on_dead callback failed")
        dead = dead_record(fields)
        dead.update({"dead_reason": reason[:2000], "dead_code": code, "inbox_id": msg_id,
                     "consumer": self.consumer, "dead_at_ms": int(time.time() * 1000)})
        out: list[Write] = [Write(keys.DEAD_LETTERS, dead, self.dead_maxlen)]
        loose = loose or {}
        player = short_str(loose.get("player"))
        cmd_id = short_str(loose.get("command_id"))
        match_id = short_str(loose.get("match_id"))
        if player is not None:
            out.append(self._delivery(keys.outbox_key(player), rejection_fields(match_id, cmd_id, code, reason)))
        if reply_to is not None:
            out.append(self._delivery(reply_to, {"kind": "dead", "match": match_id or "",
                                                 "command_id": cmd_id or "", "code": code,
                                                 "reason": reason[:2000], "inbox_id": msg_id}))
        return out


def say_entries(command: Say, state: Any) -> list[tuple[str, dict[str, Any]]]:
    """The ``say`` entries of an accepted Say: one on each seated player's stream (the sender's
    too; a spectator reads a player's), the body the message the gateway sends on
    (docs/PROTOCOL.md §8 "Quick phrases"); nothing in the match log.

    >>> from engine.match.state import MatchState, Seat
    >>> st = MatchState(match_id="m", phase="playing", seats=(Seat(player="a"), Seat(player="b")))
    >>> [(k, f["kind"]) for k, f in say_entries(Say(command_id="c", match_id="m", player="a", phrase="thanks"), st)]
    [('b', 'say'), ('a', 'say')]
    """
    message = {"kind": "say", "match": command.match_id, "player": command.player, "phrase": command.phrase}
    body = pack(message)
    players = state.players()
    others = [p for p in players if p != command.player]
    return [(p, {"kind": "say", "match": command.match_id, "command_id": command.command_id,
                 "version": int(state.version), "body": body})
            for p in [*others, command.player]]


def message_publisher(redis_client: redis.Redis, **delivery: Any) -> Callable[[str, dict[str, Any]], None]:
    """``publish(player, message)``: ``message`` (a dict with ``kind`` and ``match``) onto the
    player's update stream ``sk:out:{<player>}`` as an entry of that kind, its ``body`` the
    message (msgpack), with the stream's notice; the gateway sends the body on to the player's
    sockets (the ``rating`` message of a ranked room, projections/ladders.py)."""
    publisher = Publisher(redis_client, consumer="sk-projections", **delivery)

    def publish(player: str, message: dict[str, Any]) -> None:
        publisher.write([publisher._delivery(keys.outbox_key(player), {
            "kind": message["kind"], "match": message.get("match", ""), "command_id": "", "body": pack(message)})])

    return publish
