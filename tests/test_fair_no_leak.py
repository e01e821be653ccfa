"""The server seed never leaks before the finish (docs/FAIRNESS.md "What players see").

Whole matches run through the inbox consumers (player and operator channels), the
timer workers (turn timeouts, trusteeship) and the production publisher, with
disconnects, reconnects, escapes (both policies) and rejected commands.  Then
every entry any player stream (``sk:out:*``), reply stream and the dead letters
hold is searched for each match's seed (hex either case, raw bytes): it must
appear only in the update that carries MatchFinished or later -- and it must
appear there (the positive control: the search can fail).  No log record and no
metric carries it."""

from __future__ import annotations

import json
import logging
import random

import pytest
from prometheus_client import generate_latest

from engine.config import load_config
from engine.match.commands import Play, Ready
from engine.service.channels import channel_consumers
from engine.service.client import GatewayClient, new_command_id
from engine.store.redis_store import RedisEventStore
from projections.metrics import REGISTRY, InstrumentedService
from workers.clock import FakeClock
from workers.embedded import EmbeddedTimers


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def r(request):
    return request.getfixturevalue({"fakeredis": "fake_redis", "redis": "real_redis"}[request.param])


def _config(**changes):
    return load_config("points").model_copy(update=changes).to_record()


class Table:
    def __init__(self, r):
        self.r = r
        self.clock = FakeClock(1_800_000_000_000)
        self.t = EmbeddedTimers(RedisEventStore(r), clock=self.clock, rng=random.Random(0), publish="gateway")
        self.service = InstrumentedService(self.t.service, config_name="points")
        self.consumers = channel_consumers(r, self.service, "leak-test")
        self.client = GatewayClient(r, reply_to="sk:reply:leak-test")

    def drain(self) -> None:
        while sum(c.run_once(block_ms=None, count=50) for c in self.consumers):
            pass

    def send(self, command) -> None:
        self.client.send(command)
        self.drain()

    def state(self, mid: str):
        return self.t.service.load_state(mid)

    def start(self, mid: str, config, seeds=(None, None)) -> None:
        c = self.client
        c.create_match(mid, config)
        c.sit(mid, f"{mid}-a")
        c.sit(mid, f"{mid}-b")
        self.drain()
        for p, s in zip((f"{mid}-a", f"{mid}-b"), seeds):
            self.send(Ready(command_id=new_command_id(), match_id=mid, player=p, client_seed=s))
        assert self.state(mid).phase == "playing"

    def timeouts_until(self, mid: str, done, limit: int = 400) -> None:
        """Let the turn and trustee clocks run (the timer workers play) until ``done(state)``."""
        for _ in range(limit):
            st = self.state(mid)
            if done(st):
                return
            d = st.deadline()
            assert d is not None, st.phase
            self.t.advance(max(0, d.at_ms - self.clock.now_ms()) / 1000 + 0.001)
        raise AssertionError("the clocks did not get there")

    def close(self) -> None:
        self.t.stop()


def _scenarios(tab: Table) -> list[str]:
    # 1. nobody moves: timeouts, trusteeship, the trustee plays both hands to the end
    tab.start("idle", _config(turn_seconds=5, timeouts_before_trustee=2), seeds=("idle luck", None))
    tab.timeouts_until("idle", lambda s: s.phase == "finished", limit=2000)
    # 2. disconnect, reconnect (reclaim), rejected plays and readies, then an escape (forfeit)
    tab.start("esc", _config(reclaim_after_reconnect=True, escape_policy="forfeit"))
    st = tab.state("esc")
    on, off = st.current_player, [p for p in st.players() if p != st.current_player][0]
    c = tab.client
    for send in (lambda: c.disconnect("esc", off), lambda: c.reconnect("esc", off),
                 lambda: c.cancel_trustee("esc", off), lambda: c.pass_("esc", off),
                 lambda: c.play("esc", off, "BJ BJ BJ"), lambda: c.play("esc", on, "2 2 2 2 2 2 2 2 2"),
                 lambda: c.ready("esc", on), lambda: c.request_trustee("esc", on),
                 lambda: c.cancel_trustee("esc", on)):
        send()
        tab.drain()
    tab.send(Play(command_id=new_command_id(), match_id="esc", player=on,
                  cards=(tab.state("esc").seat(tab.state("esc").turn).hand[0],)))
    v = tab.state("esc").version
    tab.timeouts_until("esc", lambda s: s.version > v)  # a turn timeout
    c.escape("esc", off)
    tab.drain()
    c.play("esc", on, "3")  # after the finish: refused (match over)
    tab.r.xadd("sk:inbox", {"j": json.dumps({"type": "Ready", "command_id": "bad-seed", "match_id": "esc",
                                             "player": on, "client_seed": "x" * 80}),
                            "reply_to": "sk:reply:leak-test"})  # a bad client seed: bad command
    tab.drain()
    # 3. escape under the trustee policy: the trustee plays the escaped seat to the end
    tab.start("trust", _config(escape_policy="trustee", turn_seconds=3), seeds=("t0", "t1"))
    st = tab.state("trust")
    c.escape("trust", st.current_player)
    c.disconnect("trust", [p for p in st.players() if p != st.current_player][0])
    tab.drain()
    tab.timeouts_until("trust", lambda s: s.phase == "finished", limit=2000)
    # 4. a match that never finishes: its seed must never appear anywhere
    tab.start("open", _config(), seeds=("o", None))
    c.disconnect("open", "open-a")
    c.reconnect("open", "open-a")
    tab.drain()
    return ["idle", "esc", "trust", "open"]


def _entries(r):
    """(stream, id, raw bytes of every field) of every stream a player or sender may read."""
    out = []
    for key in sorted(set(r.scan_iter(match="sk:out:*")) | set(r.scan_iter(match="sk:reply:*"))
                      | set(r.scan_iter(match="sk:dead*"))):
        for entry_id, fields in r.xrange(key):
            blob = b"".join((k if isinstance(k, bytes) else k.encode()) + b"=" +
                            (v if isinstance(v, bytes) else str(v).encode()) for k, v in fields.items())
            out.append((key, entry_id, fields, blob))
    return out


def _forms(seed_hex: str) -> list[bytes]:
    return [seed_hex.encode(), seed_hex.upper().encode(), bytes.fromhex(seed_hex)]


def _finishes(fields, mid: str) -> bool:
    from engine.service.client import OutMessage

    if fields.get(b"kind") != b"update" or fields.get(b"match") != mid.encode():
        return False
    msg = OutMessage.parse(b"0-0", fields)
    return any(e["type"] == "MatchFinished" for e in msg.events)


def test_the_seed_reaches_players_only_with_the_finish(r, caplog):
    caplog.set_level(logging.DEBUG)
    tab = Table(r)
    try:
        mids = _scenarios(tab)
        store = tab.t.service.store
        seeds = {mid: store.load(mid)[0].server_seed for mid in mids}
        finished = {mid: tab.state(mid).phase == "finished" for mid in mids}
    finally:
        tab.close()
    assert finished == {"idle": True, "esc": True, "trust": True, "open": False}
    entries = _entries(r)
    assert len(entries) > 100
    kinds = {f.get(b"kind") for _, _, f, _ in entries}
    assert {b"update", b"rejected"} <= kinds  # rejections were published and searched too
    for mid, seed in seeds.items():
        forms = _forms(seed)
        by_stream: dict = {}
        for key, _, fields, blob in entries:
            by_stream.setdefault(key, []).append((fields, blob))
        seen_reveal = 0
        for key, items in by_stream.items():
            done = False
            for fields, blob in items:
                done = done or _finishes(fields, mid)
                holds = any(f in blob for f in forms)
                assert done or not holds, f"{mid}'s seed leaked in {key!r} before MatchFinished: {fields!r}"
                if done and holds:
                    seen_reveal += 1
        if finished[mid]:
            assert seen_reveal >= 2, mid  # positive control: both players got the revealed seed
        else:
            assert seen_reveal == 0
        for rec in caplog.records:
            text = rec.getMessage() + repr(rec.args) + (rec.exc_text or "")
            assert not any(f.decode("latin-1") in text for f in forms[:2]), rec.getMessage()
        metrics = generate_latest(REGISTRY)
        assert not any(f in metrics for f in forms)
