"""The event store contract: one interface, an in-memory and a Redis Streams
implementation, one contract test suite (tests/test_store_contract.py).

An append is atomic: it checks the command id and the expected version, adds
the events, adds a notification to the match's bucket feed (unless the events are
only a match's moves and clock: :func:`engine.match.events.announced`) and records the
match's next deadline (or clears it) — all or nothing.

Matches are spread over ``buckets`` (``bucket_of(match_id)``); each bucket has
a feed (one :class:`FeedEntry` per append of announced events) that projections
and the lobby follow, and a deadline index that the sweeper reads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack

from engine.match.deadline import Deadline
from engine.match.events import EventBase


class StreamTrimmed(LookupError):
    """The events after ``after`` start at ``first``: those before were archived (a room's
    queue, engine/store/lobby_store.py ``trim``) or deleted (a stream tampered with); a state
    is folded only from a snapshot at or after ``first - 1`` (engine/service/command_service.py
    ``load``)."""

    def __init__(self, aggregate: str, after: int, first: int):
        super().__init__(f"{aggregate}: the events after {after} were archived up to {first - 1}")
        self.aggregate, self.after, self.first = aggregate, after, first


class WrongVersion(Exception):
    """Optimistic concurrency: the match moved on since it was loaded (reload, decide again)."""

    def __init__(self, match_id: str, expected: int, actual: int):
        super().__init__(f"match {match_id}: expected version {expected}, stream is at {actual}")
        self.match_id = match_id
        self.expected = expected
        self.actual = actual


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append did.

    On a duplicate command id nothing is appended and the *original* result
    comes back: ``version`` is the version right after that command's append
    (not necessarily the match's current version) and ``events`` are the
    stored events of that command.
    """

    version: int  # the match version after the append (after the original append on a duplicate)
    duplicate: bool  # the command id was already applied: nothing was appended
    events: tuple[EventBase, ...]  # the events of that command (the stored ones on a duplicate)
    #: the request's ``writes`` were written in the same step (never on a duplicate)
    wrote: bool = False


class Write(NamedTuple):
    """One stream entry to add: ``XADD stream MAXLEN ~ maxlen * fields``, then (``ttl``
    seconds given) ``EXPIRE stream ttl``: a delivery stream expires when idle; and its notice
    unless ``notice`` is False.  The
    publisher's unit (engine/service/publish.py); an append may carry some
    (:attr:`AppendRequest.writes`)."""

    stream: str
    fields: dict[str, Any]
    maxlen: int
    ttl: int | None = None
    #: then ``SPUBLISH stream ""`` (engine/store/keys.py "Notices": a gateway reads the stream
    #: when told); False for a stream read by polling (a reply stream): no notice
    notice: bool = True
    #: a player's ``update`` of match ``fields["match"]`` at this version: written only if the
    #: stream holds neither this version of the match nor a higher one (engine/store/publish.lua);
    #: None: not fenced
    version: int | None = None
    #: with ``version``: a re-publication (older events, marked duplicate): never refused
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """The arguments of one :meth:`EventStore.append`, for :meth:`EventStore.append_many`.

    ``writes``: stream entries to add in the append's own atomic step, only when the
    events are appended (not on a duplicate, not on a wrong version): the command's
    publication travels with its events, one round trip instead of two.  Only a store
    whose :meth:`EventStore.can_carry` says so takes them."""

    match_id: str
    expected_version: int
    command_id: str
    events: tuple[EventBase, ...]
    deadline: Deadline | None
    writes: tuple[Write, ...] = ()


@dataclass(frozen=True, slots=True)
class FeedEntry:
    """One notification of a bucket feed: events ``first``..``last`` of ``match_id`` were appended.

    ``id`` is the feed position (a Redis stream id ``"<ms>-<n>"``; the memory
    store uses ``"<n>-0"``); pass it back as ``after`` to read on.
    """

    id: str
    match_id: str
    first: int
    last: int
    #: the last of those events finishes the match (MatchFinished); None: the entry does not
    #: say (written before the append script marked it): read the match's tail to know
    finished: bool | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An aggregate's state at ``version``, in its state module's codec
    (engine.match.state.encode_state, engine.lobby.state.encode_queue).

    >>> Snapshot.unpack(Snapshot(3, b"s").pack())
    Snapshot(version=3, state=b's')
    """

    version: int
    state: bytes

    def pack(self) -> bytes:
        """The stored form: msgpack ``[version, state bytes]``."""
        return msgpack.packb([self.version, self.state], use_bin_type=True)  # type: ignore[no-any-return]

    @staticmethod
    def unpack(raw: bytes) -> Snapshot:
        version, state = msgpack.unpackb(raw, raw=False)
        return Snapshot(version=int(version), state=bytes(state))


def check_append(match_id: str, expected_version: int, command_id: str,
                 events: Sequence[EventBase], deadline: Deadline | None) -> None:
    """Argument checks shared by every implementation (a caller bug -> ValueError)."""
    if not match_id:
        raise ValueError("match_id must not be empty")
    if not command_id:
        raise ValueError("command_id must not be empty")
    if expected_version < 0:
        raise ValueError(f"expected_version must be >= 0, got {expected_version}")
    for i, event in enumerate(events):
        if event.match_id != match_id:
            raise ValueError(f"event {i} belongs to match {event.match_id!r}, not {match_id!r}")
        if event.seq != expected_version + 1 + i:
            raise ValueError(f"event {i} has seq {event.seq}, expected {expected_version + 1 + i}")
    if deadline is not None and deadline.match_id != match_id:
        raise ValueError(f"deadline is for match {deadline.match_id!r}, not {match_id!r}")


class EventStore(ABC):
    """Append-only per-match event streams plus feed, deadlines and snapshots."""

    #: number of buckets matches are spread over (feeds and deadline indexes are per bucket)
    buckets: int

    @abstractmethod
    def append(self, match_id: str, expected_version: int, command_id: str,
               events: Sequence[EventBase], deadline: Deadline | None) -> AppendResult:
        """Append ``events`` (seq expected_version+1 …) if the stream is at
        ``expected_version``; a command id seen before (for this match) returns
        its original result with ``duplicate=True`` and changes nothing — this is
        checked *before* the version, so a retry with a stale expected version
        is still recognised; else raise :class:`WrongVersion`.
        ``deadline`` replaces the match's recorded deadline (None clears it).

        ``events`` may be empty: the command id is then recorded and the
        deadline set, but no feed notification is written; nor is one for events
        that are not :func:`~engine.match.events.announced`.  Events must carry
        this match id and consecutive seqs from ``expected_version + 1``
        (ValueError otherwise)."""

    def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult | Exception]:
        """The appends of ``requests``, each on its own (not one transaction), in order: one
        result per request, an :class:`AppendResult` or the exception of that append
        (:class:`WrongVersion`, or an error the store answered for it).  The Redis store
        sends them in one pipeline.  A request's failure never stops the next one; the
        caller chains no two requests of one match (the second's expected version would
        rest on the first succeeding).  Argument errors (ValueError) and a lost
        connection raise.

        >>> from engine.store.memory import InMemoryEventStore
        >>> from engine.match.events import PlayerReady
        >>> s = InMemoryEventStore()
        >>> e = PlayerReady(match_id="m", seq=1, ts=0, command_id="c", player="a")
        >>> [type(r).__name__ for r in s.append_many([AppendRequest("m", 0, "c", (e,), None),
        ...                                            AppendRequest("m", 0, "d", (e,), None)])]
        ['AppendResult', 'WrongVersion']
        """
        out: list[AppendResult | Exception] = []
        for rq in requests:
            if rq.writes:
                raise ValueError(f"{type(self).__name__} cannot carry writes with an append (can_carry)")
            try:
                out.append(self.append(rq.match_id, rq.expected_version, rq.command_id, rq.events, rq.deadline))
            except WrongVersion as exc:
                out.append(exc)
        return out

    def can_carry(self, client: Any) -> bool:
        """Can an append carry :attr:`AppendRequest.writes` meant for the Redis ``client``
        (the publisher's)?  Only a store on that same Redis, where one script may touch
        both (on a Redis Cluster, only the streams :meth:`carries` allows).  Here: no."""
        return False

    def carries(self, match_id: str, streams: Sequence[str]) -> list[bool]:
        """For each of ``streams``: may an append of ``match_id`` carry an entry of it (with
        :meth:`can_carry`)?  Here: no."""
        return [False] * len(streams)

    @abstractmethod
    def load(self, match_id: str, after: int = 0) -> list[EventBase]:
        """Events with seq > ``after``, in order (paged internally)."""

    @abstractmethod
    def version(self, match_id: str) -> int:
        """Seq of the last event, 0 for an unknown match."""

    @abstractmethod
    def match_ids(self) -> Iterator[str]:
        """Every match the store holds."""

    @abstractmethod
    def due_deadlines(self, now_ms: int, limit: int = 100) -> list[Deadline]:
        """Recorded deadlines at or before ``now_ms``, earliest first."""

    @abstractmethod
    def deadline(self, match_id: str) -> Deadline | None:
        """The match's recorded deadline, if any."""

    @abstractmethod
    def save_snapshot(self, match_id: str, snapshot: Snapshot) -> None:
        """Store ``snapshot`` as the match's snapshot (replaces the previous one)."""

    @abstractmethod
    def load_snapshot(self, match_id: str) -> Snapshot | None:
        """The match's latest saved snapshot; replay ``load(match_id, after=snapshot.version)`` on top."""

    @abstractmethod
    def bucket_of(self, match_id: str) -> int:
        """The bucket (0 … ``buckets``-1) a match's feed notifications and deadline go to."""

    def command_range(self, match_id: str, command_id: str) -> tuple[int, int] | None:
        """The seqs ``(first, last)`` a command id appended (``first > last``: none), or None
        when the id was never applied.  Scans the stream here; the stores look it up."""
        seqs = [e.seq for e in self.load(match_id) if e.command_id == command_id]
        return (seqs[0], seqs[-1]) if seqs else None

    def load_range(self, match_id: str, first: int, last: int) -> list[EventBase]:
        """Events with ``first <= seq <= last``, in order (the stores read only those)."""
        return [e for e in self.load(match_id, after=max(first - 1, 0)) if e.seq <= last]

    def confirm_replicated(self, match_id: str) -> None:
        """Return once every write of ``match_id`` made so far is on the replicas this store
        waits for (``--replica-acks``; nothing to do here); a transient error otherwise.
        A ``duplicate`` found without an append is confirmed so before it is answered."""

    def command_events(self, match_id: str, command_id: str) -> list[EventBase]:
        """The events command ``command_id`` appended (empty: none, or never applied):
        :meth:`command_range`, then :meth:`load_range` of those seqs -- the cost of a
        lookup, not of the stream's length."""
        seqs = self.command_range(match_id, command_id)
        if seqs is None or seqs[0] > seqs[1]:
            return []
        return self.load_range(match_id, seqs[0], seqs[1])

    @abstractmethod
    def read_feed(self, bucket: int, after: str = "0-0", count: int = 1000) -> list[FeedEntry]:
        """Feed notifications of ``bucket`` after position ``after``, oldest first.
        Feeds are capped (old notifications may be trimmed): they say *what* changed;
        the events themselves are always in the match stream."""
