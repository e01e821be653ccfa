"""The appends of one inbox read go in one pipeline (issue 13 §3): MatchService.execute_many
decides each command on its match's cached state, sends one append per match per round
(EventStore.append_many) and runs what the store did not take again on its own.

On the in-memory store, fakeredis and a real redis-server: a WrongVersion in the middle of
a round falls back and loses nothing, two commands of one match in one batch both apply in
order, and (through the inbox consumer) a read mixing a poison message, a duplicate and a
stale command treats each alone (issue 11 §1, §6) while the valid commands are published.
"""

from __future__ import annotations

from typing import Any

import pytest

import redis

from engine.config import load_config
from engine.match.commands import CreateMatch, Pass, Play, Ready, Sit
from engine.match.replay import replay
from engine.service.client import GatewayClient
from engine.service.inbox import InboxConsumer
from engine.service.service import MatchService, Outcome
from engine.service.shuffle import seeded_random, seeded_server_seeds
from engine.service.state_cache import StateCache
from engine.store import keys
from engine.store.base import AppendRequest, EventStore
from engine.store.memory import InMemoryEventStore
from engine.store.redis_store import RedisEventStore
from tests.conftest import own_redis_server

CONFIG = load_config("points").to_record()


@pytest.fixture(scope="module")
def redis_server():
    """This module's own redis-server: its tests SCRIPT FLUSH, which is server-wide."""
    yield from own_redis_server()


@pytest.fixture(params=["memory", "fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def store(request) -> EventStore:
    if request.param == "memory":
        return InMemoryEventStore()
    return RedisEventStore(request.getfixturevalue({"fakeredis": "fake_redis", "redis": "real_redis"}[request.param]))


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def r(request):
    return request.getfixturevalue({"fakeredis": "fake_redis", "redis": "real_redis"}[request.param])


class Rounds:
    """Stands for a store and records the size of each append_many round."""

    def __init__(self, store: EventStore):
        self._store = store
        self.rounds: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def append_many(self, requests: list[AppendRequest]) -> list[Any]:
        self.rounds.append(len(requests))
        return self._store.append_many(requests)


def service(store: Any, seed: int = 1) -> MatchService:
    clock = iter(range(1_000_000, 10**12, 1000))
    return MatchService(store, lambda: next(clock), seeded_random(seed), state_cache=StateCache(),
                        server_seeds=seeded_server_seeds(seed))


def start(svc: MatchService, mid: str) -> None:
    for c in (CreateMatch(command_id=f"{mid}-c", match_id=mid, config=CONFIG),
              Sit(command_id=f"{mid}-sa", match_id=mid, player="a"),
              Sit(command_id=f"{mid}-sb", match_id=mid, player="b"),
              Ready(command_id=f"{mid}-ra", match_id=mid, player="a"),
              Ready(command_id=f"{mid}-rb", match_id=mid, player="b")):
        assert svc.execute(c).rejection is None


def lead(st, command_id: str) -> Play:
    return Play(command_id=command_id, match_id=st.match_id, player=st.current_player,
                cards=(st.seat(st.turn).hand[0],))


def accepted(result: Any) -> Outcome:
    assert isinstance(result, Outcome), result
    assert result.rejection is None and not result.duplicate, result
    return result


def test_a_wrong_version_in_the_middle_of_a_round_falls_back_and_loses_nothing(store) -> None:
    rounds = Rounds(store)
    mine, other = service(rounds), service(store, seed=2)  # other: another process, its own cache
    for mid in ("m1", "m2", "m3"):
        start(mine, mid)
    # m2 moves on behind mine's cache: a lead and the opponent's pass (the leader leads again)
    st = other.load_state("m2")
    assert other.execute(lead(st, "o1")).rejection is None
    st = other.load_state("m2")
    assert other.execute(Pass(command_id="o2", match_id="m2", player=st.current_player)).rejection is None
    truth = other.load_state("m2")
    stale = mine.state_cache.get("m2")
    assert stale is not None and stale.version < truth.version
    commands = [lead(mine.load_state("m1"), "x1"), lead(truth, "x2"), lead(mine.load_state("m3"), "x3")]
    rounds.rounds.clear()
    results = mine.execute_many(commands)
    assert rounds.rounds == [3]  # one pipeline for the three appends
    outs = [accepted(x) for x in results]
    # m2's append met the other writer's events: decided again on the stream, after them
    assert outs[1].events[0].seq == truth.version + 1
    for mid, out, cmd in zip(("m1", "m2", "m3"), outs, commands):
        events = store.load(mid)
        assert replay(events) == out.state == mine.load_state(mid)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert store.command_range(mid, cmd.command_id) == (out.events[0].seq, out.events[-1].seq)
    assert store.command_range("m2", "o1") is not None and store.command_range("m2", "o2") is not None


def test_two_commands_of_one_match_in_one_batch_both_apply_in_order(store) -> None:
    rounds = Rounds(store)
    svc = service(rounds)
    for mid in ("m1", "m2"):
        assert svc.execute(CreateMatch(command_id=f"{mid}-c", match_id=mid, config=CONFIG)).rejection is None
    commands: list[Any] = []  # interleaved: m1, m2, m1, m2, …
    for make in (lambda m: Sit(command_id=f"{m}-sa", match_id=m, player="a"),
                                 lambda m: Sit(command_id=f"{m}-sb", match_id=m, player="b"),
                                 lambda m: Ready(command_id=f"{m}-ra", match_id=m, player="a"),
                                 lambda m: Ready(command_id=f"{m}-rb", match_id=m, player="b")):
        commands += [make("m1"), make("m2")]
    rounds.rounds.clear()
    outs = [accepted(x) for x in svc.execute_many(commands)]
    # each round holds one append per match: four rounds of two
    assert rounds.rounds == [2, 2, 2, 2]
    for mid in ("m1", "m2"):
        mine = [o for o, c in zip(outs, commands) if c.match_id == mid]
        versions = [o.state.version for o in mine]
        assert versions == sorted(versions) and len(set(versions)) == 4
        assert [e.type for e in mine[-1].events][-1] == "HandDealt"  # the second Ready dealt
        events = store.load(mid)
        assert replay(events) == mine[-1].state == svc.load_state(mid)
        assert [e.command_id for e in events] == [f"{mid}-c", f"{mid}-sa", f"{mid}-sb", f"{mid}-ra",
                                                  *[f"{mid}-rb"] * (len(events) - 4)]


def test_creates_of_uncached_matches_join_the_round_and_an_existing_match_still_refuses(store) -> None:
    rounds = Rounds(store)
    svc, other = service(rounds), service(store, seed=2)  # other: another process, its own cache
    assert other.execute(CreateMatch(command_id="old-c", match_id="old", config=CONFIG)).rejection is None
    commands = [CreateMatch(command_id="n1-c", match_id="n1", config=CONFIG),
                CreateMatch(command_id="n2-c", match_id="n2", config=CONFIG),
                CreateMatch(command_id="again", match_id="old", config=CONFIG),  # exists: not in svc's cache
                CreateMatch(command_id="old-c", match_id="old", config=CONFIG)]  # the create retried
    results = svc.execute_many(commands)
    assert rounds.rounds[0] == 3  # the three creates decided on the empty match: one pipeline
    for mid, out in zip(("n1", "n2"), results[:2]):
        out = accepted(out)
        assert [e.type for e in out.events] == ["MatchCreated"]
        assert replay(store.load(mid)) == out.state == svc.state_cache.get(mid)
    again, retried = results[2], results[3]
    assert isinstance(again, Outcome) and again.rejection is not None
    assert again.rejection.code == "match_exists"
    assert isinstance(retried, Outcome) and retried.duplicate and retried.rejection is None
    assert [e.command_id for e in store.load("old")] == ["old-c"]  # nothing appended twice


def test_a_transient_failure_of_the_pipeline_leaves_every_command_of_the_round_unfinished(store) -> None:
    class Down(Rounds):
        def append_many(self, requests: list[AppendRequest]) -> list[Any]:
            raise redis.ConnectionError("connection lost")

    svc = service(store)
    start(svc, "m1")
    start(svc, "m2")
    svc.store = Down(store)
    before = {m: store.version(m) for m in ("m1", "m2")}
    results = svc.execute_many([lead(svc.load_state("m1"), "x1"), lead(svc.load_state("m2"), "x2")])
    assert all(isinstance(x, redis.ConnectionError) for x in results)
    assert {m: store.version(m) for m in ("m1", "m2")} == before
    svc.store = store  # Redis is back: the same commands (redelivered) apply once
    outs = [accepted(x) for x in svc.execute_many([lead(svc.load_state("m1"), "x1"),
                                                   lead(svc.load_state("m2"), "x2")])]
    assert [o.state.version for o in outs] == [before["m1"] + 1, before["m2"] + 1]


# -- through the inbox consumer ------------------------------------------------------------
def test_a_read_mixing_poison_a_duplicate_and_a_stale_command_treats_each_alone(r) -> None:
    store = Rounds(RedisEventStore(r))
    svc = service(store)
    gw = InboxConsumer(r, svc, "w1")
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:t")
    for mid in ("m1", "m2"):
        client.create_match(mid, CONFIG)
        client.sit(mid, "a")
        client.sit(mid, "b")
        client.ready(mid, "a")
        client.ready(mid, "b")
    while gw.run_once(block_ms=None, count=50):
        pass
    st1, st2 = svc.load_state("m1"), svc.load_state("m2")
    first = client.play("m1", st1.current_player, cards=[st1.seat(st1.turn).hand[0]], expected_version=st1.version)
    while gw.run_once(block_ms=None, count=50):
        pass
    st1 = svc.load_state("m1")
    last = client.replies()[-1].id
    store.rounds.clear()
    # one read: poison, a valid pass (m1), a valid play (m2), a duplicate (m1's play again),
    # a stale play (m2), and m1's leader leading again after the pass (a second m1 command)
    poison = r.xadd(keys.INBOX, {"c": b"\xc1 not msgpack"})
    passed = client.pass_("m1", st1.current_player, expected_version=st1.version)
    valid = client.play("m2", st2.current_player, cards=[st2.seat(st2.turn).hand[0]], expected_version=st2.version)
    client.send(first.command)
    stale = client.play("m2", st2.current_player, cards=[st2.seat(st2.turn).hand[1]], expected_version=st2.version - 1)
    leader = st1.seat_of(first.command.player)
    again = client.play("m1", first.command.player, cards=[st1.seat(leader).hand[0]],
                        expected_version=st1.version + 1)
    assert gw.run_once(block_ms=None, count=10) == 6  # every message finished and acknowledged
    assert not r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"]
    [dead] = [f for _, f in r.xrange(keys.DEAD_LETTERS)]
    assert dead[b"inbox_id"].decode() == poison.decode()
    kinds = {m.command_id: (m.kind, m.code) for m in client.replies(last)}
    assert kinds == {passed.command_id: ("accepted", None), first.command_id: ("duplicate", None),
                     stale.command_id: ("rejected", "stale"), valid.command_id: ("accepted", None),
                     again.command_id: ("accepted", None)}
    assert store.rounds == [2, 1]  # pass (m1) + play (m2); the duplicate of m1 sent that round first; then m1's lead
    ids = [e.command_id for e in store.load("m1")]
    assert ids.count(first.command_id) == 1 and ids[-2:] == [passed.command_id, again.command_id]
    assert [e.command_id for e in store.load("m2")][-1] == valid.command_id
    assert stale.command_id not in [e.command_id for e in store.load("m2")]


def test_a_pipelined_round_after_a_script_flush_still_appends_everything(real_redis) -> None:
    """NOSCRIPT comes back per request of the pipeline: each is appended again alone."""
    store = RedisEventStore(real_redis)
    svc = service(store)
    start(svc, "m1")
    start(svc, "m2")
    real_redis.script_flush()
    outs = [accepted(x) for x in svc.execute_many([lead(svc.load_state("m1"), "x1"),
                                                   lead(svc.load_state("m2"), "x2")])]
    assert [store.command_range(m, c) for m, c in (("m1", "x1"), ("m2", "x2"))] == \
        [(o.events[0].seq, o.events[-1].seq) for o in outs]


def test_a_deferred_acknowledgement_follows_the_publication_and_goes_with_the_next_read(r) -> None:
    import threading

    svc = service(RedisEventStore(r))
    gw = InboxConsumer(r, svc, "w1")
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:t")
    sent = client.create_match("m1", CONFIG)
    assert gw.run_once(block_ms=None, count=10, defer_ack=True) == 1
    # published, not acknowledged yet: a crash now redelivers it (a duplicate, published again)
    assert [m.command_id for m in client.replies()] == [sent.command_id]
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 1
    client.sit("m1", "a")
    assert gw.run_once(block_ms=None, count=10, defer_ack=True) == 1  # its read acknowledged the first
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 1
    stop = threading.Event()
    stop.set()
    gw.run(stop)  # stopping sends what is left
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0
    assert svc.load_state("m1").version == 2
