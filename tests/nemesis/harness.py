"""The nemesis harness (issue 35 §1): the whole stack on a real Redis Cluster, clients that
record what they sent and what they were told, and faults; then :mod:`tests.nemesis.checker`.

Run it inside a private network namespace (bench/nemesis.py makes one and runs itself in it):
the cluster's nodes are bound to their own loopback aliases (``127.0.0.11`` …) so nftables can
cut one node off from the others while clients (on 127.0.0.1) still reach it.

The stack: a broker redis-server, the cluster (``masters`` × (1 + ``replicas``) nodes), two
serve replicas (``s1``; ``s2`` runs in group 65534 so that nftables can cut it off from Redis
alone), a dramatiq worker, a gateway.  The load: ``inbox_clients`` threads playing matches
through the bucket inboxes (``reply_to`` replies) and ``ws_pairs`` pairs of WebSocket players
joining the gateway's lobby and playing their own turns (the lowest card when they lead, a
pass otherwise).  Every client records each acknowledgement (``accepted``, ``duplicate``, an
update carrying its command id) and each update it read, with its wall-clock time (an inbox
player's update: when it reached the player's stream, its entry id's time; a WebSocket
player's: when the gateway delivered it).

The faults (:data:`KINDS`): ``kill_master`` (SIGKILL, restarted after the fail-over),
``stop_master`` (SIGSTOP past the node timeout, then SIGCONT), ``partition_master`` (the
master cut off from every other node for :data:`PARTITION_S`; clients still reach it),
``partition_serve`` (serve ``s2`` cut off from Redis past its leases), ``kill_process``
(SIGKILL of serve ``s1``, the worker and the gateway, restarted), ``lose_master`` (SIGKILL,
never restarted).  The victim master is the one holding the most buckets' feeds.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster_support import LocalCluster, start_cluster
from tests.gateway_support import ROOT, Client, Closed, Stack, start_stack
from tests.nemesis import netns
from tests.nemesis.checker import (
    Ack,
    Fault,
    Final,
    GaveUp,
    History,
    Limits,
    Read,
    Sent,
    by_fault,
    check,
    others_throughput,
)
from tests.processes import stop_group, wait_for

KINDS = ("kill_process", "partition_serve", "kill_master", "stop_master", "partition_master", "lose_master")
ROOM = "nemesis"
#: the room's clocks: short, so that an outage crosses a turn's deadline
ROOM_CLOCKS = {"turn_seconds": 5, "ready_seconds": 10, "trustee_delay_seconds": 0.5, "reconnect_grace_seconds": 10}
PARTITION_S = 7.0
#: keys every match's commands may touch whatever its bucket (a Sit's balance, a CreateMatch's
#: room, serve's registry, the shared channels): ``shared_keys_cut`` names those a partition cut
SHARED_KEYS = ("sk:{ledger}:bal:points", "sk:rooms", "sk:serve:replicas", "sk:ops", "sk:inbox")
NOGROUP = 65534  # serve s2 runs in this group: nftables drops its packets by it (meta skgid)
GRACE_S = 2.0  # the sweeper's default grace (workers/runtime.py DEFAULT_GRACE_MS)
#: an inbox client plays a match on after an error (as a player would) for this long from its
#: start, then gives up on it (recorded: the match runs on the clocks alone)
GIVE_UP_S = 240.0
#: a match whose version has not moved for this long while its client plays it is an error
STUCK_S = 120.0
#: the rounds of an inbox client's loop over one match (a state read each) past which the match
#: is noted in :attr:`Recorder.long_plays` (the harness once left a match silently there)
LONG_PLAY = 600
#: a WebSocket player whose command was refused (but as stale) decides again after this pause,
#: as a person would: acting again at once on the same view only repeats the refusal, and a
#: refusal per round trip soon runs into the gateway's rate limit (``rate_limited``, then 4429)
REFUSED_PAUSE_S = 1.0


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Config:
    replica_acks: int | None = None  # None: the product's defaults
    masters: int = 3
    replicas: int = 2
    node_timeout_ms: int = 2000
    inbox_clients: int = 3
    ws_pairs: int = 2
    kinds: tuple[str, ...] = KINDS
    rounds: int = 1  # faults of each kind (lose_master: once)
    minutes: float | None = None  # instead of rounds: fault after fault until this long
    settle_s: float = 6.0  # load between two faults
    #: load before a partition of a master: the baseline of the other masters' throughput
    #: (issue 35 §3: the 30 s before the fault, no other fault in it)
    baseline_s: float = 30.0
    gateway_port: int = 18080


@dataclass
class Recorder:
    """What every client sent and was told (thread-safe)."""

    acks: list[Ack] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    sends: list[Sent] = field(default_factory=list)
    gave_up: list[GaveUp] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: an inbox match played over :data:`LONG_PLAY` rounds of its loop (a state read each) or
    #: with a seat in trusteeship: its rounds, those spent waiting on a trusteed seat, its seconds
    long_plays: list[str] = field(default_factory=list)
    slow_calls: list[tuple[int, str]] = field(default_factory=list)
    schema_problems: dict[str, str] = field(default_factory=dict)
    #: an update read at a version below one already read (not a redelivery): its entry
    #: (id, command id) and the entry the player first read at that version
    backwards: list[str] = field(default_factory=list)
    #: a WebSocket player's turn it did not act on: (at_ms, player, match, version, why)
    declined: list[tuple[int, str, str, int, str]] = field(default_factory=list)
    #: a WebSocket player's command refused: (at_ms, player, match, command id, code)
    refused: list[tuple[int, str, str, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, a: Ack) -> None:
        with self.lock:
            self.acks.append(a)

    def read(self, r: Read) -> None:
        with self.lock:
            self.reads.append(r)

    def sent(self, s: Sent) -> None:
        with self.lock:
            self.sends.append(s)

    def give_up(self, g: GaveUp) -> None:
        with self.lock:
            self.gave_up.append(g)

    def slow(self, what: str) -> None:
        """A client's call that took over a second or met a transient error (kept with the time)."""
        with self.lock:
            if len(self.slow_calls) < 5000:
                self.slow_calls.append((now_ms(), what))

    def error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)

    def decline(self, player: str, match: str, version: int, why: str) -> None:
        with self.lock:
            if len(self.declined) < 20_000:
                self.declined.append((now_ms(), player, match, version, why))

    def refuse(self, player: str, match: str, command_id: str, code: str) -> None:
        with self.lock:
            if len(self.refused) < 20_000:
                self.refused.append((now_ms(), player, match, command_id, code))

    def schema(self, problem: str) -> None:
        """A message that gateway/schemas/server.json does not allow (kept once per shape)."""
        with self.lock:
            key = problem[:120]
            self.schema_problems.setdefault(key, problem[:400])


def reply_stream(player: str) -> str:
    """An inbox client's reply stream: in the slot of its first player's stream (their hash tag)."""
    return f"sk:reply:{{{player}}}"


def slot_of(key: str) -> int:
    from redis.crc import key_slot

    return int(key_slot(key.encode()))


def homed_players(tag: str, slots: Callable[[int], bool]) -> tuple[str, str]:
    """Two player ids ``<tag>a<k>``, ``<tag>b<k>`` whose streams (hash tags) lie in the slots
    ``slots`` accepts: an inbox client whose own streams are all on one master."""
    out = []
    for side in "ab":
        k = 0
        while not slots(slot_of(keys_outbox(f"{tag}{side}{k}"))):
            k += 1
        out.append(f"{tag}{side}{k}")
    return out[0], out[1]


def keys_outbox(player: str) -> str:
    from engine.store import keys

    return keys.outbox_key(player)


def _brief_of(body: dict[str, Any]) -> tuple[str | None, int | None]:
    """(turn, deadline_ms) of an engine update's body: its compact brief, else its view."""
    brief = body.get("brief")
    if isinstance(brief, list) and len(brief) >= 4:
        return brief[1], brief[3]
    view = body.get("view")
    if isinstance(view, dict):
        deadline = view.get("deadline") or {}
        return view.get("turn"), deadline.get("at_ms")
    return None, None


class InboxPlayer:
    """Plays matches for two players through the bucket inboxes until :attr:`stop`, riding
    through outages (transient errors retried, a command without a reply sent again with its
    command id), recording every acknowledgement and every update its players read."""

    def __init__(self, url: str, tag: str, rec: Recorder, stop: threading.Event,
                 players: tuple[str, str] | None = None, home: Callable[[int], bool] | None = None):
        from engine.service.client import GatewayClient
        from engine.service.service import MatchService
        from engine.store.connect import connect
        from engine.store.redis_store import RedisEventStore

        self.client = connect(url)
        self.players = players or (f"{tag}a", f"{tag}b")
        self.gw = GatewayClient(self.client, reply_to=reply_stream(self.players[0]))
        self.reader = MatchService(RedisEventStore(self.client), now_ms, random.Random(0))
        self.tag, self.rec, self.stop = tag, rec, stop
        self.last_reply = "0"
        self.positions: dict[str, str] = {}
        self.matches: list[str] = []
        #: match -> the command ids ``<match>:1`` … issued so far (a resumed match goes on from there)
        self.issued: dict[str, int] = {}
        self.home = home  # the slots its matches' buckets must lie in (None: anywhere)
        #: (player, match) -> the highest version read (not a redelivery) and each version's first entry
        self.seen: dict[tuple[str, str], tuple[int, dict[int, str]]] = {}

    def _retry(self, fn: Callable[[], Any], limit_s: float = 120, what: str = "") -> Any:
        from engine.store.redis_errors import is_transient

        delay, began = 0.05, time.monotonic()
        end = began + limit_s
        try:
            while True:
                try:
                    return fn()
                except Exception as exc:
                    if not is_transient(exc) or time.monotonic() > end:
                        raise
                    self.rec.slow(f"{self.tag} {what}: {type(exc).__name__}: {str(exc)[:80]}")
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
        finally:
            took = time.monotonic() - began
            if took > 1.0:
                self.rec.slow(f"{self.tag} {what}: {took:.1f}s")

    def send(self, command: Any) -> Any:
        from engine.store import keys

        began = time.monotonic()
        end = began + 120
        while time.monotonic() < end:
            at = now_ms()  # when the player acted (the XADD may wait on a stopped master)
            entry = str(self._retry(lambda: self.gw.send(command), what="send"))
            stored = int(entry.split("-", 1)[0]) if entry.split("-", 1)[0].isdigit() else None  # Redis had it
            self.rec.sent(Sent(self.tag, getattr(command, "player", None), command.match_id, command.command_id, at,
                               stored))
            wait = time.monotonic() + 10
            while time.monotonic() < wait:
                for msg in self._retry(lambda: self.gw.replies(self.last_reply, block_ms=500), what="replies"):
                    self.last_reply = msg.id
                    if msg.kind in ("accepted", "duplicate"):
                        self.rec.ack(Ack(self.tag, msg.match_id, msg.command_id, msg.kind, now_ms(), msg.version))
                    if msg.command_id == command.command_id:
                        if time.monotonic() - began > 1.0:
                            self.rec.slow(f"{self.tag} reply to {command.type} (bucket "
                                          f"{keys.bucket_of(command.match_id)}) after {time.monotonic() - began:.1f}s")
                        return msg
        raise TimeoutError(f"no reply to {command.command_id}")

    def read_updates(self, mid: str, *players: str) -> None:
        for p in players:
            msgs = self._retry(lambda p=p: self.gw.updates(p, self.positions.get(p, "0")), what="updates")
            read_at = now_ms()
            for m in msgs:
                self.positions[p] = m.id
                # an inbox player reads their stream: an update reached them when it was put
                # there (its entry id's milliseconds), not when this client, busy with its own
                # command's reply, came to poll
                at = min(read_at, int(m.id.split("-", 1)[0])) if m.id.split("-", 1)[0].isdigit() else read_at
                if m.kind != "update" or m.version is None:
                    continue
                turn, deadline = _brief_of(m.body)
                self._note_order(p, m)
                self.rec.read(Read(p, m.match_id, m.version, at, tuple(m.events), bool(m.body.get("duplicate")),
                                   m.view is not None, turn, deadline))
                if m.command_id.startswith(f"{m.match_id}:") and m.match_id in self.matches:
                    self.rec.ack(Ack(self.tag, m.match_id, m.command_id, "update", at, m.version))

    def _note_order(self, player: str, m: Any) -> None:
        """Note an update going back (the writer's traces: its entry id and command id, and
        the entry first read at that version) in :attr:`Recorder.backwards`."""
        if m.body.get("duplicate"):
            return
        top, first = self.seen.get((player, m.match_id), (0, {}))
        if m.version < top and len(self.rec.backwards) < 50:
            with self.rec.lock:
                self.rec.backwards.append(f"{player} {m.match_id}: v{m.version} entry {m.id} command {m.command_id} "
                                          f"after v{top}; first read at {first.get(m.version)}; read at {now_ms()}")
        first.setdefault(m.version, f"{m.id} command {m.command_id}")
        self.seen[(player, m.match_id)] = (max(top, m.version), first)

    def play(self, mid: str, a: str, b: str) -> None:
        """Play ``mid`` for ``a`` and ``b`` until it is finished or abandoned.  Called again after
        an error it goes on from the match's state: the setup (fixed ids ``<mid>:1`` … ``:5``) is
        sent again unless the cards are dealt (a duplicate is answered as one), and the turns take
        the ids not issued yet.  A seat in trusteeship is not played: the system plays for it
        (R-13.3), and its player's own command would only be refused."""
        from engine.match import commands as c
        from engine.tools.bot import Bot, choose_for

        bot = Bot("greedy", random.Random(hash(mid) & 0xFFFF))

        def cid() -> str:
            self.issued[mid] = self.issued.get(mid, 0) + 1
            return f"{mid}:{self.issued[mid]}"

        if mid not in self.matches:
            self.matches.append(mid)
        st = self._retry(lambda: self.reader.load_state(mid), what="load_state") if mid in self.issued else None
        if st is None or st.phase not in ("playing", "finished", "abandoned"):
            setup = (c.CreateMatch(command_id=f"{mid}:1", match_id=mid, room=ROOM),
                     c.Sit(command_id=f"{mid}:2", match_id=mid, player=a),
                     c.Sit(command_id=f"{mid}:3", match_id=mid, player=b),
                     c.Ready(command_id=f"{mid}:4", match_id=mid, player=a),
                     c.Ready(command_id=f"{mid}:5", match_id=mid, player=b))
            self.issued[mid] = max(self.issued.get(mid, 0), len(setup))
            for cmd in setup:
                self.send(cmd)
                self.read_updates(mid, a, b)
        waiting_since = None
        moved_at, version = time.monotonic(), -1
        rounds = trusteed = 0
        began = time.monotonic()
        while True:
            st = self._retry(lambda: self.reader.load_state(mid), what="load_state")
            self.read_updates(mid, a, b)
            rounds += 1
            if st.phase in ("finished", "abandoned"):
                if rounds > LONG_PLAY or trusteed:
                    with self.rec.lock:
                        self.rec.long_plays.append(f"{mid}: {rounds} rounds, {trusteed} on a trusteed seat, "
                                                   f"{time.monotonic() - began:.1f}s")
                return
            if st.version != version:
                moved_at, version = time.monotonic(), st.version
            elif time.monotonic() - moved_at > STUCK_S:
                raise TimeoutError(f"{mid} stayed at version {st.version} (phase {st.phase!r}) for {STUCK_S:.0f} s")
            if st.phase != "playing":  # not dealt (yet): the ready clock ends it, or it was lost
                waiting_since = waiting_since or time.monotonic()
                if time.monotonic() - waiting_since > 30:
                    raise TimeoutError(f"{mid} stayed in phase {st.phase!r} for 30 s")
                time.sleep(0.2)
                continue
            waiting_since = None
            p = st.current_player
            if p is None or st.turn is None or st.seat(st.turn).trusteed:
                trusteed += 1
                time.sleep(0.1)  # the system's move comes
                continue
            choice = choose_for(bot, st, p)
            cmd = (c.Pass(command_id=cid(), match_id=mid, player=p, expected_version=st.version) if choice is None
                   else c.Play(command_id=cid(), match_id=mid, player=p, cards=choice.cards,
                               expected_version=st.version))
            reply = self.send(cmd)
            if getattr(reply, "kind", None) == "rejected":
                time.sleep(0.02)  # refused (a stale read): read again, not at once

    def play_out(self, mid: str, give_up_s: float = GIVE_UP_S) -> None:
        """Play ``mid`` to its end as a player would: after an error (recorded) play it on, from its
        state; after ``give_up_s`` from the start give up on it (recorded in
        :attr:`Recorder.gave_up`: the match then runs on the clocks alone)."""
        began = time.monotonic()
        while True:
            try:
                self.play(mid, *self.players)
                return
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
                self.rec.error(f"{mid}: {why}")
                if time.monotonic() - began > give_up_s:
                    self.rec.give_up(GaveUp(self.tag, mid, now_ms(), why))
                    return
                time.sleep(0.5)

    def match_id(self, k: int) -> tuple[str, int]:
        """The ``k``-th match id to play, at or after ``k``, whose bucket is at :attr:`home`; and the
        next ``k``.  A home holding no bucket takes ``k`` as it is."""
        from engine.store import keys

        for j in range(k, k + 1000):
            if self.home is None or self.home(slot_of(keys.feed_key(keys.bucket_of(f"{self.tag}-{j}")))):
                return f"{self.tag}-{j}", j
        return f"{self.tag}-{k}", k

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            mid, k = self.match_id(k)
            self.play_out(mid)
            k += 1


class WsPlayer:
    """One player over a WebSocket through the gateway's lobby: Join, Ready, its own turns (the
    lowest card when it leads, a pass otherwise); reconnects with ``?version=`` after a drop and
    sends an unanswered command again with the same id; acknowledges the updates it read
    (``Seen``: the first on each socket, those that start its clock); stops after a match once
    :attr:`stop`."""

    def __init__(self, url: Callable[[], str], stack: Stack, name: str, rec: Recorder, stop: threading.Event):
        self.url, self.stack, self.name, self.rec, self.stop = url, stack, name, rec, stop
        self.match: str | None = None
        self.version = 0
        self.hand: list[int] = []
        self.pending: tuple[str, dict[str, Any], float] | None = None
        self.brief: dict[str, Any] | None = None
        self.n = 0
        self.matches = 0
        self.idle_since: float | None = None  # when the last match ended (None: in a match)
        self.hold_until = 0.0  # after a refusal: no command before this (time.monotonic)

    def _cid(self) -> str:
        self.n += 1
        return f"{self.name}-{self.n}"

    async def _send(self, ws: Client, msg: dict[str, Any]) -> None:
        from gateway.channels import engine_command_id

        self.pending = (msg["command_id"], msg, time.monotonic())
        await ws.send(msg)
        self.rec.sent(Sent(self.name, self.name, self.match or "", engine_command_id(self.name, msg["command_id"]),
                           now_ms()))

    async def _act(self, ws: Client) -> None:
        b = self.brief
        if b is None or b.get("phase") != "playing" or b.get("turn") != self.name:
            return
        if time.monotonic() < self.hold_until:
            return  # a refusal's pause: the loop acts once it is over
        why = ("a command unanswered" if self.pending is not None
               else f"the brief is of v{b.get('version')}" if b.get("version") != self.version
               else "no hand to lead from" if b.get("last_play") is None and not self.hand else None)
        if why is not None:  # its turn, and it does not act: kept for the checker's findings
            self.rec.decline(self.name, self.match or "", self.version, why)
            return
        if b.get("last_play") is None and self.hand:
            await self._send(ws, {"type": "Play", "cards": [min(self.hand)], "expected_version": self.version,
                                  "command_id": self._cid()})
        elif b.get("last_play") is not None:
            await self._send(ws, {"type": "Pass", "expected_version": self.version, "command_id": self._cid()})

    def _update(self, m: dict[str, Any]) -> None:
        from gateway.channels import engine_command_id

        at = now_ms()
        brief = m.get("brief") or {}
        if m["match"] != self.match:
            self.match, self.version, self.hand = m["match"], 0, []
        events = tuple(m.get("events") or ())
        self.rec.read(Read(self.name, m["match"], int(m["version"]), at, events, False, m.get("view") is not None,
                           brief.get("turn"), brief.get("deadline_ms")))
        if m.get("command_id"):
            self.rec.ack(Ack(self.name, m["match"], engine_command_id(self.name, m["command_id"]), "update", at,
                             m["version"]))
            if self.pending is not None and self.pending[0] == m["command_id"]:
                self.pending = None
        if int(m["version"]) < self.version:
            return
        self.version = int(m["version"])
        self.brief = brief
        view = m.get("view")
        if view is not None and view.get("hand") is not None:
            self.hand = list(view["hand"].get("ids") or [])
        else:
            for e in events:
                if e.get("type") == "HandDealt":
                    mine = [h for h in e.get("hands") or () if h is not None]
                    self.hand = list(mine[0]) if mine else self.hand
                elif e.get("type") == "CardsPlayed" and e.get("player") == self.name:
                    self.hand = [x for x in self.hand if x not in set(e.get("cards") or ())]

    async def _answered(self, ws: Client, m: dict[str, Any]) -> None:
        """A ``rejected`` or ``ack`` of the pending command: the turn is decided again, after
        :data:`REFUSED_PAUSE_S` when it was refused (but as stale)."""
        if self.pending is None or m.get("command_id") != self.pending[0]:
            return
        self.pending = None
        if m.get("kind") == "rejected":
            code = str(m.get("code") or "")
            self.rec.refuse(self.name, m.get("match") or self.match or "", str(m["command_id"]), code)
            if code != "stale":  # stale: an update is on its way, act on it
                self.hold_until = time.monotonic() + REFUSED_PAUSE_S
        await self._act(ws)

    async def _resume(self, ws: Client) -> None:
        """A refusal's pause over: the turn is decided again."""
        if self.hold_until and time.monotonic() >= self.hold_until:
            self.hold_until = 0.0
            await self._act(ws)

    async def _session(self) -> bool:
        """One connection; True when the player is done (stopped after a match)."""
        q = self.url()
        resuming = bool(self.match and self.version and self.idle_since is None)
        ws = await Client.connect(q, self.stack.token(self.name), self.name,
                                  # the match under way, as far as this player knows: the lobby may
                                  # have seated it at the next one meanwhile (``?match=`` says which)
                                  version=self.version if resuming else None,
                                  match=self.match if resuming else None)
        import websockets

        from tests.gateway_support import schema_problem

        from engine.service.receipts import starts_clock

        acking = False  # this socket was sent a Seen
        try:
            if self.pending is not None:  # unanswered before the drop: the same command id again
                await self._send(ws, self.pending[1])
            while True:
                if self.pending is not None and time.monotonic() - self.pending[2] > 10:
                    await self._send(ws, self.pending[1])  # the same command id again
                if self.stop.is_set() and self.idle_since is not None:
                    return True  # between matches (a match it is seated at is played out: once
                    # it said Ready, the opponent's Ready deals it)
                if self.idle_since is not None:
                    if time.monotonic() - self.idle_since > 5:  # not seated again by the lobby: join
                        self.idle_since = time.monotonic()
                        await ws.send({"type": "Join", "room": ROOM})
                await self._resume(ws)
                wait_s = 1.0 if not self.hold_until else min(1.0, max(0.01, self.hold_until - time.monotonic()))
                try:
                    raw = await asyncio.wait_for(ws.ws.recv(), wait_s)
                except asyncio.TimeoutError:
                    continue
                except websockets.ConnectionClosed as exc:
                    raise Closed(exc.rcvd.code if exc.rcvd else None, exc.rcvd.reason if exc.rcvd else "") from None
                m = json.loads(raw)  # not validated here: a schema problem is noted, the play goes on
                problem = schema_problem(raw)
                if problem is not None:
                    self.rec.schema(problem)
                kind = m.get("kind")
                if kind == "welcome" and self.idle_since is None and self.match is None:
                    await ws.send({"type": "Join", "room": ROOM})
                    self.idle_since = time.monotonic()
                elif kind == "lobby" and m.get("state") == "seated" and m.get("match") != self.match:
                    self.match, self.version, self.hand, self.brief = m["match"], 0, [], None
                    self.idle_since = None
                    await self._send(ws, {"type": "Ready", "command_id": self._cid()})
                elif kind == "update":
                    self._update(m)
                    if not acking or starts_clock(self.name, m):  # read: say so (docs/PROTOCOL.md "Seen")
                        acking = True
                        await ws.send({"type": "Seen", "version": int(m["version"]), "match": m["match"],
                                       "command_id": self._cid()})
                    await self._act(ws)
                    phase = (m.get("brief") or {}).get("phase")
                    ended = phase in ("finished", "abandoned") or any(
                        e.get("type") in ("MatchFinished", "MatchAbandoned") for e in m.get("events") or ())
                    if ended and m["match"] == self.match and self.idle_since is None:
                        self.matches += 1
                        self.pending = None
                        self.idle_since = time.monotonic()
                elif kind in ("rejected", "ack"):  # ack: a Ready that changed nothing (already ready)
                    await self._answered(ws, m)
        finally:
            await ws.close()

    async def run(self) -> None:
        while True:
            try:
                if await self._session():
                    return
            except (Closed, OSError, asyncio.TimeoutError) as exc:
                self.rec.error(f"{self.name}: {type(exc).__name__}: {exc}"[:200])
                await asyncio.sleep(0.5)
            except Exception as exc:  # websockets' own errors: reconnect
                self.rec.error(f"{self.name}: {type(exc).__name__}: {exc}"[:200])
                await asyncio.sleep(0.5)


class Nemesis:
    """The stack, the clients and the faults of one run (:meth:`run`)."""

    def __init__(self, cfg: Config, tmp: Path):
        self.cfg, self.tmp = cfg, tmp
        self.rec = Recorder()
        self.stop = threading.Event()
        self.faults: list[Fault] = []
        self.cluster: LocalCluster | None = None
        self.stack: Stack | None = None
        self.broker: tuple[Any, str, str] | None = None
        self.serves: dict[str, subprocess.Popen] = {}
        self.metrics_ports: dict[str, int] = {}
        self.threads: list[threading.Thread] = []
        self.notes: list[str] = []
        #: each partition of a master: the fault, the buckets and the slot ranges its master held
        self.partitions: list[tuple[Fault, frozenset[int], tuple[tuple[int, int], ...]]] = []
        self.load_stop_ms: int | None = None

    # -- the stack ---------------------------------------------------------------------------
    def _serve(self, name: str) -> None:
        from bench.cluster import _serve

        assert self.stack is not None
        prefix = ("setpriv", f"--regid={NOGROUP}", "--clear-groups", "--") if name == "s2" else ()
        self.metrics_ports[name] = _serve(self.stack, name, self.cfg.replica_acks, prefix)
        self.serves[name] = self.stack.procs[-1]

    def replica_acks_in_force(self) -> int | None:
        """serve ``s1``'s gauge ``shuangkou_replica_acks`` (None: this build exports none)."""
        from bench.cluster import scrape

        try:
            value = scrape(self.metrics_ports["s1"]).get("shuangkou_replica_acks")
        except OSError:
            return None
        return None if value is None else int(value)

    def _worker(self) -> subprocess.Popen:
        assert self.stack is not None
        worker, _out, err = self.stack._spawn("worker", [sys.executable, "-m", "dramatiq", "--processes", "1",
                                                         "--threads", "4", "workers.actors"])
        wait_for(lambda: "Worker process is ready" in err.read_text(errors="replace") or worker.poll() is not None,
                 60, "the dramatiq worker did not start", tuple(self.stack.logs))
        return worker

    def _gateway(self) -> None:
        assert self.stack is not None
        self.stack.start_gateway("nem", "--port", str(self.cfg.gateway_port))

    def start(self) -> None:
        from tests.conftest import start_redis_server

        if self.cfg.replica_acks is not None:
            os.environ["SK_REPLICA_ACKS"] = str(self.cfg.replica_acks)  # the worker and the gateway
        self.broker = start_redis_server()
        n = self.cfg.masters * (1 + self.cfg.replicas)
        self.cluster = start_cluster(self.cfg.masters, self.cfg.replicas, self.cfg.node_timeout_ms,
                                     log_dir=str(self.tmp / "nodes"), hosts=netns.aliases(n))
        self.stack = start_stack(self.cluster.url, self.broker[1], self.tmp, {ROOM: ROOM_CLOCKS})
        first = self.stack.procs[0]  # start_stack's serve: replaced by ours (the replica-acks setting)
        first.terminate()
        first.wait(timeout=30)
        self.worker = next(p for p in self.stack.procs if "dramatiq" in p.args)
        self._serve("s1")
        self._serve("s2")
        self._gateway()

    def stop_all(self) -> None:
        from tests.conftest import stop_redis_server

        netns.heal()
        if self.cluster is not None:
            for p in self.cluster.ports:
                if p not in self.cluster.killed and self.cluster.procs[p].poll() is None:
                    self.cluster.resume(p)
        if self.stack is not None:
            self.stack.stop()
        if self.cluster is not None:
            self.cluster.stop()
        if self.broker is not None:
            stop_redis_server(self.broker[0], self.broker[2])

    # -- the load ----------------------------------------------------------------------------
    def start_load(self) -> None:
        assert self.cluster is not None and self.stack is not None
        stack = self.stack
        # each inbox client's own streams (its players', its replies) and its matches' buckets on
        # one master, the clients spread over the masters: a client plays one match at a time, so
        # a client whose match waits on a cut master would hold back its next matches elsewhere
        ranges = list(self._slot_ranges().values())
        for i in range(self.cfg.inbox_clients):
            mine = ranges[i % len(ranges)]

            def home(slot: int, mine: list[tuple[int, int]] = mine) -> bool:
                return any(a <= slot <= b for a, b in mine)

            players = homed_players(f"ib{i}", home)
            player = InboxPlayer(self.cluster.url, f"ib{i}", self.rec, self.stop, players, home)
            t = threading.Thread(target=player.run, daemon=True, name=f"inbox-{i}")
            t.start()
            self.threads.append(t)
        players = [WsPlayer(lambda: stack.gateways[-1].url, stack, f"ws{k}{s}", self.rec, self.stop)
                   for k in range(self.cfg.ws_pairs) for s in "ab"]

        async def all_ws() -> None:
            await asyncio.gather(*(p.run() for p in players))

        t = threading.Thread(target=lambda: asyncio.run(all_ws()), daemon=True, name="ws")
        t.start()
        self.threads.append(t)
        self.ws_players = players

    # -- the faults --------------------------------------------------------------------------
    def victim(self) -> int:
        """The master holding the most buckets' feeds."""
        count: dict[int, int] = {}
        for m in self._bucket_masters().values():
            count[m] = count.get(m, 0) + 1
        return max(count, key=lambda m: count[m])

    def partition_victim(self) -> int:
        """The master a partition cuts off: the masters in turn, the busiest (most buckets'
        feeds) first, so that over a run the masters holding the shared keys (the ledger, the
        room registry, …) are cut too."""
        ranges = self._slot_ranges()
        count: dict[int, int] = {m: 0 for m in ranges}
        for m in self._bucket_masters().values():
            count[m] = count.get(m, 0) + 1
        # by their slots, not their ports: a promoted replica keeps its master's place
        order = sorted(count, key=lambda m: (-count[m], min(ranges.get(m, [(0, 0)]))))
        return order[len(self.partitions) % len(order)]

    def _sample_states(self, seconds: float, victim: int | None = None) -> None:
        """Sleep ``seconds``, noting each node's ``cluster_state`` when it is not ``ok`` (and the
        slots the ``victim``'s CLUSTER SLOTS covers: what a client refreshing from it learns)."""
        assert self.cluster is not None
        end, t0, seen = time.monotonic() + seconds, time.monotonic(), []
        while time.monotonic() < end:
            states = {}
            for p in list(self.cluster.ports):
                try:
                    states[p] = str(self.cluster.node(p).execute_command("CLUSTER INFO").get("cluster_state"))
                except Exception as exc:
                    states[p] = type(exc).__name__
            if victim is not None:
                try:
                    rows = self.cluster.node(victim).execute_command("CLUSTER SLOTS")
                    states[-1] = f"victim covers {sum(int(r[1]) - int(r[0]) + 1 for r in rows)} slots"
                except Exception as exc:
                    states[-1] = type(exc).__name__
            bad = sorted(p for p, st in states.items() if st != "ok")
            seen.append(f"+{time.monotonic() - t0:.1f}s {len(bad)} of {len(states)} nodes not ok "
                        f"{sorted(set(states.values()))}")
            time.sleep(0.5)
        try:
            cov = self.cluster.node(self.cluster.ports[0]).config_get("cluster-require-full-coverage")
        except Exception as exc:
            cov = type(exc).__name__
        self.notes.append(f"partition ({cov}): " + "; ".join(seen))

    def _slot_ranges(self) -> dict[int, list[tuple[int, int]]]:
        """Each master's slot ranges now (CLUSTER SLOTS of the first node that answers)."""
        import redis

        assert self.cluster is not None
        for p in self.cluster.live():
            try:
                out: dict[int, list[tuple[int, int]]] = {}
                for start, end, master, *_ in self.cluster.node(p).execute_command("CLUSTER SLOTS"):
                    out.setdefault(int(master[1]), []).append((int(start), int(end)))
                return out
            except (redis.RedisError, OSError):
                continue
        raise LookupError("no node answered CLUSTER SLOTS")

    def _bucket_masters(self) -> dict[int, int]:
        """Each bucket's master now."""
        from engine.store import keys

        assert self.cluster is not None
        return {b: self.cluster.master_of(keys.feed_key(b)) for b in range(keys.DEFAULT_BUCKETS)}

    def _promoted(self, victim: int, timeout: float = 60) -> None:
        from engine.store import keys

        assert self.cluster is not None
        moved = next(keys.feed_key(b) for b in range(keys.DEFAULT_BUCKETS)
                     if self.cluster.master_of(keys.feed_key(b)) == victim)

        def done() -> bool:
            try:
                return self.cluster is not None and self.cluster.master_of(moved) != victim
            except Exception:
                return False

        wait_for(done, timeout, f"the slots of {victim} moved to a replica")

    def _others(self, victim: int) -> list[str]:
        assert self.cluster is not None
        return [self.cluster.host(p) for p in self.cluster.ports if p != victim]

    def fault(self, kind: str) -> Fault:
        c, stack = self.cluster, self.stack
        assert c is not None and stack is not None
        start = now_ms()
        held: frozenset[int] = frozenset()
        cut: tuple[tuple[int, int], ...] = ()
        if kind == "kill_master":
            v = self.victim()
            c.kill(v)
            self._promoted(v)
            c.restart(v)
        elif kind == "lose_master":
            v = self.victim()
            c.kill(v)
            self._promoted(v)
            c.ports.remove(v)  # gone for good: the cluster's checks no longer ask it
        elif kind == "stop_master":
            v = self.victim()
            c.pause(v)
            time.sleep(2 * c.node_timeout_ms / 1000 + 1)
            c.resume(v)
        elif kind == "partition_master":
            v = self.partition_victim()
            held = frozenset(b for b, m in self._bucket_masters().items() if m == v)
            cut = tuple(self._slot_ranges().get(v, ()))
            start = now_ms()
            netns.cut(isolated=[c.host(v)], others=self._others(v))
            self._sample_states(PARTITION_S, v)
            netns.heal()
        elif kind == "partition_serve":
            from engine.service.ownership import DEFAULT_TTL_MS

            netns.cut(gid=NOGROUP, gid_to=[c.host(p) for p in c.ports])
            time.sleep(DEFAULT_TTL_MS / 1000 + 3)
            netns.heal()
        elif kind == "kill_process":
            dead = stack.gateways[-1]  # kept listed until its successor (same port) is up
            for p in [self.serves["s1"], self.worker, dead.proc]:
                stop_group(p, signal.SIGKILL, timeout_s=5)
            time.sleep(1.0)
            self._serve("s1")
            self.worker = self._worker()
            self._gateway()
            stack.gateways.remove(dead)
        else:
            raise ValueError(f"unknown fault kind {kind!r} (one of {KINDS})")
        heal = now_ms()
        try:
            c.wait_ok(60)
        except TimeoutError:
            self.notes.append(f"{kind}: the cluster was not ok 60 s after the heal")
        f = Fault(kind, start, heal)
        if kind == "partition_master":
            self.partitions.append((f, held, cut))
        self.faults.append(f)
        return f

    def others_throughput(self, final: Final) -> list[dict[str, Any]]:
        """For each partition of a master: the commands/s acknowledged on the other masters'
        matches during it against the 30 s before it (clipped at the previous fault's heal).

        A match is the other masters' when none of its keys is in the cut master's slots: its
        bucket's, and its players' streams (their updates; an inbox client's replies share its
        first player's slot).  ``ratio`` is theirs; ``ratio_bucket`` counts every match whose
        bucket alone is elsewhere (its players may wait on the cut master)."""
        from engine.store import keys

        players: dict[str, set[str]] = {}
        for mid, events in final.log.items():
            players[mid] = {str(e["player"]) for e in events if e.get("type") == "PlayerSeated"}
        out = []
        for f, held, cut in self.partitions:
            heals = [g.heal_ms for g in self.faults if g.heal_ms <= f.start_ms]
            since = max(heals) if heals else None

            def on_cut(m: str, cut: tuple[tuple[int, int], ...] = cut) -> bool:
                streams = [keys.feed_key(keys.bucket_of(m))] + [keys.outbox_key(p) for p in players.get(m, ())]
                return any(a <= slot_of(k) <= b for k in streams for a, b in cut)

            row = others_throughput(list(self.rec.acks), f, on_cut, since)
            by_bucket = others_throughput(list(self.rec.acks), f, lambda m, held=held: keys.bucket_of(m) in held,
                                          since)
            clients: dict[str, list[int]] = {}  # each client's commands on the others' matches: before, during
            begin = f.start_ms - 30_000 if since is None else max(f.start_ms - 30_000, since)
            seen: set[tuple[str, str]] = set()
            for a in sorted(self.rec.acks, key=lambda a: a.at_ms):
                if (a.match, a.command_id) in seen or on_cut(a.match):
                    continue
                seen.add((a.match, a.command_id))
                c = clients.setdefault(a.client, [0, 0])
                if begin <= a.at_ms < f.start_ms:
                    c[0] += 1
                elif f.start_ms <= a.at_ms <= f.heal_ms:
                    c[1] += 1
            slow = [f"{(t - f.start_ms) / 1000:+.1f}s {w}" for t, w in self.rec.slow_calls
                    if f.start_ms - 2_000 <= t <= f.heal_ms + 2_000][:40]
            shared = sorted(k for k in SHARED_KEYS if any(a <= slot_of(k) <= b for a, b in cut))
            out.append({"start_ms": f.start_ms, **row, "shared_keys_cut": shared, "by_client": clients, "slow_calls": slow, "ratio_bucket": by_bucket["ratio"],
                        "before_per_s_bucket": by_bucket["before_per_s"],
                        "during_per_s_bucket": by_bucket["during_per_s"]})
        return out

    # -- the end -----------------------------------------------------------------------------
    def finish_load(self, timeout_s: float) -> None:
        self.load_stop_ms = now_ms()
        self.stop.set()
        end = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(timeout=max(0.1, end - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            self.notes.append(f"clients still running after {timeout_s:.0f}s: {alive}")

    def snapshot(self) -> Final:
        """Every match's events, command records and settlement; the ledger."""
        from engine.store import keys
        from engine.store.connect import connect
        from engine.store.redis_store import RedisEventStore
        from projections.ledger import RedisLedger, balance_key
        from projections.settlement import settle

        assert self.cluster is not None
        client = connect(self.cluster.url)
        store, ledger = RedisEventStore(client), RedisLedger(client)
        matches: set[str] = set()
        for b in range(keys.DEFAULT_BUCKETS):
            matches |= {m.decode() if isinstance(m, bytes) else m for m in client.smembers(keys.matches_key(b))}
        final = Final(log={})
        for mid in sorted(matches):
            events = list(store.load(mid))
            final.log[mid] = [e.model_dump(mode="json") for e in events]
            cmds = client.hkeys(keys.commands_key(mid, keys.bucket_of(mid)))
            final.recorded[mid] = {x.decode() if isinstance(x, bytes) else x for x in cmds}
            if any(e.type == "MatchFinished" for e in events):
                s = settle(events)
                if s is not None:
                    final.settled[mid] = dict(s.scores)
        for mid in ledger.settled_matches():
            s = ledger.settlement(mid)
            if s is not None:
                final.booked[mid] = dict(s.scores)
        final.balances = {(k.decode() if isinstance(k, bytes) else k): int(v)
                          for k, v in client.hgetall(balance_key("points")).items()}
        client.close()
        return final

    def wait_settled(self, timeout_s: float) -> None:
        """Until every finished match is booked (or ``timeout_s``)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            f = self.snapshot()
            if set(f.settled) <= set(f.booked):
                return
            time.sleep(1.0)
        self.notes.append("some finished matches were not booked in the ledger in time")

    def _keep_history(self, report: Any, history: History, final: Final) -> str | None:
        """With findings: the history of the matches they name, in ``history.json`` beside the
        logs (its path; None: nothing found)."""
        if not report.findings:
            return None
        path = self.tmp / "history.json"
        path.write_text(json.dumps(_history_of(report, history, final, self.rec), default=str))
        return str(path)

    def replay_exit(self) -> int:
        assert self.cluster is not None
        out = subprocess.run([sys.executable, "-m", "shuangkou", "replay", "--all", "--json", "--redis",
                              self.cluster.url], capture_output=True, text=True, timeout=300, cwd=ROOT)
        return out.returncode

    def run(self) -> dict[str, Any]:
        """Start, load, each fault kind in turn (``rounds`` times), finish, check."""
        t0 = time.monotonic()
        try:
            self.start()
            in_force = self.replica_acks_in_force()
            self.start_load()
            time.sleep(self.cfg.settle_s)
            # each kind in turn, round after round (``rounds``, or until ``minutes`` have passed);
            # a master is lost for good once, at the end
            again = [k for k in self.cfg.kinds if k != "lose_master"]
            rounds = 0
            while True:
                for kind in again:
                    if kind == "partition_master":
                        time.sleep(max(0.0, self.cfg.baseline_s - self.cfg.settle_s))
                    self.fault(kind)
                    time.sleep(self.cfg.settle_s)
                rounds += 1
                if self.cfg.minutes is None and rounds >= self.cfg.rounds:
                    break
                if self.cfg.minutes is not None and (time.monotonic() - t0) / 60 >= self.cfg.minutes or not again:
                    break
            if "lose_master" in self.cfg.kinds:
                self.fault("lose_master")
                time.sleep(self.cfg.settle_s)
            limits = Limits(ROOM_CLOCKS["ready_seconds"], ROOM_CLOCKS["turn_seconds"], GRACE_S)
            self.finish_load(limits.end_bound_ms / 1000 + 30)
            self.wait_settled(30)
            final = self.snapshot()
            history = History(list(self.rec.acks), list(self.rec.reads), list(self.faults), self.load_stop_ms,
                              list(self.rec.sends), list(self.rec.gave_up))
            report = check(history, final, limits)
            kept = self._keep_history(report, history, final)
            rows = by_fault(report, history)
            others = self.others_throughput(final)
            ratios = [o["ratio"] for o in others if o["ratio"] is not None]
            if "partition_master" in rows:
                rows["partition_master"]["others_throughput_ratio"] = min(ratios) if ratios else None
            replay = self.replay_exit()
            return {"kinds": rows, "others_throughput": others,
                    "others_throughput_ratio": min(ratios) if ratios else None, "totals": report.summary(), "replay_all_exit": replay,
                    "matches": len(final.log), "finished": len(final.settled), "booked": len(final.booked),
                    "client_errors": len(self.rec.errors), "client_error_samples": self.rec.errors[:10],
                    "inbox_errors": [e for e in self.rec.errors if e.startswith("ib")][:30],
                    "gave_up": [dict(g.__dict__) for g in self.rec.gave_up][:20],
                    "long_plays": self.rec.long_plays[:20],
                    # the WebSocket players' commands refused, by code
                    "refused": dict(Counter(r[4] for r in self.rec.refused)),
                    "client_retries": _retried(self.rec.slow_calls),
                    "schema_problems": list(self.rec.schema_problems.values())[:5],
                    "notes": self.notes, "findings": _samples(report.findings),
                    "backwards": self.rec.backwards[:20],
                    "seconds": round(time.monotonic() - t0, 1), "replica_acks": self.cfg.replica_acks,
                    # serve's gauge; a build without it runs the flag given, else its default 0
                    "replica_acks_in_force": in_force if in_force is not None else (self.cfg.replica_acks or 0),
                    "replicas_per_master": self.cfg.replicas, "masters": self.cfg.masters,
                    "run_id": uuid.uuid4().hex[:8], "history": kept}
        finally:
            self.stop.set()
            self.stop_all()


def _history_of(report: Any, history: History, final: Final, rec: Recorder) -> dict[str, Any]:
    """What the clients recorded of each match a finding names, with its log: enough to tell
    why a rule broke after the run's processes are gone."""
    named = {f.match for f in report.findings if f.match}

    def of(items: list[Any]) -> list[dict[str, Any]]:
        return [dict(x.__dict__) for x in items if getattr(x, "match", None) in named]

    return {"findings": [dict(f.__dict__) for f in report.findings],
            "faults": [dict(f.__dict__) for f in history.faults],
            "matches": {m: final.log.get(m, []) for m in sorted(named)},
            "reads": of(history.reads), "sends": of(history.sends), "acks": of(history.acks),
            "gave_up": of(history.gave_up),
            "declined": [d for d in rec.declined if d[2] in named],
            "refused": [r for r in rec.refused if r[2] in named], "errors": rec.errors[:500]}


def _retried(slow_calls: list[tuple[int, str]], top: int = 15) -> dict[str, int]:
    """The inbox clients' transient errors retried, by call and error (its first words)."""
    from collections import Counter

    seen: Counter[str] = Counter()
    for _at, what in slow_calls:
        _tag, _, rest = what.partition(" ")
        parts = rest.split(": ", 2)  # "<call>: <Error>: <message>" (else a duration)
        if len(parts) == 3 and parts[1].isidentifier():
            seen[" ".join(rest.split()[:5])[:80]] += 1
    return dict(seen.most_common(top))


def _samples(findings: list[Any], per_rule: int = 6) -> list[dict[str, Any]]:
    """The first ``per_rule`` findings of each rule."""
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for f in findings:
        seen[f.rule] = seen.get(f.rule, 0) + 1
        if seen[f.rule] <= per_rule:
            out.append(dict(f.__dict__))
    return out


def run_inside(cfg: Config, tmp: Path) -> dict[str, Any]:
    """One run, from inside a namespace made for it (bench/nemesis.py)."""
    return Nemesis(cfg, tmp).run()


def dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, default=str)
