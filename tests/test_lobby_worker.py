"""The live lobby of a serve replica (engine/service/lobby_worker.py) on a real redis-server:
the lobby channel in, the players' streams and the read models out, the timers (a bot, the
reconnect grace), one owner of the room's bucket at a time."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from engine.lobby.errors import Cooldown
from engine.match import commands as mc
from engine.service.lobby_notes import PLACE_FIELDS
from engine.service.lobby_worker import build_lobby, parse_channel_command
from engine.service.service import MatchService
from engine.store import keys
from engine.store.redis_store import RedisEventStore
from projections.ledger import RedisLedger
from projections.runner import ProjectionRunner, RedisFeed
from tests.lobby_stack import room_config

pytestmark = pytest.mark.redis


_SERVER_SCHEMA: Any = None


def on_the_wire(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as a gateway forwards it, checked against gateway/schemas/server.json
    (every lobby message a test reads from a player's stream is one the schema allows)."""
    global _SERVER_SCHEMA
    if _SERVER_SCHEMA is None:
        import jsonschema

        from gateway.schemas_gen import load

        _SERVER_SCHEMA = jsonschema.Draft202012Validator(load("server.json"))
    errors = [e.message for e in _SERVER_SCHEMA.iter_errors(message)]
    assert not errors, (message, errors)
    return message


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Rooms:
    def __init__(self, *cfgs: Any):
        self.cfgs = {c.name: c for c in cfgs}

    def get(self, name: str) -> Any:
        return self.cfgs.get(name)

    def names(self) -> list[str]:
        return sorted(self.cfgs)


class Stack:
    """A serve replica's lobby, its match service and projections, on one client."""

    def __init__(self, client: Any, consumer: str = "serve-1", **room: Any):
        self.client = client
        self.clock = Clock()
        self.cfg = room_config(**room)
        self.rooms = Rooms(self.cfg)
        self.store = RedisEventStore(client)
        self.ledger = RedisLedger(client)
        self.matches = MatchService(self.store, clock=self.clock, rng=random.Random(3), rooms=self.rooms,
                                    balances=self.ledger, deal_on_ready=False)
        self.projections = ProjectionRunner(self.store, self.ledger,
                                            RedisFeed(client, consumer="p", claim_idle_ms=None))
        self.worker = build_lobby(client, self.store, self.matches, self.ledger, self.rooms, self.clock, consumer,
                                  {"outbox_ttl": 3600, "outbox_maxlen": 1000, "full_view_every": 1})
        for b in range(self.store.buckets):
            self.worker.own(b)
        self.seen: dict[str, str] = {}

    def send(self, kind: str, player: str, cid: str, room: str = "points") -> None:
        c = {"type": kind, "command_id": cid, "room": room, "player": player}
        self.client.xadd(keys.lobby_inbox_key(keys.room_bucket(room)), {"c": json.dumps(c)})

    def run(self, rounds: int = 30) -> None:
        for _ in range(rounds):
            self.worker.block_ms = 1
            self.projections.run_once() if hasattr(self.projections, "run_once") else None
            if not self.worker.run_once():
                break

    def told(self, player: str) -> list[dict[str, Any]]:
        """What ``player``'s stream got since the last look: lobby, settled and rejected entries."""
        out = []
        for entry_id, f in self.client.xrange(keys.outbox_key(player), min=f"({self.seen.get(player, '0-0')}"
                                              if player in self.seen else "-"):
            self.seen[player] = entry_id.decode()
            kind = f[b"kind"].decode()
            if kind in ("lobby", "settled"):
                out.append(on_the_wire(json.loads(f[b"m"])))
            elif kind == "rejected":
                out.append({"kind": "rejected", **{k.decode(): v.decode() for k, v in f.items() if k != b"kind"}})
        return out

    def place(self, player: str) -> dict[str, str]:
        raw = {k.decode(): v.decode() for k, v in self.client.hgetall(keys.place_key(player)).items()}
        return {k: v for k, v in raw.items() if k in PLACE_FIELDS}

    def ready(self, player: str, match: str) -> None:
        out = self.matches.execute(mc.Ready(match_id=match, player=player, command_id=f"r-{player}-{match}"))
        assert out.accepted, out


@pytest.fixture
def stack(real_redis) -> Stack:
    return Stack(real_redis)


def test_a_channel_carries_only_joins_leaves_and_returns() -> None:
    for raw in ("not json", '{"type": "OpenTable"}', '{"type": "Join", "room": "points"}',
                '{"type": "Leave", "command_id": "c", "room": "r", "player": "a", "table": "t1"}'):
        with pytest.raises(Exception) as exc:
            parse_channel_command(raw)
        assert getattr(exc.value, "code", None) == "bad_command"


def test_two_joins_are_seated_at_one_table_and_told_in_order(stack: Stack) -> None:
    stack.send("Join", "ann", "j-ann")
    stack.run()
    assert [(m["state"], m["command_id"]) for m in stack.told("ann")] == [("queued", "j-ann")]
    assert stack.place("ann") == {"state": "queued", "room": "points", "table": "", "match": ""}
    stack.send("Join", "bob", "j-bob")
    stack.run()
    bob = stack.told("bob")
    assert [m["state"] for m in bob if m["kind"] == "lobby"] == ["queued", "seated"]
    seated = bob[-1]
    table, match = seated["table"], seated["match"]
    assert match == f"{table}-1" and seated["command_id"] is None
    assert [m["state"] for m in stack.told("ann") if m["kind"] == "lobby"] == ["seated"]
    assert stack.place("ann") == {"state": "table", "room": "points", "table": table, "match": match}
    info = {k.decode(): v.decode() for k, v in stack.client.hgetall(keys.table_info_key(table)).items()}
    assert info["status"] == "seated" and {info["a"], info["b"]} == {"ann", "bob"} and info["match"] == match
    assert stack.client.hget(keys.queue_info_key("points"), "waiting") == b"0"


def test_a_second_join_is_answered_with_where_the_player_is(stack: Stack) -> None:
    stack.send("Join", "ann", "j1")
    stack.run()
    stack.send("Join", "ann", "j2")
    stack.run()
    told = stack.told("ann")
    assert told[-1]["reason"] == "already_queued" and told[-1]["command_id"] == "j2"


def test_a_leave_before_the_deal_closes_the_table_and_a_quick_join_waits_out_the_cooldown(stack: Stack) -> None:
    stack.send("Join", "ann", "j-ann")
    stack.send("Join", "bob", "j-bob")
    stack.run()
    stack.told("ann"), stack.told("bob")
    stack.send("Leave", "ann", "l-ann")
    stack.run()
    ann = stack.told("ann")
    assert [(m["state"], m["reason"]) for m in ann] == [("removed", "left")]
    assert [(m["state"], m["reason"]) for m in stack.told("bob")] == [("queued", "opponent_left")]
    assert stack.place("ann") == {}
    stack.send("Join", "ann", "j-again")
    stack.run()
    refused = stack.told("ann")[-1]
    assert refused["kind"] == "rejected" and refused["code"] == Cooldown.code
    assert int(refused["retry_after_ms"]) > 0 and refused["command_id"] == "j-again"


def test_a_leave_from_nowhere_is_refused_not_seated(stack: Stack) -> None:
    stack.send("Leave", "zed", "l1")
    stack.run()
    assert [(m["kind"], m["code"]) for m in stack.told("zed")] == [("rejected", "not_seated")]


def test_a_lone_player_gets_a_bot_while_a_bot_process_offers_one(stack: Stack) -> None:
    stack.send("Join", "ann", "j-ann")
    stack.run()
    stack.clock.now += 10_000
    stack.worker._timers_at = stack.worker._graces_at = 0
    stack.run()
    assert stack.told("ann")[-1]["state"] == "queued"  # no bot offered: nobody plays bots
    stack.client.set(keys.bot_offer_key("points"), json.dumps({"after_ms": 3000, "level": "hard"}), ex=10)
    stack.worker._offers.clear()
    stack.worker._timers_at = stack.worker._graces_at = 0
    stack.run()
    seated = stack.told("ann")[-1]
    assert seated["state"] == "seated" and seated["bot_level"] == "hard"
    (_stream, entries), = stack.client.xread({keys.bot_seats_key("points"): "0"})
    bot = entries[0][1][b"bot"].decode()
    assert keys.is_bot_id(bot) and entries[0][1][b"match"].decode() == seated["match"]


def test_an_absent_players_grace_ends_and_they_leave_the_queue(stack: Stack) -> None:
    stack.send("Join", "ann", "j-ann")
    stack.run()
    stack.client.zadd(keys.presence_key("points"), {"ann": stack.clock.now + 5_000})
    stack.worker._timers_at = stack.worker._graces_at = 0
    stack.run()
    assert stack.place("ann")["state"] == "queued"  # within the grace
    stack.clock.now += 6_000
    stack.worker._timers_at = stack.worker._graces_at = 0
    stack.run()
    assert [(m["state"], m["reason"]) for m in stack.told("ann")][-1] == ("removed", "disconnected")
    assert stack.client.zcard(keys.presence_key("points")) == 0


def test_the_lobby_acts_only_for_the_buckets_it_holds(real_redis) -> None:
    a = Stack(real_redis, consumer="serve-a")
    b = Stack(real_redis, consumer="serve-b")
    room_bucket = keys.room_bucket("points")
    for w, mine in ((a.worker, lambda x: x != room_bucket), (b.worker, lambda x: x == room_bucket)):
        for x in range(16):
            if not mine(x):
                w.release(x)
    a.send("Join", "ann", "j-ann")
    a.run()
    assert a.told("ann") == []  # not a's room
    b.run()
    assert [m["state"] for m in b.told("ann")] == ["queued"]


def test_a_finished_match_is_settled_and_the_next_one_offered(stack: Stack) -> None:
    stack.send("Join", "ann", "j-ann")
    stack.send("Join", "bob", "j-bob")
    stack.run()
    match = stack.told("ann")[-1]["match"]
    stack.told("bob")
    for p in ("ann", "bob"):
        stack.ready(p, match)
    stack.matches.execute(mc.Deal(command_id=f"deal:{match}", match_id=match, hands=((0,), (1,)), first=0))
    m = stack.matches.load_state(match)
    s = m.seat(m.turn)
    assert stack.matches.execute(mc.Play(command_id="p1", match_id=match, player=s.player, cards=s.hand)).accepted
    for _ in range(5):  # the table hears the finish; the projections settle; the table hears that
        stack.worker._retry_at = 0
        stack.run()
    ann = stack.told("ann")
    assert [m["kind"] for m in ann] == ["settled", "lobby"]
    settled, seated = ann
    assert settled["match"] == match and set(settled["scores"]) == {"ann", "bob"}
    assert set(settled["balances"]) == {"ann"}  # their own balance only
    table = match.rpartition("-")[0]
    assert seated["state"] == "seated" and seated["match"] == f"{table}-2"


def _old_lobby(client: Any, open_table: bool) -> None:
    """Keys as gateway/lobby.lua (the builds before issue 34) left them."""
    P = "sk:{lobby}:"
    client.rpush(P + "queue:points", "ann", "gone", "ann")
    client.hset(P + "player:ann", mapping={"state": "queued", "room": "points", "since": 1})
    client.hset(P + "player:bob", mapping={"state": "table", "room": "points", "table": "t7"})
    client.hset(P + "table:t7", mapping={"room": "points", "a": "bob", "b": "cat", "n": 2, "match": "t7-2",
                                         "status": "seated" if open_table else "closed"})
    client.set(P + "match:t7-2", "t7")
    client.zadd(P + "presence", {"ann": 5})
    client.xadd(P + "notes:ann", {"m": "{}"})
    client.hset(P + "names", mapping={"ann": "Ann", "bob": "Bob"})
    client.sadd(P + "hidden", "bob")


def test_lobby_upgrade_refuses_while_an_old_table_is_open_then_requeues_the_waiting(stack: Stack, capsys) -> None:
    from shuangkou.cli import main

    url = stack.client.connection_pool.connection_kwargs
    redis_url = f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}"
    _old_lobby(stack.client, open_table=True)
    assert main(["lobby-upgrade", "--redis", redis_url, "--json"]) == 1
    report = json.loads(capsys.readouterr().out.splitlines()[0])
    assert report["done"] is False and [t["table"] for t in report["open_tables"]] == ["t7"]
    assert stack.client.exists("sk:{lobby}:queue:points")  # nothing changed
    stack.client.hset("sk:{lobby}:table:t7", "status", "closed")
    assert main(["lobby-upgrade", "--redis", redis_url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["done"] is True and report["waiting"] == {"points": ["ann"]}
    assert list(stack.client.scan_iter(match="sk:[{]lobby[}]:*")) == []
    from engine.store import keys as k

    assert stack.client.hgetall(k.NAMES_KEY) == {b"ann": b"Ann", b"bob": b"Bob"}  # the names kept
    assert stack.client.smembers(k.HIDDEN_NAMES_KEY) == {b"bob"} and report["hidden"] == 1
    stack.run()
    assert stack.place("ann")["state"] == "queued"
    assert [(m["state"], m["command_id"]) for m in stack.told("ann")] == [("queued", "upgrade:ann")]


def test_a_ranked_rooms_join_carries_the_players_rating_of_the_running_season(real_redis) -> None:
    from engine.lobby.events import queue_aggregate
    from engine.store.lobby_store import RedisLobbyStore
    from projections.ladders import RedisRatingStore

    stack = Stack(real_redis, ranked=True)
    stack.send("Join", "ann", "j0")
    stack.run()
    (first,) = RedisLobbyStore(real_redis).load(queue_aggregate("points"))
    assert first.rating is None  # no season runs: no ladder to pair by
    stack.send("Leave", "ann", "l0")
    stack.run()
    RedisRatingStore(real_redis).start_season("s1", stack.clock.now)
    stack.send("Join", "ann", "j1")
    stack.run()
    joined = RedisLobbyStore(real_redis).load(queue_aggregate("points"))[-1]
    assert type(joined).__name__ == "PlayerQueued" and joined.rating is not None and joined.rating > 0


def test_a_ranked_rooms_pairing_timer_pairs_two_far_apart_once_their_windows_widen(real_redis) -> None:
    stack = Stack(real_redis, ranked=True, match_window=50, match_window_per_second=10,
                  match_max_wait_seconds=600)
    for player, rating in (("ann", 1000.0), ("bob", 2000.0)):
        c = {"type": "Join", "command_id": f"j-{player}", "room": "points", "player": player, "rating": rating}
        stack.client.xadd(keys.lobby_inbox_key(keys.room_bucket("points")), {"c": json.dumps(c)})
    stack.run()
    assert [m["state"] for m in stack.told("bob")] == ["queued"]  # 1000 apart: not yet
    stack.clock.now += 30_000  # each window 50 + 10/s · 30 s = 350: still apart
    stack.worker._timers_at = 0
    stack.run()
    assert stack.told("bob") == []
    stack.clock.now += 70_000  # 50 + 10/s · 100 s = 1050: the PairTimer pairs them
    stack.worker._timers_at = 0
    stack.run()
    seated = stack.told("bob")[-1]
    assert seated["state"] == "seated" and stack.told("ann")[-1]["match"] == seated["match"]


class FlakyAcks:
    """A ReplicaAcks stand-in: NOREPLICAS while ``down`` (a master cut off), else records the keys."""

    def __init__(self) -> None:
        self.down = False
        self.confirmed: list[str] = []

    def confirm(self, written: Any) -> None:
        import redis

        if self.down:
            raise redis.ResponseError("NOREPLICAS Not enough good replicas to write.")
        self.confirmed += list(written)


def test_notes_and_read_models_are_confirmed_before_the_event_goes_on(real_redis) -> None:
    """With replica acks in force, the lobby's notes and read models of an event are confirmed on
    the replicas before the commands the event causes run: a NOREPLICAS (the master cut off)
    leaves the feed entry pending, and the notes are written again once a replica acknowledges
    (a note a master takes and loses in a fail-over would otherwise be gone: issue 35 §4)."""
    acks = FlakyAcks()
    stack = Stack(real_redis)
    stack.store.replica_acks = acks  # as serve sets it before it builds the lobby
    stack.worker = build_lobby(real_redis, stack.store, stack.matches, stack.ledger, stack.rooms, stack.clock,
                               "serve-1", {"outbox_ttl": 3600, "outbox_maxlen": 1000, "full_view_every": 1})
    for b in range(stack.store.buckets):
        stack.worker.own(b)
    stack.send("Join", "ann", "j-ann")
    stack.run()
    assert {keys.place_key("ann"), keys.outbox_key("ann")} <= set(acks.confirmed)
    acks.down = True
    stack.send("Join", "bob", "j-bob")
    stack.run()
    assert [m["state"] for m in stack.told("bob")] == ["queued"]
    assert real_redis.keys("sk:*:t:*:info") == []  # the pairing waits for the confirmation
    acks.down = False
    stack.worker._retry_at = 0.0  # the retry period (RETRY_EVERY_S) has passed
    stack.run()
    assert [m["state"] for m in stack.told("bob")] == ["queued", "seated"]  # the note again, then the seat
    table = stack.place("ann")["table"]
    info = {k.decode(): v.decode() for k, v in real_redis.hgetall(keys.table_info_key(table)).items()}
    assert info["status"] == "seated" and {info["a"], info["b"]} == {"ann", "bob"}
    assert keys.table_info_key(table) in acks.confirmed


def test_handled_entries_are_acknowledged_in_the_next_reads_round_trip(stack: Stack, monkeypatch) -> None:
    """Issue 38: what a round handled is acknowledged in the next read's round trip (XACK before
    the XREADGROUP, one pipeline), not a round trip of its own; a re-read of the consumer's
    pending entries after it does not deliver them again, and stopping sends what is left."""
    import threading

    import redis

    from engine.service.lobby_feed import GROUP

    chan = keys.lobby_inbox_key(keys.room_bucket("points"))
    stack.worker.block_ms = 1
    stack.send("Join", "ann", "j-ack")
    assert stack.worker.run_once() >= 1
    assert stack.client.xpending(chan, GROUP)["pending"] == 1  # handled: acknowledged with the next read
    from engine.store import wire

    trips: list[list[str]] = []
    real = redis.client.Pipeline.execute
    real_trip = wire.round_trip

    def execute(pipe: Any, *a: Any, **k: Any) -> Any:
        trips.append([str(c[0][0]) for c in pipe.command_stack])
        return real(pipe, *a, **k)

    def round_trip(client: Any, commands: Any) -> Any:  # packed, on a real redis-server
        trips.append([c.split(b"\r\n")[2].decode() for c in commands])
        return real_trip(client, commands)

    def xack(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("an acknowledgement in a round trip of its own")

    monkeypatch.setattr(redis.client.Pipeline, "execute", execute)
    monkeypatch.setattr(wire, "round_trip", round_trip)
    monkeypatch.setattr(stack.client, "xack", xack)
    stack.worker._retry.add(chan)  # the channel's pending entries read again first
    stack.worker._retry_at = 0.0
    stack.worker.run_once()
    assert trips[0] == ["XACK", "XREADGROUP"]
    assert stack.client.xpending(chan, GROUP)["pending"] == 0
    assert [(m["state"], m.get("reason")) for m in stack.told("ann")] == [("queued", None)]  # handled once
    stack.send("Join", "bob", "j-bob")
    assert stack.worker.run_once() >= 1
    assert stack.client.xpending(chan, GROUP)["pending"] == 1
    stop = threading.Event()
    stop.set()
    stack.worker.run(stop)  # stopping: the last acknowledgements go
    assert stack.client.xpending(chan, GROUP)["pending"] == 0


def test_a_pending_entry_deleted_meanwhile_is_acknowledged_and_the_round_goes_on(stack: Stack) -> None:
    """A re-read of the consumer's pending entries gives a deleted entry without fields (nil):
    it is acknowledged, and the entries around it are handled (the packed read's raw reply
    on a real redis-server)."""
    from engine.service.lobby_feed import GROUP
    from engine.store import wire

    assert wire.usable(stack.client)  # the packed path is the one under test
    chan = keys.lobby_inbox_key(keys.room_bucket("points"))
    stack.worker.block_ms = 1
    stack.send("Join", "ann", "j-ann")
    assert stack.worker.run_once() >= 1  # the channel's group exists, ann is queued
    stack.send("Join", "bob", "j-bob")
    stack.send("Join", "cy", "j-cy")
    # delivered to the worker's consumer and not handled (a crash after the read) ...
    read = stack.client.xreadgroup(GROUP, stack.worker.consumer, {chan: ">"})
    bob_id = read[0][1][0][0]
    stack.client.xdel(chan, bob_id)  # ... and bob's entry trimmed meanwhile
    stack.worker._retry.add(chan)
    stack.worker._retry_at = 0.0
    stack.worker.run_once()
    stack.worker.run_once()  # the acknowledgements go with this read
    assert stack.client.xpending(chan, GROUP)["pending"] == 0
    assert [m["state"] for m in stack.told("cy") if m["kind"] == "lobby"][:1] == ["queued"]  # handled
    assert stack.told("bob") == []
