"""One gateway process's reader of every stream its sockets read: the fan-out.

The streams stay the source of truth (the player's ``sk:out:…`` updates and lobby messages,
the session stream); what changes is how a socket learns there is something new.  Instead
of one blocking ``XREAD`` per socket (one Redis connection each), the process holds:

* one **notice** subscription: every writer of such a stream also sends a sharded pub/sub
  message (``SPUBLISH <stream> ""``, docs/PROTOCOL.md §2 "Notices") on the channel named like the
  stream.  The fan-out ``SSUBSCRIBE``\\ s to the streams of its sockets: one connection on a
  single Redis, one per master on a Cluster (redis-py's ``ClusterPubSub``);
* a few **readers** that, on a notice, read the streams that have news from where each
  socket is, non-blocking, many streams in one pipeline, and queue the entries for the
  socket (its :class:`~gateway.reader.Subscription` hands them on, in order, once each).

So the connections are the notice connection(s) plus the client's pool (bounded by
``max_connections``, gateway/app.py), whatever the number of sockets.  A notice is only a
wake-up: one that is lost (a reconnect of the notice connection, a writer that does not
send them yet, during an upgrade) delays an entry by at most :data:`SWEEP_S`, when every
stream is read again anyway.  An entry is never lost or doubled by a notice: the positions
decide what is read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from engine.store.connect import is_cluster

log = logging.getLogger("shuangkou.gateway")

SWEEP_S = 1.0  # every stream is read at least this often, notice or not
COUNT = 100  # entries read per stream and round
BATCH = 500  # streams read in one pipeline
READERS = 2  # pipelines in flight at once
LISTEN_S = 0.1  # the notice loop's poll (subscriptions asked for meanwhile go out after it)
#: on a Cluster redis-py polls the nodes' notice connections in turn, each for this long: a
#: notice waits at most (nodes - 1) times it
CLUSTER_POLL_S = 0.01
#: one round (a pipeline: its write and every reply) that takes longer failed: its connection
#: is dropped and what it read is read again.  The hot client reads each reply with no timeout
#: of its own (gateway/app.py ``redis_client(hot=True)``): one per round is cheaper
ROUND_TIMEOUT_S = 30.0


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ("" if v is None else str(v))


class Reading(Protocol):
    """What the fan-out reads for (gateway/reader.py's ``Subscription``)."""

    def streams(self) -> Iterable[str]:
        """The streams read."""
        ...

    def cursor(self, stream: str) -> str | None:
        """The id to read ``stream`` after (None: not read any more)."""
        ...

    def generation(self) -> int:
        """Changes whenever the positions are set anew (a read begun before is dropped)."""
        ...

    def backlogged(self) -> bool:
        """Entries are queued and not handed on yet: read more once they are."""
        ...

    def received(self, stream: str, entries: list[tuple[str, dict]]) -> None:
        """New entries of ``stream``, oldest first, right after the cursor."""
        ...


class Fanout:
    def __init__(self, redis: Any, *, sweep_s: float | None = None):
        self.redis = redis
        self.cluster = is_cluster(redis)
        self.sweep_s = SWEEP_S if sweep_s is None else sweep_s
        self._readers: dict[str, set[Reading]] = {}  # stream -> who reads it
        self._dirty: dict[tuple[Reading, str], None] = {}  # (reader, stream) a notice asks to read, in order
        self._swept: dict[tuple[Reading, str], None] = {}  # the sweep's, read after the notices'
        self._inflight: set[tuple[Reading, str]] = set()
        #: (reader, stream)s whose XREAD was refused (a key of another type, say): read alone
        #: from then on, at the sweeps, so they neither hold up the streams they shared an
        #: XREAD with nor spin the reader; back with the others once a read of theirs succeeds
        self._alone: set[tuple[Reading, str]] = set()
        self._wake = asyncio.Event()
        self._subscribe: set[str] = set()  # channels to SSUBSCRIBE at the next turn of the notice loop
        self._unsubscribe: set[str] = set()
        self._tasks: list[asyncio.Task] = []
        #: the stopped tasks' wind-down (:meth:`_stop`): their end, then the notice connection's close
        self._winding: set[asyncio.Task] = set()
        self._pubsub: Any = None
        self.notices = 0  # notices received (tests, metrics)

    # -- who reads what -------------------------------------------------------------------
    def add(self, reading: Reading) -> None:
        """Start reading ``reading``'s streams (at once, and on every notice)."""
        self._ensure_running()
        for stream in reading.streams():
            holders = self._readers.setdefault(stream, set())
            if not holders:
                self._unsubscribe.discard(stream)
                self._subscribe.add(stream)
            holders.add(reading)
            self.mark(reading, stream)

    def remove(self, reading: Reading, streams: Iterable[str] | None = None) -> None:
        """Stop reading ``streams`` (all of them by default) for ``reading``."""
        for stream in list(self._readers) if streams is None else list(streams):
            holders = self._readers.get(stream)
            if holders is None or reading not in holders:
                continue
            holders.discard(reading)
            self._dirty.pop((reading, stream), None)
            self._swept.pop((reading, stream), None)
            self._alone.discard((reading, stream))
            if not holders:
                del self._readers[stream]
                self._subscribe.discard(stream)
                self._unsubscribe.add(stream)
        if not self._readers:
            self._stop()

    def update(self, reading: Reading) -> None:
        """``reading``'s streams or positions changed: read from the new ones."""
        now = set(reading.streams())
        old = [s for s, h in self._readers.items() if reading in h and s not in now]
        self.add(reading)
        self.remove(reading, old)

    def mark(self, reading: Reading, stream: str) -> None:
        """Read ``stream`` for ``reading`` at the next round."""
        self._dirty[(reading, stream)] = None
        self._wake.set()

    def kick(self) -> None:
        """A backlog was handed on: what waited for it may be read now."""
        if self._dirty or self._swept:
            self._wake.set()

    def _notice(self, stream: str) -> None:
        for reading in self._readers.get(stream, ()):
            self.mark(reading, stream)

    def _mark_all(self) -> None:
        """Read every stream (after the notices' reads: a sweep never delays a notice)."""
        for stream, holders in self._readers.items():
            for reading in holders:
                if (reading, stream) not in self._dirty:
                    self._swept[(reading, stream)] = None
        self._wake.set()

    # -- running --------------------------------------------------------------------------
    def _ensure_running(self) -> None:
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._listen()), loop.create_task(self._sweep())]
        self._tasks += [loop.create_task(self._read_loop()) for _ in range(READERS)]

    def _stop(self) -> None:
        """Nobody reads anything: stop the tasks and drop the notice connection."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        pubsub, self._pubsub = self._pubsub, None
        self._subscribe.clear()
        self._unsubscribe.clear()
        # the connection is closed once the cancelled tasks have ended: never while the notice
        # loop is still inside a read on it (the close waits for the read's lock)
        winding = asyncio.get_running_loop().create_task(_wind_down(tasks, pubsub))
        self._winding.add(winding)
        winding.add_done_callback(self._winding.discard)

    async def aclose(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        pubsub, self._pubsub = self._pubsub, None
        await _wind_down(tasks, pubsub)
        await asyncio.gather(*self._winding, return_exceptions=True)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_s)
            self._mark_all()

    async def _listen(self) -> None:
        """The notice loop: (un)subscribe what changed, and turn each notice into a read."""
        backoff = 0.1
        while True:
            _unless_cancelled()
            try:
                if self._pubsub is None:
                    self._pubsub = self.redis.pubsub()
                    self._subscribe |= set(self._readers)
                    self._unsubscribe.clear()
                pubsub = self._pubsub
                if self._unsubscribe:
                    gone, self._unsubscribe = self._unsubscribe, set()
                    async with asyncio.timeout(ROUND_TIMEOUT_S):  # the hot client's replies have none
                        await self._each_slot(pubsub.sunsubscribe, gone)
                if self._subscribe:
                    new, self._subscribe = self._subscribe, set()
                    async with asyncio.timeout(ROUND_TIMEOUT_S):
                        await self._each_slot(pubsub.ssubscribe, new)
                if not (pubsub.subscribed if not self.cluster else self._readers):
                    await asyncio.sleep(LISTEN_S)
                    continue
                get = pubsub.get_sharded_message if self.cluster else pubsub.get_message
                msg = await get(timeout=CLUSTER_POLL_S if self.cluster else LISTEN_S)
                while msg is not None:
                    kind = _s(msg.get("type"))
                    if kind in ("smessage", "message", "ssubscribe"):
                        # a notice, or a subscription now in place (whatever came before it: read)
                        self.notices += kind != "ssubscribe"
                        self._notice(_s(msg.get("channel")))
                    msg = await get(timeout=0)
                backoff = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the notice connection dropped: read everything, subscribe again
                _unless_cancelled(exc)
                log.warning("gateway notices: %s; reconnecting", exc)
                pubsub, self._pubsub = self._pubsub, None
                if pubsub is not None:
                    await _close(pubsub)
                self._mark_all()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _each_slot(self, call: Any, channels: set[str]) -> None:
        """One (un)subscribe per hash slot on a Cluster (a command's channels share a slot)."""
        if not channels:
            return
        if not self.cluster:
            await call(*sorted(channels))
            return
        from redis.cluster import key_slot

        by_slot: dict[int, list[str]] = {}
        for c in channels:
            by_slot.setdefault(key_slot(c.encode("utf-8")), []).append(c)
        for group in by_slot.values():
            await call(*group)

    async def _read_loop(self) -> None:
        while True:
            _unless_cancelled()
            await self._wake.wait()
            batch = self._take_batch()
            if not batch:  # all in flight (their readers wake us) or backlogged (their queues do)
                self._wake.clear()
                continue
            try:
                await self._read(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _unless_cancelled(exc)
                log.warning("reading players' streams failed: %s", exc)
                for key in batch:
                    self._dirty.setdefault(key, None)
                await asyncio.sleep(0.2)
            finally:
                self._inflight.difference_update(batch)
                if self._dirty or self._swept:
                    self._wake.set()

    def _take_batch(self) -> list[tuple[Reading, str]]:
        """Up to :data:`BATCH` streams to read: the notices' first, then the sweep's."""
        batch: list[tuple[Reading, str]] = []
        for source in (self._dirty, self._swept):
            for key in list(source):
                if len(batch) >= BATCH:
                    break
                if key in self._inflight:
                    continue  # one read of a stream for a reader at a time
                if key[0].backlogged():
                    continue  # it asks again once its queue is handed on
                del source[key]
                self._swept.pop(key, None)
                batch.append(key)
        self._inflight.update(batch)
        return batch

    async def _read(self, batch: list[tuple[Reading, str]]) -> None:
        """One pipeline of non-blocking XREADs of the batch's streams, each from its reader's
        cursor: on a single node one XREAD holds many streams (:func:`_xreads`: a command's cost
        in redis-py is most of a small read's), on a Cluster each stream is its own (one
        command's keys share a slot)."""
        asked: list[tuple[Reading, str, str, int]] = []
        for reading, stream in batch:
            at = reading.cursor(stream)
            if at is not None:
                asked.append((reading, stream, at, reading.generation()))
        if not asked:
            return
        alone = [[a] for a in asked if (a[0], a[1]) in self._alone]
        together = [a for a in asked if (a[0], a[1]) not in self._alone]
        commands = alone + ([[a] for a in together] if self.cluster else _xreads(together))
        pipe = self.redis.pipeline(transaction=False)
        for command in commands:
            pipe.xread({stream: at for _r, stream, at, _g in command}, count=COUNT)
        async with asyncio.timeout(ROUND_TIMEOUT_S):
            replies = await pipe.execute(raise_on_error=False)
        for command, reply in zip(commands, replies):
            if isinstance(reply, Exception):
                log.warning("reading %s failed: %s", ", ".join(a[1] for a in command), reply)
                for reading, stream, _at, _gen in command:
                    if len(command) > 1:  # which one is refused: each alone, at once
                        self._dirty.setdefault((reading, stream), None)
                    # else this one: again at the next sweep or notice (never in a loop)
                    self._alone.add((reading, stream))
                continue
            got = {_s(name): entries for name, entries in _streams(reply)}
            for reading, stream, _at, gen in command:
                self._alone.discard((reading, stream))
                if gen != reading.generation() or reading.cursor(stream) is None:
                    self._dirty.setdefault((reading, stream), None)  # set anew meanwhile: read from there
                    continue
                entries = [(_s(i), f) for i, f in got.get(stream) or ()]
                if entries:
                    reading.received(stream, entries)
                if len(entries) >= COUNT:
                    self._dirty.setdefault((reading, stream), None)  # there may be more


#: streams in one XREAD (single node)
XREAD_STREAMS = 100


def _xreads(asked: list[tuple[Reading, str, str, int]]) -> list[list[tuple[Reading, str, str, int]]]:
    """``asked`` split into XREADs of at most :data:`XREAD_STREAMS` streams, each stream at most
    once in one (two readers of one stream, a spectator's and its player's, go into two).

    >>> [[a[1] for a in x] for x in _xreads([(None, "a", "0", 0), (None, "b", "0", 0), (None, "a", "1", 0)])]
    [['a', 'b'], ['a']]
    """
    commands: list[list[tuple[Reading, str, str, int]]] = []
    keys: list[set[str]] = []
    for a in asked:
        for command, held in zip(commands, keys):
            if a[1] not in held and len(command) < XREAD_STREAMS:
                command.append(a)
                held.add(a[1])
                break
        else:
            commands.append([a])
            keys.append({a[1]})
    return commands


def _streams(reply: Any) -> list[tuple[Any, list]]:
    """An XREAD reply as (stream, entries) pairs (RESP2 list or RESP3 map)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return list(reply.items())
    return [(k, v) for k, v in reply]


def _unless_cancelled(exc: BaseException | None = None) -> None:
    """Raise CancelledError when the running task was cancelled although its awaits went on (or
    ``exc`` came instead): the Redis client can end a read a cancellation interrupted with a
    reply or an error rather than the CancelledError, and a loop that goes on (retrying on
    errors) would never end; each loop looks at the start of every turn."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc


async def _wind_down(tasks: list[asyncio.Task], pubsub: Any) -> None:
    """The cancelled ``tasks`` ended, then ``pubsub`` closed (when there is one)."""
    await asyncio.gather(*tasks, return_exceptions=True)
    if pubsub is not None:
        await _close(pubsub)


async def _close(pubsub: Any) -> None:
    try:
        await pubsub.aclose()
    except Exception:
        pass
