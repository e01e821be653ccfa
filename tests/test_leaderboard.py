"""``GET /api/leaderboard`` and ``POST /api/leaderboard/name`` (issue 40 §3; docs/RANKED.md), and
the ``rating`` message on a player's update stream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import fakeredis
import msgpack
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from engine.config import load_config
from engine.store import keys
from gateway import web
from gateway.outbox import parse_entry
from gateway.tokens import mint
from engine.service.publish import message_publisher
from projections.ladders import RatingProjector, RedisRatingStore, board_entry
from projections.ratings import RatedMatch
from tests.test_ratings import match_events

SECRET = b"k" * 32


@dataclass
class Hub:
    rooms: Any
    lobby: Any = None


@dataclass
class Book:
    rooms: dict[str, Any] = field(default_factory=dict)


@dataclass
class Ctx:
    redis: Any
    hub: Any
    secret: bytes = SECRET
    dev: bool = False
    bots: bool = False
    allow_live_replay: bool = False
    frame_ancestors: tuple[str, ...] = ()


def bearer(player: str, role: str = "player") -> dict[str, str]:
    return {"Authorization": f"Bearer {mint(SECRET, player, role=role, ttl_seconds=60)}"}


@pytest.fixture
def world():
    server = fakeredis.FakeServer()
    sync = fakeredis.FakeRedis(server=server)
    ratings = RedisRatingStore(sync)
    ratings.start_season("s1", 0)
    players = [f"p{i:02d}" for i in range(30)]
    for i in range(200):  # p00 < p01 < … in strength: the lower index loses
        a, b = players[i % 30], players[(i * 7 + 3) % 30]
        if a == b:
            continue
        w, lo = (a, b) if a > b else (b, a)
        ratings.apply(RatedMatch(f"m{i:03d}", "ranked", 10 + i, w, lo), "s1")
    sync.hset(keys.NAMES_KEY, mapping={p: f"name-{p}" for p in players})
    cfg = load_config("points").model_copy(update={"name": "ranked", "ranked": True})
    book = Book({"ranked": cfg, "points": load_config("points")})
    aio = fakeredis.aioredis.FakeRedis(server=server)
    client = TestClient(Starlette(routes=web.routes(Ctx(redis=aio, hub=Hub(book)))))
    return client, ratings, sync


def test_top_n_and_me_with_neighbours(world):
    client, ratings, _ = world
    r = client.get("/api/leaderboard?room=ranked&season=s1&limit=10")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"room", "season", "entries"} and (body["room"], body["season"]) == ("ranked", "s1")
    assert [e["rank"] for e in body["entries"]] == list(range(1, 11))
    assert all(set(e) == {"rank", "player", "name", "rating", "tier", "bot"} for e in body["entries"])
    assert not any(e["bot"] for e in body["entries"])
    assert board_entry(1, "bot-7", 1000.0, {})["bot"] and not board_entry(1, "bot-x", 1000.0, {})["bot"]
    ratings_shown = [e["rating"] for e in body["entries"]]
    assert ratings_shown == sorted(ratings_shown, reverse=True)
    assert body["entries"] == ratings.leaderboard("ranked", "s1", 10)["entries"]
    assert client.get("/api/leaderboard?room=ranked").json()["season"] == "s1"  # the running season
    me = client.get("/api/leaderboard?room=ranked&season=s1&limit=3&around=me", headers=bearer("p10")).json()
    assert me["me"]["player"] == "p10" and me["me"]["name"] == "name-p10"
    ranks = [e["rank"] for e in me["me"]["neighbours"]]
    assert me["me"]["rank"] in ranks and ranks == list(range(ranks[0], ranks[0] + len(ranks)))
    assert len(ranks) == 11
    stranger = client.get("/api/leaderboard?room=ranked&around=me", headers=bearer("nobody")).json()
    assert stranger["me"] is None


def test_the_table_players_entries(world):
    client, ratings, _ = world
    body = client.get("/api/leaderboard?room=ranked&limit=1&players=p29,p00,nobody").json()
    board = {e["player"]: e for e in ratings.leaderboard("ranked", "s1", 30)["entries"]}
    assert body["players"]["p29"] == board["p29"] and body["players"]["p00"] == board["p00"]
    assert body["players"]["nobody"] is None
    r = client.get("/api/leaderboard?room=ranked&players=" + ",".join(f"x{i}" for i in range(11)))
    assert (r.status_code, r.json()["error"]) == (400, "bad_request")


def test_a_player_hides_their_name(world):
    client, _, _ = world
    r = client.post("/api/leaderboard/name", json={"hidden": True}, headers=bearer("p29"))
    assert r.json() == {"player": "p29", "hidden": True}
    top = client.get("/api/leaderboard?room=ranked&limit=30").json()["entries"]
    assert {e["player"]: e["name"] for e in top}["p29"] is None
    client.post("/api/leaderboard/name", json={"hidden": False}, headers=bearer("p29"))
    top = client.get("/api/leaderboard?room=ranked&limit=30").json()["entries"]
    assert {e["player"]: e["name"] for e in top}["p29"] == "name-p29"


REFUSALS = [
    ("no room", "/api/leaderboard", {}, 404, "unknown_room"),
    ("an unknown room", "/api/leaderboard?room=nope", {}, 404, "unknown_room"),
    ("a room name that is no ranked name", "/api/leaderboard?room=a%7Db", {}, 404, "unknown_room"),
    ("a room that is not ranked", "/api/leaderboard?room=points", {}, 404, "not_ranked"),
    ("an unknown season", "/api/leaderboard?room=ranked&season=s9", {}, 404, "unknown_season"),
    ("a limit too large", "/api/leaderboard?room=ranked&limit=5000", {}, 400, "bad_request"),
    ("a limit that is no number", "/api/leaderboard?room=ranked&limit=x", {}, 400, "bad_request"),
    ("around someone else", "/api/leaderboard?room=ranked&around=p01", {}, 400, "bad_request"),
    ("around=me without a token", "/api/leaderboard?room=ranked&around=me", {}, 401, "unauthorized"),
    ("around=me with a spectator's token", "/api/leaderboard?room=ranked&around=me", "spectator", 403,
     "not_allowed"),
]


@pytest.mark.parametrize("case,url,who,status,code", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_refusals(world, case, url, who, status, code):
    client, _, _ = world
    headers = bearer("p01", role=who) if isinstance(who, str) else {}
    r = client.get(url, headers=headers)
    assert (r.status_code, r.json()["error"]) == (status, code)


def test_hiding_needs_a_player_token_and_a_flag(world):
    client, _, _ = world
    assert client.post("/api/leaderboard/name", json={"hidden": True}).status_code == 401
    r = client.post("/api/leaderboard/name", json={"hidden": "yes"}, headers=bearer("p01"))
    assert (r.status_code, r.json()["error"]) == (400, "bad_request")


def test_rating_message_on_the_update_stream(fake_redis):
    """A settled ranked match puts a ``rating`` entry on each human player's stream, with the
    fields of docs/PROTOCOL.md, valid against server.json."""
    import json
    from pathlib import Path

    import jsonschema

    ratings = RedisRatingStore(fake_redis)
    ratings.start_season("s1", 0)
    proj = RatingProjector(ratings, message_publisher(fake_redis))
    proj.project(match_events("m1", "alice", "bob", "alice", 1000))
    entries = fake_redis.xrange(keys.outbox_key("alice"))
    assert len(entries) == 1
    e = parse_entry(*entries[0])
    assert e.kind == "rating" and e.match == "m1"
    msg = e.body
    assert msg == msgpack.unpackb(entries[0][1][b"body"])
    assert msg["kind"] == "rating" and (msg["room"], msg["season"]) == ("ranked", "s1")
    assert msg["before"] == {"rating": 1000, "tier": "bronze"} and msg["after"]["rating"] > 1000
    assert msg["provisional"] is True  # 1 of 3 rated matches (the test room's provisional_matches)
    schema = json.loads((Path(web.__file__).parent / "schemas" / "server.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(msg)
    bad = {**msg, "after": {"rating": 1, "tier": "wood"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(bad)
    # a match against a bot in a rate_bots room: the bot gets no stream entry
    from tests.test_ratings import ranked_config

    proj.project(match_events("m2", "alice", "bot-1", "alice", 2000, config=ranked_config(rate_bots=True)))
    assert not fake_redis.exists(keys.outbox_key("bot-1"))
    assert len(fake_redis.xrange(keys.outbox_key("alice"))) == 2


class _Conn:
    """A socket as the resync sees it (gateway/resync.py Receiver)."""

    def __init__(self, player: str, role: str = "player"):
        self.id, self.hub, self.match, self.source = "c1", None, None, None
        self._player, self._role, self.sent = player, role, []

    @property
    def is_player(self) -> bool:
        return self._role == "player"

    @property
    def player(self) -> str:
        return self._player

    async def send(self, message: dict) -> None:
        self.sent.append(message)


def test_the_gateway_forwards_a_rating_entry_to_the_player_only():
    import asyncio

    from gateway.resync import Resync

    msg = {"kind": "rating", "match": "m1", "room": "ranked", "season": "s1",
           "before": {"rating": 1000, "tier": "bronze"}, "after": {"rating": 1090, "tier": "bronze"},
           "provisional": True}
    entry = parse_entry(b"5-0", {b"kind": b"rating", b"match": b"m1", b"command_id": b"",
                                 b"body": msgpack.packb(msg)})
    player, spectator = _Conn("alice"), _Conn("alice", role="spectator")
    for conn in (player, spectator):
        asyncio.run(Resync(conn, gap_wait_s=0.1).on_entry(entry))
    assert player.sent == [msg] and spectator.sent == []
