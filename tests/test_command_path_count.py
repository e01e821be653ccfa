"""The one-node command path's Redis work per player command, counted (issue 38 §1).

On a real redis-server of this module alone, bot matches are played through the bucket
inboxes (``sk:{b<N>}:inbox``) as ``serve`` runs them on one node: one
:class:`~engine.service.inbox.InboxConsumer` per bucket stream behind the player channel,
a :class:`~engine.service.service.MatchService` with its state cache on a
:class:`~engine.store.redis_store.RedisEventStore`, the streams read together
(:func:`~engine.service.inbox.run_together`: one XREADGROUP, one round of appends), the
publication carried by the append, acknowledgements sent with the next read.  The driver
sends one command per live match per round (as a gateway does, no ``reply_to``) and the
consumers read once per round, so the figures are counts, not times: ``INFO commandstats`` around the consumers' work only (the driver's own
XADDs and reads are outside it), every command run inside the append script included.

A second test sends one command per read (a lone player: concurrency 1) and counts the
round trips serve sends (every redis-py connection of the process): two per command.

The bounds pin today's path: a command that grows it (a lease or cache check per
command, a read of what the script returned, a pre-check of every carried key, a
notice nobody reads) fails here.  Idle work (leases, sweeps, blocking reads that time
out) is per second, not per command, and is not in this count.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from engine.config import load_config
from engine.service.channels import PLAYER, ChannelService
from engine.service.client import GatewayClient
from engine.service.inbox import InboxConsumer, run_together
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random, seeded_server_seeds
from engine.service.state_cache import StateCache
from engine.store import keys
from engine.store.redis_store import RedisEventStore
from engine.tools.bot import Bot, choose_for
from tests.conftest import RedisServer, own_redis_server

pytestmark = pytest.mark.redis

CONFIG = load_config("points").to_record()
MATCHES = 12
SEED = 7

#: the most of each Redis command per player command on the one-node path (in-script
#: commands included), and of all of them: the path as it stands, with a little room
#: for the game's own variation (events per command, views)
BOUNDS = {
    "xreadgroup": 0.25,  # read: one for every bucket stream (one a round of 12 commands here)
    "xack": 0.9,         # ack: one per stream per read, sent with the next read
    "evalsha": 1.0,      # append: one script call per command
    "hget": 1.0,         # in the script: the command-id check
    "xlen": 1.0,         # in the script: the version check
    "xadd": 3.5,         # in the script: the events, the players' updates (no feed entry for a move)
    "hset": 2.0,         # in the script: the command id, the deadline's info
    "zadd": 1.0,         # in the script: the deadline
    "expire": 2.5,       # in the script: each update stream's TTL
    "spublish": 2.5,     # in the script: each update's notice (the gateways' wake-up)
}
TOTAL = 14.5
#: serve's round trips per player command when each read carries one command (a lone
#: player, concurrency 1): the read (with the last read's acknowledgement in its pipeline)
#: and the append (the updates, the reply, the notices and the deadline inside its script)
ROUND_TRIPS_ALONE = 2.0
#: never on the path: a pre-check of the carried keys, a reload of the match
ABSENT = ("type", "xrange", "xrevrange", "get", "exists", "ttl")


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    yield from own_redis_server()  # commandstats are server-wide: nobody else's commands


def calls(r: Any) -> Counter[str]:
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()
                    if k != "cmdstat_info"})


def _setup(r: Any) -> tuple[MatchService, list[InboxConsumer], GatewayClient, list[str]]:
    """The matches created and dealt (through the lobby's stream, not counted); the bucket
    consumers as serve runs them on one node."""
    clock = iter(range(1_000_000, 10**12, 1000))
    svc = MatchService(RedisEventStore(r), lambda: next(clock), seeded_random(SEED), state_cache=StateCache(),
                       server_seeds=seeded_server_seeds(SEED))
    setup = InboxConsumer(r, svc, "t", stream=keys.INBOX)  # the lobby's commands, not counted
    consumers = [InboxConsumer(r, ChannelService(svc, PLAYER), "t", stream=keys.inbox_key(b))
                 for b in range(keys.DEFAULT_BUCKETS)]
    lobby = GatewayClient(r, inbox=keys.INBOX, ops=keys.INBOX)
    mids = [f"count-{i}" for i in range(MATCHES)]
    for mid in mids:
        lobby.create_match(mid, CONFIG)
        for p in ("a", "b"):
            lobby.sit(mid, f"{mid}{p}")
        for p in ("a", "b"):
            lobby.ready(mid, f"{mid}{p}")
    while setup.run_once(block_ms=None, count=50):
        pass
    run_together(consumers, block_ms=None)  # each consumer's own pending entries first: none
    return svc, consumers, GatewayClient(r), mids


def _send(client: GatewayClient, bot: Bot, s: Any) -> None:
    play = choose_for(bot, s, s.current_player)
    if play is None:
        client.pass_(s.match_id, s.current_player, expected_version=s.version)
    else:
        client.play(s.match_id, s.current_player, cards=list(play.cards), expected_version=s.version)


def test_the_one_node_path_runs_a_bounded_number_of_redis_commands_per_player_command(real_redis) -> None:
    r = real_redis
    svc, group, client, mids = _setup(r)
    cache = svc.state_cache
    assert cache is not None
    bot, rng = Bot("greedy", random.Random(SEED)), random.Random(SEED)
    counted: Counter[str] = Counter()
    commands = 0
    for _ in range(2000):
        live = [m for m in mids if (s := cache.get(m)) is not None and s.phase == "playing"]
        if not live:
            break
        for mid in rng.sample(live, len(live)):
            s = cache.get(mid)
            assert s is not None
            _send(client, bot, s)
            commands += 1
        before = calls(r)
        assert run_together(group, block_ms=None, count=50) == len(live)
        counted += calls(r) - before
    before = calls(r)
    for c in group:
        c.flush_acks()
    counted += calls(r) - before
    assert not live, "the matches did not finish"
    assert commands > 200  # a positive control: enough commands for a per-command figure
    assert sum(c.stats.accepted for c in group) == commands
    per = {k: v / commands for k, v in counted.items()}
    total = sum(per.values())
    shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]))
    for name, bound in BOUNDS.items():
        assert per.get(name, 0.0) <= bound, f"{name}: {per.get(name, 0.0):.2f} per command > {bound} ({shown})"
    for name in ABSENT:
        assert name not in per, f"{name} on the command path ({shown})"
    # and the rare ones: a cleared deadline, a snapshot every 50 events, a consumer's first read
    assert set(per) <= set(BOUNDS) | {"zrem", "hdel", "sadd", "set", "xpending"}, shown
    assert sum(per.get(k, 0.0) for k in ("zrem", "hdel", "sadd", "set", "xpending")) <= 0.2, shown
    assert total <= TOTAL, f"{total:.2f} Redis commands per player command > {TOTAL} ({shown})"


def test_a_lone_command_costs_serve_two_round_trips(real_redis, monkeypatch) -> None:
    """Concurrency 1: each read carries one command.  serve's round trips per command are the
    read (the last acknowledgement in its pipeline) and the append: no deadline write, reply,
    notice, version read-back or acknowledgement of its own."""
    from redis.connection import Connection

    r = real_redis
    svc, group, client, mids = _setup(r)
    cache = svc.state_cache
    assert cache is not None
    sent = [0]
    original = Connection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        original(self, command, check_health)

    bot, rng = Bot("greedy", random.Random(SEED)), random.Random(SEED)
    commands = trips = 0
    for _ in range(5000):
        live = [m for m in mids if (s := cache.get(m)) is not None and s.phase == "playing"]
        if not live:
            break
        s = cache.get(rng.choice(live))
        assert s is not None
        _send(client, bot, s)  # the driver's XADD: not serve's
        commands += 1
        monkeypatch.setattr(Connection, "send_packed_command", counted)
        sent[0] = 0
        assert run_together(group, block_ms=None, count=50) == 1
        monkeypatch.setattr(Connection, "send_packed_command", original)
        trips += sent[0]
    assert not live, "the matches did not finish"
    assert commands > 200  # a positive control: enough commands for a per-command figure
    assert sum(c.stats.accepted for c in group) == commands
    # the rare extra: a snapshot every 50 events (its own write), a consumer's first read
    assert trips / commands <= ROUND_TRIPS_ALONE + 0.05, f"{trips / commands:.3f} round trips per command"
