"""Redis Streams event store (docs/ARCHITECTURE.md "Redis layout"; keys in :mod:`engine.store.keys`).

One stream per match (entry id ``<seq>-1``, field ``e`` = msgpack event); the
append is one Lua script (``append.lua``) that checks the command id and the
expected version, XADDs the events, notifies the bucket feed (unless they are
only a match's moves and clock: :func:`engine.match.events.announced`), sets or clears
the deadline and records the command id.  Every match key one call touches shares
the bucket hash tag, so it works unchanged on Redis Cluster (give it a
``redis.cluster.RedisCluster`` client).  Works on fakeredis with Lua too.
An append may also carry the command's publication (the players' updates and the
reply: :attr:`~engine.store.base.AppendRequest.writes`), written in the same step once
the events are in: one round trip per command instead of two
(:meth:`RedisEventStore.can_carry`; on a Redis Cluster only the streams held by the
match's own node, :meth:`RedisEventStore.carries`).

The client must return bytes (``decode_responses=False``, the default).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import redis
from redis.exceptions import AskError, MovedError, NoScriptError, SlotNotCoveredError

from engine.match.events import EventBase, MatchFinished, announced, decode_event, encode_event
from engine.store import keys, replies, scripts, wire
from engine.store.connect import CLUSTER_RETRIED, is_cluster, node_client, refresh_slots
from engine.store.redis_errors import REDIS_FAILURES, is_transient
from engine.store.base import (
    AppendRequest,
    AppendResult,
    Deadline,
    EventStore,
    FeedEntry,
    Snapshot,
    Write,
    WrongVersion,
    check_append,
)

PAGE = 500


def _is_entry(item: Any) -> bool:
    return isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], (bytes, str))


def stream_replies(reply: Any) -> list[tuple[Any, list[tuple[Any, Any]]]]:
    """XREAD/XREADGROUP replies as ``[(stream, [(id, fields), …]), …]`` whatever the
    protocol: RESP2 gives ``[[stream, entries]]``, redis-py's RESP3 parser
    ``{stream: [entries]}`` (wrapped once more), its unified parser ``{stream: entries}``."""
    if not reply:
        return []
    items = reply.items() if isinstance(reply, dict) else reply
    out = []
    for stream, entries in items:
        if entries and not _is_entry(entries[0]) and isinstance(entries[0], (list, tuple)):
            entries = entries[0]
        out.append((stream, [(e[0], e[1]) for e in entries if e is not None]))
    return out


def entry_pairs(fields: Any) -> Any:
    """A stream entry's ``(field, value)`` pairs, from redis-py's map or a raw ``[field, value, …]``
    (:mod:`engine.store.wire`)."""
    return fields.items() if isinstance(fields, dict) else zip(fields[::2], fields[1::2])


class LayoutMismatch(RuntimeError):
    """This Redis holds a store laid out with another bucket count."""


def ensure_group(client: Any, stream: str, group: str) -> bool:
    """Create consumer group ``group`` on ``stream`` (and the stream) reading from its start;
    False when the group already existed."""
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
        return False
    return True


def append_fields(reply: Any) -> dict[str, Any]:
    """append.lua's reply (field/value pairs) by name: ``status`` (``ok``, ``duplicate``,
    ``wrong_version``) and its numbers (``version``, ``wrote``; ``first``, ``last``;
    ``actual``).

    >>> append_fields([b"status", b"ok", b"version", 7, b"wrote", 1])
    {'status': 'ok', 'version': 7, 'wrote': 1}
    """
    return {k: _s(v) if k == "status" else int(v) for k, v in replies.fields(reply).items()}


def _wrong_version(fields: dict[str, Any], match_id: str, expected_version: int) -> WrongVersion | None:
    """The WrongVersion an append script's reply stands for (None: appended or a duplicate)."""
    if fields["status"] != "wrong_version":
        return None
    return WrongVersion(match_id, expected_version, fields["actual"])


def _s(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _parse_info(match_id: str, raw: bytes | str) -> Deadline:
    version, kind, at_ms = _s(raw).split("|")
    return Deadline(match_id=match_id, version=int(version), at_ms=int(at_ms), kind=kind)  # type: ignore[arg-type]


class RedisEventStore(EventStore):
    def __init__(self, client: Any, buckets: int = keys.DEFAULT_BUCKETS,
                 feed_maxlen: int = 100_000, page: int = PAGE):
        """``client``: a ``redis.Redis`` (or fakeredis, or ``RedisCluster``) returning bytes."""
        if buckets < 1:
            raise ValueError("buckets must be >= 1")
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        if kwargs.get("decode_responses"):
            raise ValueError("RedisEventStore needs a client with decode_responses=False (events are bytes)")
        self.client = client
        self.buckets = buckets
        self.feed_maxlen = feed_maxlen
        self.page = page
        self._append = client.register_script(scripts.load("append.lua"))
        #: ``--replica-acks N`` (engine/store/replicas.py): an append returns once N replicas have it
        self.replica_acks: Any = None
        self._pool: Any = None  # threads sending several nodes' pipelines side by side (append_many)
        # per-match key cache: building 6 key strings per append is measurable
        self._keys: dict[str, tuple[int, list[bytes]]] = {}
        self._cluster = is_cluster(client)

    @classmethod
    def from_url(cls, url: str, buckets: int = keys.DEFAULT_BUCKETS, **kwargs: Any) -> RedisEventStore:
        """A store on ``redis://…`` (``rediss://``, ``unix://`` too; a Cluster node too); checks the bucket layout.

        Raises :class:`engine.store.connect.RedisUnavailable` when nothing usable answers."""
        from engine.store.connect import connect

        store = cls(connect(url), buckets=buckets, **kwargs)
        store.check_layout()
        return store

    def check_layout(self) -> None:
        """Record this store's bucket count in Redis, or refuse a different recorded one."""
        wanted = f"buckets={self.buckets}"
        found = _s(self.client.get(keys.LAYOUT) or b"")
        if not found:  # written once (SET NX); read-only users (replay, disputes) only read it
            self.client.set(keys.LAYOUT, wanted, nx=True)
            found = _s(self.client.get(keys.LAYOUT) or b"")
        if found != wanted:
            raise LayoutMismatch(f"this Redis is laid out with {found!r}, this store uses {wanted!r}")

    # -- keys ---------------------------------------------------------------------------
    def bucket_of(self, match_id: str) -> int:
        return keys.bucket_of(match_id, self.buckets)

    def _match_keys(self, match_id: str) -> tuple[int, list[bytes]]:
        cached = self._keys.get(match_id)
        if cached is None:
            b = self.bucket_of(match_id)
            cached = (b, [k.encode("utf-8") for k in (
                keys.events_key(match_id, b), keys.commands_key(match_id, b), keys.feed_key(b),
                keys.deadlines_key(b), keys.deadline_info_key(b), keys.matches_key(b))])
            if len(self._keys) > 10_000:
                self._keys.clear()
            self._keys[match_id] = cached
        return cached

    # -- EventStore ---------------------------------------------------------------------
    def append(self, match_id: str, expected_version: int, command_id: str,
               events: Sequence[EventBase], deadline: Deadline | None) -> AppendResult:
        check_append(match_id, expected_version, command_id, events, deadline)
        return self.append_encoded(match_id, expected_version, command_id,
                                   [encode_event(e) for e in events], deadline, events)

    def append_encoded(self, match_id: str, expected_version: int, command_id: str,
                       payloads: Sequence[bytes], deadline: Deadline | None,
                       events: Sequence[EventBase] | None = None, writes: Sequence[Write] = ()) -> AppendResult:
        """:meth:`append` with the events already msgpack-encoded (``encode_event``).

        No argument checks beyond what the script does; ``events`` (the decoded
        payloads; decoded from ``payloads`` if None) decide the feed entry and make the result;
        ``writes`` are carried (:attr:`AppendRequest.writes`; the caller checked
        :meth:`can_carry`).
        """
        _, ks = self._match_keys(match_id)
        if events is None:
            events = [decode_event(p) for p in payloads]
        args = self._script_args(match_id, expected_version, command_id, payloads, deadline, events, writes,
                                 self._cluster)
        fields = append_fields(self._run_append(ks, args))
        wrong = _wrong_version(fields, match_id, expected_version)
        if wrong is not None:
            raise wrong
        result = self._result(match_id, fields, events)
        if self.replica_acks is not None:
            self.replica_acks.confirm(ks[:1])
        return result

    def _run_append(self, script_keys: list[Any], args: list[Any]) -> Any:
        """append.lua by its SHA1, packed and sent by :mod:`engine.store.wire` to the node
        holding the match (on a Cluster: the node its slot map names), else straight through
        ``execute_command`` (what the registered script sends, without its per-call copies).
        A slot that moved or a node away on a Cluster: its slots are asked again and the call
        goes through the Cluster client, which follows and retries.  On NOSCRIPT (a new
        server, a SCRIPT FLUSH) the registered script loads it and runs it."""
        client = self.client
        try:
            node = node_client(client, script_keys[0])
            if node is None or not wire.usable(node):
                return client.execute_command("EVALSHA", self._append.sha, len(script_keys), *script_keys, *args)
            try:
                reply = wire.round_trip(node, [wire.pack("EVALSHA", self._append.sha, len(script_keys),
                                                         *script_keys, *args)])[0]
            except CLUSTER_RETRIED as exc:
                reply = exc
            if isinstance(reply, Exception):
                if isinstance(reply, CLUSTER_RETRIED) and refresh_slots(client, reply):
                    return client.execute_command("EVALSHA", self._append.sha, len(script_keys), *script_keys, *args)
                raise reply
            return reply
        except NoScriptError:
            return self._append(keys=script_keys, args=args)

    def confirm_replicated(self, match_id: str) -> None:
        """One INCR + WAIT on the node holding the match (with :attr:`replica_acks`): every
        write it made so far, the match's included, is on the replicas; NOREPLICAS otherwise."""
        if self.replica_acks is not None:
            self.replica_acks.confirm(self._match_keys(match_id)[1][:1])

    def can_carry(self, client: Any) -> bool:
        """Yes for writes to this store's own Redis (the same client or connection pool),
        unless writes wait for replicas (the updates must not be readable before the append
        is replicated).  On a Redis Cluster an append carries only what :meth:`carries`
        allows."""
        if self.replica_acks is not None:
            return False
        if client is self.client:
            return True
        pool = getattr(client, "connection_pool", None)
        return pool is not None and pool is getattr(self.client, "connection_pool", None)

    def carries(self, match_id: str, streams: Sequence[str]) -> list[bool]:
        """For each of ``streams``: may an append of ``match_id`` carry an entry of it?  On a
        plain Redis yes; on a Redis Cluster when its slot map places the stream on the node
        holding the match (append.lua reaches a key of another slot only on its own node; a
        map gone stale fails the carried writes there, and the caller publishes them)."""
        if not self._cluster:
            return [True] * len(streams)
        client = self.client
        try:
            home = client.get_node_from_key(self._match_keys(match_id)[1][0]).name
        except SlotNotCoveredError:  # no node holds the match's slot now: published the usual way
            return [False] * len(streams)
        out = []
        for stream in streams:
            try:
                out.append(client.get_node_from_key(stream).name == home)
            except SlotNotCoveredError:
                out.append(False)
        return out

    @staticmethod
    def _script_args(match_id: str, expected_version: int, command_id: str, payloads: Sequence[bytes],
                     deadline: Deadline | None, events: Sequence[EventBase],
                     writes: Sequence[Write] = (), fences: bool = False) -> list[Any]:
        """ARGV of append.lua for one command (its KEYS: the match's six); ``events`` are
        ``payloads`` decoded, ``writes`` the entries it carries; ``fences``: each carried
        update sets its stream's fence (on a Redis Cluster, where every other update is
        fenced by publish.lua: docs/CAPACITY.md "What a Cluster does differently")."""
        if deadline is None:
            at, info = "", ""
        else:
            at = str(deadline.at_ms)
            info = f"{deadline.version}|{deadline.kind}|{deadline.at_ms}"
        feed = ""  # no entry: no events, or only moves and clock (events.announced)
        if announced(events):  # the entry says whether this append finishes the match
            feed = "1" if isinstance(events[-1], MatchFinished) else "0"
        args: list[Any] = [match_id, str(expected_version), command_id, feed, at, info, len(payloads), *payloads,
                           len(writes)]
        for w in writes:
            fenced = fences and w.version is not None and not w.duplicate
            args += (w.stream, keys.stream_fence_key(w.stream) if fenced else "", w.version if fenced else "",
                     w.maxlen, "" if w.ttl is None else w.ttl, "1" if w.notice else "0", len(w.fields))
            for k, v in w.fields.items():
                args += (k, v)
        return args

    def _result(self, match_id: str, fields: dict[str, Any], events: Sequence[EventBase]) -> AppendResult:
        """The AppendResult of append.lua's reply, appended (``events``) or a duplicate
        (:func:`append_fields`; a duplicate's stored events are read)."""
        if fields["status"] == "ok":
            return AppendResult(version=fields["version"], duplicate=False, events=tuple(events),
                                wrote=fields["wrote"] == 1)
        lo, hi = fields["first"], fields["last"]
        stored = self._range(match_id, lo, hi) if hi >= lo else []
        return AppendResult(version=hi, duplicate=True, events=tuple(stored))

    def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult | Exception]:
        """Every request's append script in one pipeline per node (one round trip; on a
        Redis Cluster one plain pipeline to each node holding some of the matches, sent
        side by side: never redis-py's Cluster pipeline, which refuses a registered script).  With
        :attr:`replica_acks` each node's pipeline ends with its own ``INCR`` + ``WAIT``:
        a node whose replicas fall short turns its requests' results into a transient
        ``NOREPLICAS`` error, and only its own (issue 35 §3).

        Each reply stands alone: an :class:`AppendResult`, a :class:`WrongVersion`, or
        the error Redis answered for that script (e.g. NOSCRIPT after a SCRIPT FLUSH, OOM,
        MOVED mid-fail-over): the caller runs that one again on its own.  A connection
        failure raises when every request was on that node; with several nodes it is the
        error of that node's requests (some of the scripts may have run: their command
        ids make a retry a duplicate)."""
        if not requests:
            return []
        for rq in requests:
            check_append(rq.match_id, rq.expected_version, rq.command_id, rq.events, rq.deadline)
            if rq.writes and not self.can_carry(self.client):
                raise ValueError("a Redis Cluster store cannot carry writes with an append")
        if len(requests) == 1 and self.replica_acks is None:  # one script call (it loads the script on NOSCRIPT)
            rq = requests[0]
            try:
                return [self.append_encoded(rq.match_id, rq.expected_version, rq.command_id,
                                            [encode_event(e) for e in rq.events], rq.deadline, rq.events,
                                            rq.writes)]
            except WrongVersion as exc:
                return [exc]
            except redis.ResponseError as exc:  # the request's error, as in a pipelined round
                return [exc]
        encoded = [[encode_event(e) for e in rq.events] for rq in requests]
        out: list[AppendResult | Exception | None] = [None] * len(requests)
        groups = self._by_node(requests)
        if len(groups) == 1:
            node, idxs = groups[0]
            self._append_on(node, idxs, requests, encoded, out)
        else:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sk-append")
            futures = [(idxs, self._pool.submit(self._append_on, node, idxs, requests, encoded, out))
                       for node, idxs in groups]
            for idxs, fut in futures:
                try:
                    fut.result()
                except Exception as exc:  # that node's requests only (another node's stand)
                    for i in idxs:
                        out[i] = exc
        return [r if r is not None else RuntimeError("not appended") for r in out]

    def _by_node(self, requests: Sequence[AppendRequest]) -> list[tuple[Any, list[int]]]:
        """``(client of one node, indexes of the requests whose match it holds)`` per node."""
        if not is_cluster(self.client):
            return [(self.client, list(range(len(requests))))]
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i, rq in enumerate(requests):
            node = self.client.get_node_from_key(self._match_keys(rq.match_id)[1][0])
            if node.name not in groups:
                groups[node.name] = (self.client.get_redis_connection(node), [])
            groups[node.name][1].append(i)
        return list(groups.values())

    def _append_on(self, node: Any, idxs: Sequence[int], requests: Sequence[AppendRequest],
                   encoded: Sequence[list[bytes]], out: list[AppendResult | Exception | None],
                   loaded: bool = False) -> None:
        """One node's pipeline: its requests' scripts, then (with replica acks) INCR + WAIT.
        A node that knows no append script (NOSCRIPT for every request: none ran) is given
        it and sent the pipeline again, once."""
        direct = wire.usable(node)  # packed, one write (engine/store/wire.py): one node's, or a Cluster node's
        commands: list[tuple[Any, ...]] = []
        sha = self._append.sha
        for i in idxs:
            rq = requests[i]
            _, ks = self._match_keys(rq.match_id)
            args = self._script_args(rq.match_id, rq.expected_version, rq.command_id, encoded[i],
                                     rq.deadline, rq.events, rq.writes, self._cluster)
            # EVALSHA directly (not Script(client=pipe)): a registered script makes the
            # pipeline ask SCRIPT EXISTS first, a second round trip; NOSCRIPT comes back
            # as that request's error and the caller appends it alone (which loads it)
            commands.append(("EVALSHA", sha, len(ks), *ks, *args))
        waiter = self.replica_acks
        wait_key = ""
        if waiter is not None and waiter.n > 0:
            from engine.store.replicas import marker_key

            wait_key = _s(self._match_keys(requests[idxs[0]].match_id)[1][0])
            commands.append(("INCR", marker_key(wait_key)))  # this connection's write: WAIT covers all before it
            commands.append(("WAIT", waiter.n, waiter.timeout_ms))
        started = time.perf_counter()
        try:
            if direct:
                replies = wire.round_trip(node, [wire.pack(*c) for c in commands])
            else:
                pipe = node.pipeline(transaction=False)
                for c in commands:
                    pipe.execute_command(*c)
                replies = pipe.execute(raise_on_error=False)
        except REDIS_FAILURES as exc:
            refresh_slots(self.client, exc)  # a Cluster's node away: the caller's retry finds the slot's node anew
            raise
        if not loaded and all(isinstance(r, NoScriptError) for r in replies[:len(idxs)]):
            node.script_load(self._append.script)  # a new node, or after SCRIPT FLUSH
            self._append_on(node, idxs, requests, encoded, out, loaded=True)
            return
        shortfall: Exception | None = None
        if wait_key:
            assert waiter is not None
            incr, got = replies[-2], replies[-1]
            replies = replies[:-2]
            waiter.waits += 1
            shortfall = incr if isinstance(incr, Exception) else waiter.shortfall(wait_key, got)
            waiter.report("ok" if shortfall is None else "noreplicas", time.perf_counter() - started)
        moved: Exception | None = None
        for i, reply in zip(idxs, replies):
            rq = requests[i]
            if isinstance(reply, Exception):
                if moved is None and isinstance(reply, (MovedError, AskError)):
                    moved = reply
                out[i] = reply
                continue
            fields = append_fields(reply)
            wrong = _wrong_version(fields, rq.match_id, rq.expected_version)
            if wrong is not None:
                out[i] = wrong  # nothing written: the caller decides again
            elif shortfall is not None:
                out[i] = shortfall  # written, not known to be on the replicas: not acknowledged
            else:
                out[i] = self._result(rq.match_id, fields, rq.events)
        if moved is not None:  # a fail-over moved a slot: learn where before the caller runs those requests alone
            refresh_slots(self.client, moved)

    def _range(self, match_id: str, first: int, last: int | None) -> list[EventBase]:
        """Events with first <= seq <= last (last None: to the end), paged."""
        _, ks = self._match_keys(match_id)
        end = "+" if last is None else keys.entry_id(last)
        out: list[EventBase] = []
        start = f"{first}-0"
        direct = wire.usable(self.client)  # packed, the raw reply: [[id, [field, value, …]], …]
        while True:
            if direct:
                page = wire.checked(self.client, [wire.pack("XRANGE", ks[0], start, end, "COUNT", self.page)])[0]
                for _entry_id, fields in page:
                    out.append(decode_event(_field(fields, b"e")))
            else:
                page = self.client.xrange(ks[0], min=start, max=end, count=self.page)
                for _entry_id, fields in page:
                    out.append(decode_event(fields[b"e"]))
            if len(page) < self.page:
                return out
            start = f"{keys.seq_of(page[-1][0]) + 1}-0"

    def load(self, match_id: str, after: int = 0) -> list[EventBase]:
        if after < 0:
            raise ValueError("after must be >= 0")
        return self._range(match_id, after + 1, None)

    def load_range(self, match_id: str, first: int, last: int) -> list[EventBase]:
        return self._range(match_id, max(first, 1), last) if last >= first else []

    def command_range(self, match_id: str, command_id: str) -> tuple[int, int] | None:
        _, ks = self._match_keys(match_id)
        raw = self.client.hget(ks[1], command_id)
        if raw is None:
            return None
        first, _, last = _s(raw).partition("-")
        return int(first), int(last)

    def delete_match(self, match_id: str) -> None:
        """Remove every key of a match (its events, command ids, snapshot, deadline and
        membership of its bucket): ``shuangkou archive`` does this after exporting it.
        One MULTI: the keys share the bucket's hash tag."""
        b, ks = self._match_keys(match_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(ks[0], ks[1], keys.snapshot_key(match_id, b))
        pipe.zrem(ks[3], match_id)
        pipe.hdel(ks[4], match_id)
        pipe.srem(ks[5], match_id)
        pipe.execute()
        self._keys.pop(match_id, None)

    def version(self, match_id: str) -> int:
        _, ks = self._match_keys(match_id)
        last = self.client.xrevrange(ks[0], max="+", min="-", count=1)
        return keys.seq_of(last[0][0]) if last else 0

    def match_ids(self) -> Iterator[str]:
        for b in range(self.buckets):
            for member in self.client.sscan_iter(keys.matches_key(b), count=500):
                yield _s(member)

    def due_deadlines(self, now_ms: int, limit: int = 100) -> list[Deadline]:
        """Due deadlines of every bucket (two pipelines).  On a Cluster, a node that cannot
        answer (cut off, failing over) holds back only its own buckets': they are read one
        by one and the failing ones skipped (none answering: the error is raised)."""
        members = self._by_bucket(range(self.buckets), lambda c, b: c.zrangebyscore(
            keys.deadlines_key(b), "-inf", now_ms, start=0, num=limit))
        asked = {b: [_s(m) for m in ms] for b, ms in members.items() if ms}
        if not asked:
            return []
        infos_of = self._by_bucket(asked, lambda c, b: c.hmget(keys.deadline_info_key(b), asked[b]))
        due: list[Deadline] = []
        for ids, infos in ((asked[b], infos) for b, infos in infos_of.items()):
            for match_id, raw in zip(ids, infos):
                # the hash is the truth: a deadline replaced or cleared between the
                # two reads shows up here as a later at_ms or as nothing
                if raw is None:
                    continue
                d = _parse_info(match_id, raw)
                if d.at_ms <= now_ms:
                    due.append(d)
        due.sort(key=lambda d: (d.at_ms, d.match_id.encode("utf-8")))
        return due[:limit]

    def _by_bucket(self, buckets: Iterable[int], call: Callable[[Any, int], Any]) -> dict[int, Any]:
        """``call(client_or_pipeline, bucket)`` for each bucket, in one pipeline; on a Cluster
        whose pipeline fails for a transient reason, bucket by bucket, without the failing
        ones (all failing: the first error is raised)."""
        wanted = list(buckets)
        try:
            pipe = self.client.pipeline(transaction=False)
            for b in wanted:
                call(pipe, b)
            return dict(zip(wanted, pipe.execute()))
        except Exception as exc:
            if not is_cluster(self.client) or not is_transient(exc):
                raise
            first: Exception = exc
        out: dict[int, Any] = {}
        for b in wanted:
            try:
                out[b] = call(self.client, b)
            except Exception as exc:
                if not is_transient(exc):
                    raise
        if not out and wanted:
            raise first
        return out

    def deadline(self, match_id: str) -> Deadline | None:
        b = self.bucket_of(match_id)
        raw = self.client.hget(keys.deadline_info_key(b), match_id)
        return None if raw is None else _parse_info(match_id, raw)

    def save_snapshot(self, match_id: str, snapshot: Snapshot) -> None:
        b = self.bucket_of(match_id)
        self.client.set(keys.snapshot_key(match_id, b), snapshot.pack())

    def load_snapshot(self, match_id: str) -> Snapshot | None:
        b = self.bucket_of(match_id)
        raw = self.client.get(keys.snapshot_key(match_id, b))
        return None if raw is None else Snapshot.unpack(raw)

    def read_feed(self, bucket: int, after: str = "0-0", count: int = 1000) -> list[FeedEntry]:
        # exclusive start "(id" needs Redis >= 6.2; XREAD is exclusive on every version
        reply = self.client.xread({keys.feed_key(bucket): after}, count=count)
        out: list[FeedEntry] = []
        for _stream, entries in stream_replies(reply):
            for entry_id, f in entries:
                fin = f.get(b"fin")
                out.append(FeedEntry(id=_s(entry_id), match_id=_s(f[b"match"]),
                                     first=int(f[b"from"]), last=int(f[b"to"]),
                                     finished=None if fin is None else fin == b"1"))
        return out


def _field(flat: Sequence[Any], name: bytes) -> Any:
    """The value of field ``name`` in a stream entry's raw ``[field, value, …]`` (KeyError: none)."""
    for i in range(0, len(flat) - 1, 2):
        if flat[i] == name:
            return flat[i + 1]
    raise KeyError(name)
