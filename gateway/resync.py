"""Gap and resync: what one socket has of its match, and how it gets the rest exactly once.

A :class:`Resync` keeps, per match, the last version the client has, the updates that came
ahead of a missing one (``held``) and the view it waits for (a ``Sync`` sent to the engine).
It turns the entries of the player's update stream (gateway/outbox.py) into ``update`` and
``rejected`` messages:

* an update at or below the client's version is a duplicate and is dropped;
* an update ahead of a gap waits up to ``gap_wait_s`` for the missing one, then the socket
  resyncs from the current view (one view-only ``update``, then what follows it);
* while a view is awaited, updates are held and go out after it, in order;
* given a last-seen version, :meth:`Resync.catch_up` replays the later updates the stream
  still holds, or asks for the view when it no longer holds them all;
* an end of the match (a finish, a removal) makes the socket look its place up again for the
  next Play, Pass or Ready (``Receiver.ended``); the lobby learns the end from the match's
  feed in the engine, never from here;
* the player's own refusals go out with the client's command id: those of the match's
  commands and those of the lobby's (a Join refused ``cooldown`` carries ``retry_after_ms``).

It talks to its socket through :class:`Receiver` (gateway/session.py's ``Connection``); it
reads Redis only to find a view or the updates after a version, never to wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from engine.store import keys
from gateway import channels, outbox, protocol
from gateway.spectate import spectator_brief, spectator_event, spectator_view

log = logging.getLogger("shuangkou.gateway")

#: the events after which a match is over for its players
END_EVENTS = frozenset({"PlayerRemoved", "MatchFinished", "MatchAbandoned"})


def ends(events: Iterable[dict[str, Any]]) -> bool:
    """Whether these events end the match for its players.

    >>> ends([{"type": "CardsPlayed"}]), ends([{"type": "CardsPlayed"}, {"type": "MatchFinished"}])
    (False, True)
    """
    return any(e.get("type") in END_EVENTS for e in events)


class Receiver(Protocol):
    """What the resync needs of its socket: who it is, what it shows, and a way to send."""

    id: str
    hub: Any  # the gateway's Hub: ``redis`` and ``lobby``
    match: str | None  # the match whose updates this socket gets
    source: str | None  # spectators: the seated player whose stream is read

    @property
    def is_player(self) -> bool: ...

    @property
    def player(self) -> str: ...

    async def send(self, message: dict[str, Any]) -> None: ...

    def read_upto(self, stream: str) -> str:
        """The id the socket's subscription has read ``stream`` up to ("+" when it reads nothing)."""
        ...

    def track(self, engine_id: str, ctype: str) -> None: ...

    def answered(self, engine_id: str) -> None: ...

    def ended(self, match: str) -> None:
        """The client was sent an end of ``match``: a place known for it is looked up again."""
        ...

    async def adopt(self, match: str) -> bool:
        """An update of ``match`` no ``seated`` announced: True once the socket shows it (the
        player's table is there; the match it showed before left with :meth:`Resync.left`),
        False to drop it."""
        ...

    async def follow(self, match: str) -> bool:
        """A spectator's update of ``match``, not the watched one: True once the socket watches
        it (the watched table moved on to it; the match watched before left with
        :meth:`Resync.left`), False to drop it."""
        ...


class Resync:
    def __init__(self, conn: Receiver, gap_wait_s: float):
        self.conn = conn
        self.gap_wait_s = gap_wait_s
        self.versions: dict[str, int] = {}  # match -> last version forwarded
        self._held: dict[str, dict[int, outbox.OutEntry]] = {}  # match -> first seq -> update ahead of a gap
        #: match -> the timer of a gap (``_close_gap``); an awaited view has a timer of its own
        #: (``_sync_fallback``), so neither keeps the other from being started
        self._gap_timers: dict[str, asyncio.Task] = {}
        self._timers: set[asyncio.Task] = set()  # every timer running (cancelled with the socket)
        self._awaiting: dict[str, str] = {}  # match -> the engine id of the Sync whose view we wait for
        self._viewed: set[str] = set()  # matches this socket has sent a view of
        #: match -> a version the client gave (``?version=``, ``Sync.version``) that no update of
        #: the stream confirmed: a version of the match before, for all it says (it names no match)
        self._claimed: dict[str, int] = {}
        #: the client's command ids this socket answered (an update or an ack), the last few
        self._told: dict[str, None] = {}

    @property
    def _stream_owner(self) -> str:
        return self.conn.source or self.conn.player

    def has(self, match: str) -> bool:
        """Whether the client has a version of ``match`` (a view or an update of it)."""
        return match in self.versions

    def version(self, match: str) -> int | None:
        return self.versions.get(match)

    def forget(self, match: str, *, unseen: bool = False) -> None:
        """The client's version of ``match`` is unknown again (it says which it has next); with
        ``unseen`` the client has no view of it either (the next view goes out whatever its version)."""
        self.versions.pop(match, None)
        self._claimed.pop(match, None)
        if unseen:
            self._viewed.discard(match)

    def cancel(self) -> None:
        """The socket is gone: stop every timer."""
        for t in list(self._timers):
            t.cancel()

    def _start(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)
        return task

    def _timer(self, match: str, coro: Any) -> None:
        self._gap_timers[match] = self._start(coro)

    # -- catching up ----------------------------------------------------------------------
    async def catch_up(self, match: str, version: int | None, named: bool = False) -> None:
        """The updates after ``version`` when the stream still holds them all, else the current view.

        A ``version`` that no update of ``match`` in the stream reached is checked against the
        view: below it, it was the client's of another match (a resume that named no match, from a
        client that missed the seating at this one), and the view goes out, then every update
        after it.  ``named``: the client said ``version`` is of ``match``; at the stream's newest
        update it has everything, and nothing goes out (no update twice)."""
        owner = self._stream_owner
        upto = self.conn.read_upto(keys.outbox_key(owner))
        if version is not None:
            self.versions[match] = version  # the client has everything up to it
            self._viewed.add(match)
            later = await outbox.updates_after(self.conn.hub.redis, owner, match, version, upto)
            if later and (later[0].first_seq is None or later[0].first_seq <= version + 1):
                for e in later:
                    await self._forward_update(e)
                return
            newest = await outbox.recent_updates(self.conn.hub.redis, owner, match, 1, upto)
            if named and newest and int(newest[0].version or 0) == version:
                return  # up to date: the newest update of the match is the client's
            if not newest or int(newest[0].version or 0) < version:
                self._claimed[match] = version
        await self.request_view(match)

    async def request_view(self, match: str, client_id: str | None = None) -> None:
        """Ask the engine for the current view (a ``Sync``: it lands in the stream this socket reads);
        updates that arrive meanwhile wait for it."""
        conn = self.conn
        source = self._stream_owner
        engine_id = (channels.engine_command_id(conn.player, client_id) if client_id is not None
                     else channels.lobby_command_id("sync", conn.id, channels.new_id()))
        if client_id is not None:
            conn.track(engine_id, "Sync")
        self._awaiting[match] = engine_id
        self._start(self._sync_fallback(match, engine_id))  # also when the Sync cannot be sent
        command = channels.player_command("Sync", match, source, engine_id)
        await conn.hub.redis.xadd(channels.stream_for(command), channels.entry(command))

    async def _sync_fallback(self, match: str, engine_id: str) -> None:
        """No answer to the Sync ``engine_id`` in twice the gap wait (an engine busy or away): the
        newest view in the stream.  A later Sync of the match has a fallback of its own."""
        await asyncio.sleep(self.gap_wait_s * 2)
        awaited = self._awaiting.get(match)
        if awaited is not None and awaited != engine_id:
            return  # asked again since: that Sync's fallback comes later
        if self._awaiting.pop(match, None) is None or match != self.conn.match:
            self._unclaim(match)
            return  # answered, or the table moved on (no view of a match left behind)
        try:
            latest = await outbox.latest_update(self.conn.hub.redis, self._stream_owner, match)
        except Exception as exc:  # Redis away: a gap still held is asked for again after its wait
            log.warning("no view of %s in the stream: %s", match, exc)
            latest = None
        if latest is not None:  # a client's own Sync is answered with its command id
            await self._apply_view(match, int(latest.version or 0), latest.view,
                                   channels.client_command_id(self.conn.player, engine_id))
        else:
            self._unclaim(match)
        await self._flush(match)

    async def _apply_view(self, match: str, version: int, view: dict | None, client_id: str | None,
                          force: bool = False) -> None:
        """Send a view-only update when it tells the client something (newer, first, or asked for)."""
        await self._send_view(match, version, view, client_id, force)
        if self.conn.is_player and view and view.get("phase") == "finished":
            self.conn.ended(match)

    async def _send_view(self, match: str, version: int, view: dict | None, client_id: str | None,
                         force: bool) -> None:
        claimed = self._claimed.pop(match, None)
        if claimed is not None and version < claimed:
            self.versions.pop(match, None)  # the client's version was of another match
            self._viewed.discard(match)
        last = self.versions.get(match)
        if force or client_id is not None or last is None or version > last or match not in self._viewed:
            await self.conn.send(protocol.update(match, version, [], self._view(view), client_id))
            self._viewed.add(match)
        if last is None or version > last:
            self.versions[match] = version

    def _unclaim(self, match: str) -> None:
        """The client's version of ``match`` went unchecked (no view came): it is taken to be just
        before the first update held, or unknown (a duplicate at worst, never a loss)."""
        if self._claimed.pop(match, None) is None:
            return
        held = self._held.get(match)
        if held:
            self.versions[match] = min(held) - 1
        else:
            self.versions.pop(match, None)

    def _view(self, view: dict | None) -> dict | None:
        return spectator_view(view) if not self.conn.is_player else view

    # -- the update stream's entries ------------------------------------------------------
    async def on_entry(self, e: outbox.OutEntry) -> None:
        """One entry of the update stream this socket reads."""
        conn = self.conn
        if e.kind == "sync":
            await self._on_sync(e)
        elif e.kind == "update":
            await self._forward_update(e)
        elif e.kind == "say" and e.body.get("kind") == "say":
            await self._say(e)
        elif e.kind == "rating" and conn.is_player and e.body.get("kind") == "rating":
            await conn.send(dict(e.body))  # a ranked match moved the rating (projections/ladders.py)
        elif e.kind == "rejected" and e.command_id and self._awaiting.get(e.match) == e.command_id:
            client_id = channels.client_command_id(conn.player, e.command_id) if conn.is_player else None
            await self._sync_refused(e, client_id)
            if client_id is not None:
                conn.answered(e.command_id)
                await conn.send(protocol.rejected(client_id, e.code or "rejected", e.reason or "", e.view,
                                                  e.match or None))
        elif e.kind == "ack" and conn.is_player:  # a Ready that changed nothing (docs/PROTOCOL.md §8)
            client_id = channels.client_command_id(conn.player, e.command_id)
            if client_id is not None:
                conn.answered(e.command_id)
                await conn.send(protocol.ack(client_id))
        elif e.kind == "rejected" and conn.is_player:
            client_id = channels.client_command_id(conn.player, e.command_id)
            if client_id is None:
                return  # the lobby's own commands (e.g. a late Leave): not the client's business
            conn.answered(e.command_id)
            await conn.send(protocol.rejected(client_id, e.code or "rejected", e.reason or "", e.view,
                                              e.match or None, e.retry_after_ms))

    async def _say(self, e: outbox.OutEntry) -> None:
        """A quick phrase of the match this socket shows (docs/PROTOCOL.md §8 "Quick phrases"):
        to the players and the spectators; the sender's copy carries its command id."""
        conn = self.conn
        if e.match != conn.match:
            return
        client_id = channels.client_command_id(conn.player, e.command_id) if conn.is_player else None
        if client_id is not None:
            conn.answered(e.command_id)
        b = e.body
        await conn.send(protocol.say(e.match, str(b.get("player", "")), str(b.get("phrase", "")), client_id))

    async def _forward_update(self, e: outbox.OutEntry) -> None:
        """Send an update on; after an end of the match a player's socket looks its place up again."""
        await self._forward(e)
        if self.conn.is_player and ends(e.events):
            self.conn.ended(e.match)

    async def _forward(self, e: outbox.OutEntry) -> None:
        conn = self.conn
        if e.version is None:
            return
        if e.match != conn.match:  # adopt and follow send the end of the match they leave first
            if e.match and await (conn.adopt(e.match) if conn.is_player else conn.follow(e.match)):
                await self._forward(e)  # after the view asked for: held, or dropped as known
            return
        if conn.is_player:
            conn.answered(e.command_id)
        last = self.versions.get(e.match)
        if last is not None and e.version <= last and e.match not in self._claimed:
            await self._answer_dropped(e)  # a redelivery (duplicate) or what the client already has
            return
        first = e.first_seq
        if e.match in self._awaiting and first is not None:
            self._held.setdefault(e.match, {})[first] = e  # sent after the view it follows
            return
        if last is not None and first is not None and first > last + 1:
            # the service and the timer workers publish independently: an update may arrive before
            # the one just ahead of it; hold it until the gap fills (or resync from its view)
            held = self._held.setdefault(e.match, {})
            held[first] = e
            if e.match not in self._gap_timers:
                self._timer(e.match, self._close_gap(e.match))
            return
        await self._send_update(e)
        await self._flush(e.match)

    async def left(self, match: str) -> None:
        """The socket moves on from ``match`` (to the table's next match: a spectator following
        it, a player's seated note or update of it, before anything of the next goes out) while
        updates of ``match`` wait behind a gap: their view would be dropped as no longer
        current, so the newest view of ``match`` in the stream goes out now, then the held
        updates that follow it.  The client never misses the end of the match it was shown.
        Nothing held: nothing sent."""
        if not self._held.get(match):
            return
        self._awaiting.pop(match, None)  # its answer, later, is dropped (no longer current)
        try:
            latest = await outbox.latest_update(self.conn.hub.redis, self._stream_owner, match)
        except Exception as exc:  # Redis away: only what follows the client's version goes out
            log.warning("no view of %s in the stream: %s", match, exc)
            latest = None
        if latest is not None:
            await self._apply_view(match, int(latest.version or 0), latest.view, None)
        held = self._held[match]
        if match not in self.versions:  # no view at all: what was held goes out, in order
            self.versions[match] = min(held) - 1
        await self._flush(match)
        self._held.pop(match, None)  # behind a gap no view closed: never sent out of order
        timer = self._gap_timers.pop(match, None)
        if timer is not None:
            timer.cancel()

    async def _answer_dropped(self, e: outbox.OutEntry) -> None:
        """An update not sent (the client has its version: a redelivery, or a view covered it)
        that answers a command of the client's: an ``ack`` with its command id, so a command
        sent again (the same id) is answered even when its update is not sent twice."""
        client_id = channels.client_command_id(self.conn.player, e.command_id) if self.conn.is_player else None
        if client_id and client_id not in self._told:
            self._note_told(client_id)
            await self.conn.send(protocol.ack(client_id))

    def _note_told(self, client_id: str | None) -> None:
        """This socket answered ``client_id`` (an update naming it, or an ack); the last 64 are kept."""
        if not client_id:
            return
        self._told[client_id] = None
        if len(self._told) > 64:
            self._told.pop(next(iter(self._told)))

    async def _flush(self, match: str) -> None:
        """Send the held updates that now follow on; drop those the client has."""
        held = self._held.get(match)
        while held:
            last = self.versions.get(match, 0)
            for seq in [k for k, v in held.items() if int(v.version or 0) <= last]:
                await self._answer_dropped(held.pop(seq))
            nxt = held.pop(last + 1, None)
            if nxt is None:
                break
            await self._send_update(nxt)
        if held is not None and not held:
            self._held.pop(match, None)
        elif held and match not in self._gap_timers and match not in self._awaiting:
            self._timer(match, self._close_gap(match))

    async def _on_sync(self, e: outbox.OutEntry) -> None:
        """The engine's answer to a Sync (ours, the client's, or another socket's of this stream).

        The client's own Sync is always answered (an ``update`` with the view and its command
        id), even when the table has moved on meanwhile; the connection's own (on connect, on a
        gap) only while its match is current; another socket's only fills in a view not yet sent."""
        conn = self.conn
        mine = bool(e.command_id) and self._awaiting.get(e.match) == e.command_id
        if mine:
            self._awaiting.pop(e.match, None)
        client_id = channels.client_command_id(conn.player, e.command_id)  # a spectator's own Sync too
        if client_id is not None:
            conn.answered(e.command_id)
        if e.version is None:
            if mine:
                self._unclaim(e.match)
            await self._flush(e.match)
            return
        if client_id is not None and e.match != conn.match:
            await conn.send(protocol.update(e.match, int(e.version), [], self._view(e.view), client_id))
            return
        if e.match != conn.match:
            self._unclaim(e.match)
            return
        if not mine and client_id is None and e.match in self._awaiting:
            return  # someone else's; ours is on its way
        await self._apply_view(e.match, int(e.version), e.view, client_id, force=mine)
        await self._flush(e.match)

    async def _sync_refused(self, e: outbox.OutEntry, client_id: str | None) -> None:
        """The engine refused the Sync this socket waits for: its refusal carries the current view
        when there is one (use it); either way the updates held for it go out now."""
        self._awaiting.pop(e.match, None)
        if e.match == self.conn.match and e.view is not None and e.version:
            await self._apply_view(e.match, int(e.version), e.view, None, force=client_id is None)
        else:
            self._unclaim(e.match)
        await self._flush(e.match)

    async def _send_update(self, e: outbox.OutEntry) -> None:
        conn = self.conn
        self._claimed.pop(e.match, None)  # what follows is numbered from this update
        self.versions[e.match] = int(e.version or 0)
        if conn.is_player:
            client_id = channels.client_command_id(conn.player, e.command_id)
            self._note_told(client_id)
            await conn.send(protocol.update(e.match, int(e.version or 0), e.events, e.view, client_id, e.brief))
        else:
            await conn.send(protocol.update(e.match, int(e.version or 0), [spectator_event(x) for x in e.events],
                                            spectator_view(e.view), brief=spectator_brief(e.brief)))

    async def _close_gap(self, match: str) -> None:
        """A gap that does not fill in ``gap_wait_s``: resync from the current view."""
        try:
            await asyncio.sleep(self.gap_wait_s)
        finally:
            self._gap_timers.pop(match, None)
        if self._held.get(match):
            try:
                await self.request_view(match)
            except Exception as exc:  # Redis away: the Sync's fallback reads the stream
                log.warning("no Sync of %s sent: %s", match, exc)
