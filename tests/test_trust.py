"""Issue 12 on the operator channel: balances from the engine's ledger (audited credits and
debits), registered rooms, fixed deals only in test rooms, and what a rejection or an event
may tell (no hand, no opponent balance).  Each forged case of the issue has a test here or in
tests/test_channels.py; docs/SECURITY.md maps threats to tests."""

from __future__ import annotations

import doctest
import json

import pytest

import engine.service.operator as operator_mod
import engine.service.rooms as rooms_mod
from engine.config import CONFIG_DIR, load_config
from engine.match.commands import AddRoom, CreateMatch, Credit, Deal, Debit, Play, Ready, Sit, parse_command
from engine.match.errors import BadCommand
from engine.rules.cards import format_ranks, parse_cards
from engine.service.channels import channel_consumers
from engine.service.client import GatewayClient
from engine.service.operator import OperatorDesk
from engine.service.rooms import InMemoryRooms, RedisRooms, RoomError, register_shipped
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random
from engine.store import keys
from engine.store.redis_store import RedisEventStore
from projections.ledger import InMemoryLedger, LedgerEntry, RedisLedger


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def r(request):
    return request.getfixturevalue({"fakeredis": "fake_redis", "redis": "real_redis"}[request.param])


class Engine:
    """serve's wiring on one Redis: ledger, rooms, both channels."""

    def __init__(self, r):
        self.r = r
        self.ledger = RedisLedger(r)
        self.rooms = RedisRooms(r)
        register_shipped(self.rooms)
        self.service = MatchService(RedisEventStore(r), clock=lambda: 1_000_000, rng=seeded_random(3),
                                    balances=self.ledger, rooms=self.rooms)
        desk = OperatorDesk(self.ledger, self.rooms, service=self.service, clock=lambda: 1_000_000)
        self.player, self.ops = channel_consumers(r, self.service, "w1", operator=desk)
        self.client = GatewayClient(r, reply_to="sk:reply:trust")

    def send(self, command, stream: str | None = None):
        self.client.send(command, stream=stream)
        while self.player.run_once(block_ms=None, count=50) + self.ops.run_once(block_ms=None, count=50):
            pass
        [msg] = [m for m in self.client.replies() if m.command_id == command.command_id][-1:]
        return msg

    def raw(self, stream: str, data: dict):
        """A JSON command written straight to a stream (what a forged message looks like)."""
        self.r.xadd(stream, {"j": json.dumps(data), "reply_to": "sk:reply:trust"})
        while self.player.run_once(block_ms=None, count=50) + self.ops.run_once(block_ms=None, count=50):
            pass


@pytest.fixture
def eng(r):
    return Engine(r)


def credit(cid, player, amount, mode="wealth", **kw):
    return Credit(command_id=cid, player=player, amount=amount, mode=mode,
                  reason=kw.get("reason", "deposit"), operator=kw.get("operator", "op-1"))


# -- balances come from the ledger ---------------------------------------------------------

def test_sit_with_a_balance_field_is_refused_as_unknown_field():
    """Issue 12: a Sit claiming 2,000,000 points got level 16 and base 800."""
    with pytest.raises(BadCommand, match="balance"):
        parse_command({"type": "Sit", "command_id": "c", "match_id": "m", "player": "a", "balance": 2_000_000})


def test_forged_balance_on_the_wire_seats_nobody_at_a_high_level(eng):
    assert eng.send(CreateMatch(command_id="c1", match_id="m1", room="points")).kind == "accepted"
    eng.raw(keys.OPS, {"type": "Sit", "command_id": "c2", "match_id": "m1", "player": "a", "balance": 2_000_000})
    state = eng.service.load_state("m1")
    assert state.seats == (None, None)  # nothing seated from a claimed balance
    assert eng.send(Sit(command_id="c3", match_id="m1", player="a")).kind == "accepted"
    seat = eng.service.load_state("m1").seat(0)
    assert (seat.balance, seat.level, seat.base) == (0, 0, 5)  # a new points player holds 0


@pytest.mark.parametrize("coins, level, base", [(100, 1, 5), (1000, 2, 10), (60_000_000, 11, 4000)])
def test_sit_level_base_and_cap_from_the_ledger(eng, coins, level, base):
    assert eng.send(credit("k1", "alice", coins)).kind == "accepted"
    eng.send(CreateMatch(command_id="c1", match_id="m1", room="wealth"))
    assert eng.send(Sit(command_id="c2", match_id="m1", player="alice")).kind == "accepted"
    seat = eng.service.load_state("m1").seat(0)
    assert (seat.balance, seat.level, seat.base) == (coins, level, base)


def test_wealth_sit_below_the_lowest_level_is_refused_without_quoting_the_balance(eng):
    eng.send(credit("k1", "bob", 37))
    eng.send(CreateMatch(command_id="c1", match_id="m1", room="wealth"))
    msg = eng.send(Sit(command_id="c2", match_id="m1", player="bob"))
    assert (msg.kind, msg.code) == ("rejected", "seat_refused")
    assert "37" not in msg.reason and "R-11.1" in msg.reason


def test_credit_and_debit_are_audited_idempotent_and_never_go_below_zero(eng):
    c = credit("k1", "alice", 500, reason="bank transfer 17", operator="op-7")
    assert eng.send(c).kind == "accepted"
    assert eng.send(c).kind == "duplicate"  # a retried command id changes nothing
    assert eng.ledger.balance("alice", "wealth") == 500
    d = Debit(command_id="k2", player="alice", amount=501, reason="withdrawal", operator="op-7")
    msg = eng.send(d)
    assert (msg.kind, msg.code) == ("rejected", "insufficient_balance")
    assert eng.send(Debit(command_id="k3", player="alice", amount=200, reason="withdrawal",
                          operator="op-8")).kind == "accepted"
    assert eng.ledger.balance("alice", "wealth") == 300
    entries = eng.ledger.entries("alice")
    assert [(e.kind, e.amount, e.reason, e.operator, e.ref) for e in entries] == [
        ("credit", 500, "bank transfer 17", "op-7", "k1"), ("debit", -200, "withdrawal", "op-8", "k3")]


@pytest.mark.parametrize("bad", [
    {"amount": 0}, {"amount": -5}, {"amount": 10**13}, {"reason": ""}, {"operator": ""}, {"mode": "gold"},
])
def test_ledger_entry_commands_are_validated(bad):
    data = {"type": "Credit", "command_id": "k", "player": "a", "amount": 5, "reason": "r", "operator": "o", **bad}
    with pytest.raises(BadCommand):
        parse_command(data)


def test_ledger_entries_only_on_the_operator_channel(eng):
    msg = eng.send(credit("k1", "mallory", 10**9), stream=keys.INBOX)
    assert (msg.kind, msg.code) == ("rejected", "not_allowed")
    assert eng.ledger.balance("mallory", "wealth") == 0


@pytest.mark.parametrize("make", [InMemoryLedger, "redis"])
def test_ledger_entry_contract(make, fake_redis):
    ledger = RedisLedger(fake_redis) if make == "redis" else make()
    e = LedgerEntry("credit", "p", "points", 40, "ref1", 5, "bonus", "op")
    assert ledger.record_entry(e) == "applied"
    assert ledger.record_entry(e) == "duplicate"
    assert ledger.record_entry(LedgerEntry("debit", "p", "points", -41, "ref2", 6, "x", "op")) == "insufficient"
    assert ledger.record_entry(LedgerEntry("credit", "p", "points", 10**15, "ref3", 7, "x", "op")) == "overflow"
    assert ledger.balance("p", "points") == 40 and ledger.balance("p", "wealth") == 0
    assert ledger.entries("p") == [e]


REUSED_ID = [  # (what differs from the booked credit of 40 points to p, reason "bonus", the retried entry)
    ("amount", LedgerEntry("credit", "p", "points", 90, "ref1", 6, "bonus", "op")),
    ("reason", LedgerEntry("credit", "p", "points", 40, "ref1", 6, "other", "op")),
    ("player", LedgerEntry("credit", "q", "points", 40, "ref1", 6, "bonus", "op")),
    ("mode", LedgerEntry("credit", "p", "wealth", 40, "ref1", 6, "bonus", "op")),
    ("kind", LedgerEntry("debit", "p", "points", -40, "ref1", 6, "bonus", "op")),
]


@pytest.mark.parametrize("what, retry", REUSED_ID, ids=[w for w, _ in REUSED_ID])
@pytest.mark.parametrize("make", ["memory", "fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def test_a_command_id_reused_for_a_different_entry_is_refused(make, what, retry, request):
    """The same command id with other values is not "already applied": it is refused, naming
    the booked entry, and nothing changes; the same values again stay an idempotent duplicate."""
    from projections.ledger import LedgerEntryConflict

    ledger = InMemoryLedger() if make == "memory" else RedisLedger(
        request.getfixturevalue({"fakeredis": "fake_redis", "redis": "real_redis"}[make]))
    booked = LedgerEntry("credit", "p", "points", 40, "ref1", 5, "bonus", "op")
    assert ledger.record_entry(booked) == "applied"
    with pytest.raises(LedgerEntryConflict) as caught:
        ledger.record_entry(retry)
    assert caught.value.code == "command_id_reused" and caught.value.booked == booked
    assert "already used for a different entry" in str(caught.value)
    assert "amount 40, reason bonus" in str(caught.value)
    same_later = LedgerEntry("credit", "p", "points", 40, "ref1", 99, "bonus", "another-op")
    assert ledger.record_entry(same_later) == "duplicate"
    assert (ledger.balance("p", "points"), ledger.balance("q", "points"), ledger.balance("p", "wealth"),
            ledger.balance("q", "wealth")) == (40, 0, 0, 0)
    assert ledger.entries("p") == [booked] and ledger.entries("q") == []


def test_a_credit_reusing_a_command_id_is_rejected_on_the_operator_channel(eng):
    assert eng.send(credit("fixed-1", "bob", 70, reason="r")).kind == "accepted"
    msg = eng.send(credit("fixed-1", "bob", 90, reason="other"))
    assert (msg.kind, msg.code) == ("rejected", "command_id_reused")
    assert "already used for a different entry" in msg.reason and "amount 70, reason r" in msg.reason
    assert eng.send(credit("fixed-1", "bob", 70, reason="r")).kind == "duplicate"
    d = Debit(command_id="fixed-1", player="bob", amount=70, reason="r", operator="op-1")
    assert eng.send(d).code == "command_id_reused"
    assert eng.ledger.balance("bob", "wealth") == 70


# -- rooms are registered, not sent --------------------------------------------------------

def test_shipped_rooms_are_registered_and_a_match_names_one(eng):
    assert eng.rooms.names() == ["points", "wealth"]
    assert eng.send(CreateMatch(command_id="c1", match_id="m1", room="wealth")).kind == "accepted"
    assert eng.service.load_state("m1").config == load_config("wealth")


def test_unknown_room_is_refused(eng):
    msg = eng.send(CreateMatch(command_id="c1", match_id="m1", room="nope"))
    assert (msg.kind, msg.code) == ("rejected", "unknown_room")


def test_create_match_needs_exactly_one_of_room_and_config():
    for data in ({}, {"room": "points", "config": load_config("points").to_record()}):
        with pytest.raises(BadCommand, match="exactly one"):
            parse_command({"type": "CreateMatch", "command_id": "c", "match_id": "m", **data})


def test_full_config_is_refused_on_the_player_channel_and_validated_on_ops(eng):
    rec = load_config("points").to_record()
    assert eng.send(CreateMatch(command_id="c1", match_id="m1", config=rec), stream=keys.INBOX).code == "not_allowed"
    bad = dict(rec, turn_seconds=-1)
    msg = eng.send(CreateMatch(command_id="c2", match_id="m2", config=bad))
    assert (msg.kind, msg.code) == ("rejected", "bad_command") and "turn_seconds" in msg.reason


def test_add_room_on_the_ops_channel(eng):
    rec = load_config("points").model_copy(update={"turn_seconds": 20.0}).to_record()
    assert eng.send(AddRoom(command_id="a1", name="slow", config=rec)).kind == "accepted"
    assert eng.rooms.get("slow").name == "slow" and eng.rooms.get("slow").turn_seconds == 20.0
    again = eng.send(AddRoom(command_id="a2", name="slow", config=rec))
    assert (again.kind, again.code) == ("rejected", "not_allowed")
    bad = eng.send(AddRoom(command_id="a3", name="broken", config=dict(rec, levels=[])))
    assert (bad.kind, bad.code) == ("rejected", "bad_command")
    assert eng.rooms.get("broken") is None
    assert eng.send(AddRoom(command_id="a4", name="x", config=rec), stream=keys.INBOX).code == "not_allowed"


def test_room_registry_validates_and_bounds(fake_redis):
    for rooms in (InMemoryRooms(), RedisRooms(fake_redis)):
        assert rooms.add("r1", load_config("points"))
        assert not rooms.add("r1", load_config("wealth"))  # taken: unchanged
        assert rooms.get("r1").mode == "points"
        with pytest.raises(RoomError):
            rooms.add("", load_config("points"))
        with pytest.raises(RoomError):
            rooms.add("r2", {"name": "r2"})


class _Away:
    """A client whose every read fails with ``exc`` (the master of ``sk:rooms`` away)."""

    def __init__(self, client, exc: Exception):
        self.client, self.exc = client, exc

    def hget(self, *_a):
        raise self.exc


def test_a_room_read_before_is_answered_while_its_master_is_away_and_only_then(fake_redis):
    import redis.exceptions as rex

    rooms = RedisRooms(fake_redis)
    rooms.add("r1", load_config("points"))
    rooms.add("r2", load_config("wealth"))
    assert rooms.get("r1").mode == "points"  # read once: remembered
    live = rooms.client
    rooms.client = _Away(live, rex.ClusterDownError("The cluster is down"))
    assert rooms.get("r1").mode == "points"  # the master away: the config last read
    with pytest.raises(rex.ClusterDownError):
        rooms.get("r2")  # never read: no guess
    rooms.client = _Away(live, rex.ResponseError("WRONGTYPE Operation against a key"))
    with pytest.raises(rex.ResponseError):
        rooms.get("r1")  # not an outage: raised
    rooms.client = live
    live.hdel("sk:rooms", "r1")
    assert rooms.get("r1") is None  # removed: forgotten too
    rooms.client = _Away(live, rex.ClusterDownError("The cluster is down"))
    with pytest.raises(rex.ClusterDownError):
        rooms.get("r1")


# -- fixed deals only in test rooms --------------------------------------------------------

def _seat_two(eng, room: str, mid: str = "m1", ready: bool = False) -> None:
    eng.send(CreateMatch(command_id=f"{mid}-c", match_id=mid, room=room))
    for p in ("a", "b"):
        eng.send(Sit(command_id=f"{mid}-{p}", match_id=mid, player=p))
    for p in ("a", "b") if ready else ():
        eng.send(Ready(command_id=f"{mid}-r{p}", match_id=mid, player=p))


def test_fixed_deal_refused_in_shipped_rooms_allowed_in_test_rooms(eng):
    assert load_config("points").test_deals is False and load_config("wealth").test_deals is False
    _seat_two(eng, "points")  # not ready: the shipped room would deal from its shuffle on Ready
    msg = eng.send(Deal(command_id="d1", match_id="m1", hands=((0, 1), (2, 3)), first=0))
    assert (msg.kind, msg.code) == ("rejected", "not_allowed") and "test_deals" in msg.reason
    assert eng.service.load_state("m1").phase == "seating"
    eng.send(AddRoom(command_id="t", name="test", config=dict(load_config("points").to_record(), test_deals=True)))
    _seat_two(eng, "test", "m2", ready=True)  # a test room waits for the explicit Deal
    assert eng.send(Deal(command_id="d2", match_id="m2", hands=((0, 1), (2, 3)), first=0)).kind == "accepted"
    assert eng.service.load_state("m2").phase == "playing"


# -- nothing secret in a reason or an event ------------------------------------------------

def test_play_of_cards_not_held_names_only_the_missing_cards(eng):
    """Issue 12: Play text "BJ BJ BJ" as the opponent came back with the opponent's whole hand."""
    eng.send(AddRoom(command_id="t", name="test", config=dict(load_config("points").to_record(), test_deals=True)))
    _seat_two(eng, "test", ready=True)
    hand_a, hand_b = parse_cards("3 4 5 BJ"), parse_cards("6 7 8 9")
    eng.send(Deal(command_id="d", match_id="m1", hands=(tuple(hand_a), tuple(hand_b)), first=1))
    msg = eng.send(Play(command_id="p1", match_id="m1", player="b", text="BJ BJ 6 6"))
    assert (msg.kind, msg.code) == ("rejected", "not_in_hand")
    assert msg.reason.startswith("b does not hold BJ BJ 6 (named: BJ BJ 6 6)")
    for leak in (format_ranks(hand_b), "hand", "7", "8", "9"):
        assert leak not in msg.reason


def test_opponent_sees_the_level_not_the_balance(eng):
    eng.send(credit("k1", "a", 1500))
    eng.send(credit("k2", "b", 2500))
    _seat_two(eng, "wealth")
    seen = {}
    for m in eng.client.updates("a"):
        for e in m.events:
            if e["type"] == "PlayerSeated":
                seen[e["player"]] = e
    assert seen["a"]["balance"] == 1500  # one's own balance
    assert "balance" not in seen["b"] and seen["b"]["level"] == 2  # the opponent's level only
    views = [m.view for m in eng.client.updates("a") if m.view]  # updates are compact: a view now and then
    assert views and all("balance" not in s for v in views for s in v["seats"] if s)


def test_operator_and_rooms_doctests():
    assert doctest.testmod(operator_mod).failed == 0
    assert doctest.testmod(rooms_mod).failed == 0


# -- the command line: shuangkou ledger / room ----------------------------------------------

@pytest.mark.redis
def test_ledger_and_room_cli(real_redis, redis_server, tmp_path, capsys):
    import threading

    from shuangkou.cli import main

    url = redis_server.url  # real_redis's database
    eng = Engine(real_redis)
    stop = threading.Event()
    threads = [threading.Thread(target=c.run, args=(stop,), kwargs={"block_ms": 50}, daemon=True)
               for c in (eng.player, eng.ops)]
    for t in threads:
        t.start()
    try:
        assert main(["ledger", "credit", "zoe", "750", "--reason", "welcome bonus", "--operator", "op-9",
                     "--redis", url]) == 0
        assert main(["ledger", "debit", "zoe", "1000", "--reason", "too much", "--redis", url]) == 1
        assert "insufficient_balance" in capsys.readouterr().err
        assert main(["ledger", "debit", "zoe", "50", "--reason", "fee", "--operator", "op-9", "--redis", url]) == 0
        capsys.readouterr()
        assert main(["ledger", "show", "zoe", "--json", "--redis", url]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["balance"] == 700 and shown["balances"] == {"points": 0, "wealth": 700}
        assert [(e["kind"], e["amount"], e["reason"], e["operator"]) for e in shown["entries"]] == [
            ("credit", 750, "welcome bonus", "op-9"), ("debit", -50, "fee", "op-9")]
        assert main(["ledger", "credit", "zoe", "-5", "--reason", "x", "--redis", url]) == 2
        capsys.readouterr()
        assert main(["ledger", "credit", "bob", "70", "--reason", "r", "--command-id", "fixed-1",
                     "--redis", url]) == 0
        assert main(["ledger", "credit", "bob", "70", "--reason", "r", "--command-id", "fixed-1",
                     "--redis", url]) == 0
        assert "already applied: same command id" in capsys.readouterr().out
        assert main(["ledger", "credit", "bob", "90", "--reason", "other", "--command-id", "fixed-1",
                     "--redis", url]) == 1
        cap = capsys.readouterr()
        assert "applied" not in cap.out and "command_id_reused" in cap.err
        assert "already used for a different entry" in cap.err and "amount 70, reason r" in cap.err
        # a player who took a new player's id as their display name blocks nothing: the operator
        # opens the account by its id with --new-player, and show never shows the squatter's
        real_redis.hset(keys.NAMES_KEY, "mallory", "vip_0042")
        assert main(["ledger", "credit", "vip_0042", "500", "--reason", "deposit", "--redis", url]) == 2
        assert "--new-player" in capsys.readouterr().err
        assert main(["ledger", "credit", "vip_0042", "500", "--reason", "deposit", "--new-player",
                     "--redis", url]) == 0
        capsys.readouterr()
        assert main(["ledger", "show", "vip_0042", "--json", "--redis", url]) == 0
        squat = json.loads(capsys.readouterr().out)
        assert (squat["player"], squat["balance"]) == ("vip_0042", 500)

        room = tmp_path / "slow.toml"
        room.write_text((CONFIG_DIR / "points.toml").read_text().replace("turn_seconds = 15", "turn_seconds = 40"))
        assert main(["room", "add", str(room), "--name", "slow", "--redis", url]) == 0
        assert main(["room", "add", str(room), "--name", "slow", "--redis", url]) == 1  # taken
        capsys.readouterr()
        assert main(["room", "list", "--json", "--redis", url]) == 0
        assert json.loads(capsys.readouterr().out) == [{"name": "points", "mode": "points"},
                                                        {"name": "slow", "mode": "points"},
                                                        {"name": "wealth", "mode": "wealth"}]
        assert main(["room", "show", "slow", "--redis", url]) == 0
        shown_room = json.loads(capsys.readouterr().out)
        assert shown_room["name"] == "slow" and shown_room["turn_seconds"] == 40
        bad = tmp_path / "bad.toml"
        bad.write_text(room.read_text().replace("turn_seconds = 40", "turn_seconds = -1"))
        assert main(["room", "add", str(bad), "--redis", url]) == 2
        assert main(["room", "show", "nope", "--redis", url]) == 1  # not found, as for every command
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)


def test_metrics_label_only_known_rooms():
    from projections import metrics

    metrics.register_room_labels(["slow-room"])
    assert metrics.room_label("points") == "points" and metrics.room_label("slow-room") == "slow-room"
    assert {metrics.room_label(f"junk-{i}") for i in range(1000)} == {"other"}
    metrics.register_room_labels(f"flood-{i}" for i in range(10 * metrics.MAX_ROOM_LABELS))
    assert len(metrics._room_labels) <= metrics.MAX_ROOM_LABELS
