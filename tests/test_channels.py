"""The two command channels (engine/service/channels.py, docs/SECURITY.md): players on
``sk:inbox``, the lobby and operators on ``sk:ops``, timer commands on neither.

Every refusal here is a ``not_allowed`` rejection published like any other (the
player's outbox, the sender's ``reply_to``), never a dead letter."""

from __future__ import annotations

import doctest

import pytest

import engine.service.channels as channels
from engine.config import load_config
from engine.match.commands import (
    CancelTrustee,
    CreateMatch,
    Deal,
    Disconnect,
    Escape,
    Leave,
    Pass,
    Play,
    Ready,
    ReadyTimeout,
    Reconnect,
    RequestTrustee,
    Sit,
    TrusteeAct,
    TurnTimeout,
)
from engine.service.channels import OPS, PLAYER, TIMER_COMMANDS, channel_consumers, channel_for
from engine.service.client import GatewayClient
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random
from engine.store import keys
from engine.store.redis_store import RedisEventStore

CONFIG = load_config("points").to_record()


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def r(request):
    return request.getfixturevalue({"fakeredis": "fake_redis", "redis": "real_redis"}[request.param])


class Rig:
    def __init__(self, r):
        self.r = r
        self.service = MatchService(RedisEventStore(r), clock=lambda: 1_000_000, rng=seeded_random(7))
        self.player, self.ops = channel_consumers(r, self.service, "w1")
        self.client = GatewayClient(r, reply_to="sk:reply:test")
        self.last_reply = "0"

    def drain(self) -> int:
        total = 0
        while (n := self.player.run_once(block_ms=None, count=50) + self.ops.run_once(block_ms=None, count=50)):
            total += n
        return total

    def xadd(self, stream: str, command) -> None:
        self.client.send(command, stream=stream)
        self.drain()

    def reply(self, command_id: str):
        replies = self.client.replies()
        [msg] = [m for m in replies if m.command_id == command_id]
        return msg

    def start(self, mid: str = "m1") -> None:
        c = self.client
        for send in (lambda: c.create_match(mid, CONFIG), lambda: c.sit(mid, "alice"), lambda: c.sit(mid, "bob"),
                     lambda: c.ready(mid, "alice"), lambda: c.ready(mid, "bob")):
            sent = send()
            self.drain()
            assert self.reply(sent.command_id).kind == "accepted"


@pytest.fixture
def rig(r):
    return Rig(r)


def _cmd(ctype: str, mid: str = "m1", cid: str = "x1"):
    """One command of each type (valid shape) for the channel table."""
    base = {"command_id": cid, "match_id": mid}
    return {
        "CreateMatch": lambda: CreateMatch(**base, config=CONFIG),
        "Sit": lambda: Sit(**base, player="carol"),
        "Deal": lambda: Deal(**base, hands=((0,), (1,)), first=0),
        "Ready": lambda: Ready(**base, player="alice"),
        "Leave": lambda: Leave(**base, player="alice"),
        "Play": lambda: Play(**base, player="alice", text="3"),
        "Pass": lambda: Pass(**base, player="alice"),
        "RequestTrustee": lambda: RequestTrustee(**base, player="alice"),
        "CancelTrustee": lambda: CancelTrustee(**base, player="alice"),
        "Disconnect": lambda: Disconnect(**base, player="alice"),
        "Reconnect": lambda: Reconnect(**base, player="alice"),
        "Escape": lambda: Escape(**base, player="alice"),
        "TurnTimeout": lambda: TurnTimeout(**base, version=5),
        "TrusteeAct": lambda: TrusteeAct(**base, version=5),
        "ReadyTimeout": lambda: ReadyTimeout(**base, version=5),
    }[ctype]()


ALL_TYPES = ["CreateMatch", "Sit", "Deal", "Ready", "Leave", "Play", "Pass", "RequestTrustee", "CancelTrustee",
             "Disconnect", "Reconnect", "Escape", "TurnTimeout", "TrusteeAct", "ReadyTimeout"]
# (type, the channel that carries it: "player", "ops" or None = no channel, timers only)
TABLE = [(t, "ops") for t in ("CreateMatch", "Sit", "Deal")] + \
        [(t, "player") for t in ("Ready", "Leave", "Play", "Pass", "RequestTrustee", "CancelTrustee",
                                 "Disconnect", "Reconnect", "Escape")] + \
        [(t, None) for t in ("TurnTimeout", "TrusteeAct", "ReadyTimeout")]


def test_table_covers_every_command_type():
    assert sorted(t for t, _ in TABLE) == sorted(ALL_TYPES)
    assert {"Sync", "Credit", "Debit", "AddRoom"} <= channels.PLAYER_COMMANDS | channels.OPS_COMMANDS


@pytest.mark.parametrize("ctype,home", TABLE)
@pytest.mark.parametrize("channel", [PLAYER, OPS], ids=["sk:inbox", "sk:ops"])
def test_channel_policy_table(ctype, home, channel):
    cmd = _cmd(ctype)
    refusal = channel.refusal(cmd)
    if home == channel.name:
        assert refusal is None
        assert channel_for(cmd) is channel
        return
    assert refusal is not None and refusal.code == "not_allowed"
    if home is None:
        assert ctype in TIMER_COMMANDS and channel_for(cmd) is None
        assert "timer command" in refusal.reason
    else:
        assert channels.stream_for(cmd) in refusal.reason  # the stream it belongs on (issue 24 §2)


def test_forged_turn_timeout_is_refused_on_both_channels(rig):
    """Issue 12: a TurnTimeout for the current version sent 981 ms early pushed a player
    toward trusteeship.  Timer commands come only from the timer workers."""
    rig.start()
    state = rig.service.load_state("m1")
    for i, stream in enumerate((keys.INBOX, keys.OPS)):
        for kind in (TurnTimeout, TrusteeAct, ReadyTimeout):
            cid = f"forged-{kind.__name__}-{i}"
            rig.xadd(stream, kind(command_id=cid, match_id="m1", version=state.version))
            msg = rig.reply(cid)
            assert (msg.kind, msg.code) == ("rejected", "not_allowed")
            assert "timer command" in msg.reason
    assert rig.service.load_state("m1") == state  # nothing happened to the match
    assert rig.r.xlen(keys.DEAD_LETTERS) == 0


@pytest.mark.parametrize("ctype", ["CreateMatch", "Sit", "Deal"])
def test_operator_commands_on_the_player_channel_are_refused(rig, ctype):
    rig.start()
    before = rig.service.load_state("m1")
    rig.xadd(keys.inbox_key(keys.bucket_of("m1")), _cmd(ctype, cid="wrong"))
    msg = rig.reply("wrong")
    assert (msg.kind, msg.code) == ("rejected", "not_allowed")
    assert "ops" in msg.reason and keys.ops_key(keys.bucket_of("m1")) in msg.reason
    assert rig.service.load_state("m1") == before
    assert rig.r.xlen(keys.DEAD_LETTERS) == 0


def test_player_commands_on_the_ops_channel_are_refused_and_the_player_hears_it(rig):
    rig.start()
    state = rig.service.load_state("m1")
    player = state.current_player
    before = rig.client.updates(player)[-1].id
    rig.xadd(keys.ops_key(keys.bucket_of("m1")), Escape(command_id="esc", match_id="m1", player=player))
    [msg] = rig.client.updates(player, last_id=before)
    assert (msg.kind, msg.code, msg.command_id) == ("rejected", "not_allowed", "esc")
    assert keys.inbox_key(keys.bucket_of("m1")) in msg.reason
    assert rig.reply("esc").code == "not_allowed"
    assert rig.service.load_state("m1") == state
    assert rig.r.xlen(keys.DEAD_LETTERS) == 0


def test_a_whole_match_through_both_channels(rig):
    """The client routes each command to its channel, and both consumers serve one match."""
    rig.start()
    state = rig.service.load_state("m1")
    assert state.phase == "playing"
    b = keys.bucket_of("m1")  # each command on its match's bucket stream of its channel (issue 24 §2)
    assert rig.r.xlen(keys.ops_key(b)) >= 3 and rig.r.xlen(keys.inbox_key(b)) >= 2
    sent = rig.client.escape("m1", state.current_player)
    rig.drain()
    assert rig.reply(sent.command_id).kind == "accepted"
    assert rig.service.load_state("m1").phase == "finished"


def test_channels_doctests():
    assert doctest.testmod(channels).failed == 0
