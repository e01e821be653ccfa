"""gateway/web.py without a browser: the JSON endpoints of the page (hint, readings,
replay, dev tokens) through Starlette's test client, and the static pages'
testability contract (issue 15).  Every refusal has a test."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from gateway import web
from gateway.tokens import mint

SECRET = b"k" * 32
STATIC = Path(web.__file__).resolve().parent / "static"


@dataclass
class Ctx:
    redis: Any = None
    secret: bytes = SECRET
    dev: bool = False
    bots: bool = False
    hub: Any = None
    allow_live_replay: bool = False
    frame_ancestors: tuple[str, ...] = ()


def client(**kw: Any) -> TestClient:
    return TestClient(Starlette(routes=web.routes(Ctx(**kw))))


def bearer(player: str, role: str = "player", secret: bytes = SECRET) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint(secret, player, role=role, ttl_seconds=60)}"}


def test_pages_and_static_files_are_served() -> None:
    c = client()
    for path in ("/", "/watch/m1", "/replay/m1"):
        r = c.get(path)
        assert r.status_code == 200 and "<script type=\"module\"" in r.text
    assert c.get("/static/js/table.js").status_code == 200
    assert c.get("/static/css/table.css").status_code == 200
    assert c.get("/static/../web.py").status_code == 404


def test_dev_tokens_only_with_dev() -> None:
    assert client().post("/api/dev/token", json={"name": "alice"}).status_code in (404, 405)
    c = client(dev=True)
    r = c.post("/api/dev/token", json={"name": "alice"})
    assert r.status_code == 200 and r.json()["player"] == "alice" and r.json()["role"] == "player"
    from gateway.tokens import verify

    assert verify(SECRET, r.json()["token"]).player == "alice"
    # issue 25: a Chinese name signs in; the id is derived from it, the name travels in the token
    r = c.post("/api/dev/token", json={"name": " 小明\u200b"})
    assert r.status_code == 200 and r.json()["name"] == "小明" and r.json()["player"].startswith("u-")
    ident = verify(SECRET, r.json()["token"])
    assert (ident.player, ident.name) == (r.json()["player"], "小明")
    assert c.post("/api/dev/token", json={"name": "小明"}).json()["player"] == ident.player  # same name, same id
    assert c.post("/api/dev/token", json={"name": "a b"}).json()["player"].startswith("u-")
    for body, needle, code in (({"name": ""}, "1–24", "bad_name"), ({"name": "\u202e\x00"}, "1–24", "bad_name"),
                               ({"name": "x" * 25}, "1–24", "bad_name"), ({"name": 7}, "text", "bad_name"),
                               ({"name": "al", "role": "root"}, "role", "bad_request"), ([1], "name", "bad_request")):
        r = c.post("/api/dev/token", json=body)
        assert r.status_code == 400 and needle in r.json()["reason"] and r.json()["error"] == code, (body, r.json())
    assert c.post("/api/dev/token", content=b"{nope").json()["error"] == "bad_request"


@pytest.mark.parametrize("make, code", [
    (lambda: {}, 401),
    (lambda: {"Authorization": "Bearer nope"}, 401),
    (lambda: bearer("alice", secret=b"z" * 32), 401),            # signed with another secret
    (lambda: {"Authorization": f"Bearer {mint(SECRET, 'al', ttl_seconds=1, now=1_000)}"}, 401),  # expired
    (lambda: bearer("sam", role="spectator"), 403),
    (lambda: bearer("olga", role="operator"), 403),
])
def test_hint_and_readings_need_a_player_token(make, code) -> None:
    headers = make()  # minted now: a token made at collection time could expire before the test runs
    c = client()
    for path, body in (("/api/hint", {"hand": [0, 1]}), ("/api/readings", {"cards": [0]}),
                       ("/api/arrange", {"cards": [0]})):
        r = c.post(path, json=body, headers=headers)
        assert r.status_code == code and r.json()["error"] in ("unauthorized", "not_allowed")


def test_hint_is_the_trustee_choice() -> None:
    from engine.rules.classify import classify
    from engine.rules.cards import parse_cards
    from engine.rules.moves import trustee_choice

    c = client()
    h = bearer("alice")
    hand = parse_cards("3 3 5 5 5 9 K K BJ")
    r = c.post("/api/hint", json={"hand": hand, "last_cards": None}, headers=h).json()
    assert r["cards"] == list(trustee_choice(hand, None).cards) and r["kind"] == "single"
    table = parse_cards("4 4")
    r = c.post("/api/hint", json={"hand": hand, "last_cards": table, "last_kind": "pair", "last_rank": "4"},
               headers=h).json()
    assert r["cards"] == list(trustee_choice(hand, classify("4 4")).cards) and r["describe"] == "pair of 5"
    r = c.post("/api/hint", json={"hand": parse_cards("3 4"), "last_cards": parse_cards("2"),
                                  "last_kind": "single", "last_rank": "2"}, headers=h).json()
    assert r == {"pass": True}


@pytest.mark.parametrize("body, needle", [
    ({"hand": []}, "hand must be"),
    ({"hand": [0, 0]}, "distinct"),
    ({"hand": [108]}, "0..107"),
    ({"hand": [True]}, "hand must be"),
    ({"hand": list(range(28))}, "1–27"),
    ({"hand": [0], "last_cards": [0, 5]}, "not a combination"),
    ({"hand": [0], "last_cards": [0, 1], "last_kind": "single"}, "not a combination"),
    ([0], "JSON object"),
])
def test_hint_refuses_bad_input(body, needle) -> None:
    r = client().post("/api/hint", json=body, headers=bearer("alice"))
    assert r.status_code == 400 and needle in r.json()["reason"], r.json()


def test_arrange_answers_the_groups_of_engine_rules() -> None:  # issue 36: 理牌
    from engine.rules.arrange import arrange
    from engine.rules.cards import parse_cards

    hand = parse_cards("3 4 5 6 7 7 7 9 9 J J J J BJ")
    r = client().post("/api/arrange", json={"cards": hand}, headers=bearer("alice"))
    assert r.status_code == 200
    assert r.json() == {"groups": [{"kind": g.kind, "cards": list(g.cards)} for g in arrange(hand)]}
    assert [g["kind"] for g in r.json()["groups"]] == ["bomb", "straight", "pair", "pair", "single"]
    # under the room's setting (the shipped rooms let a chain bomb run up to 2)
    chain = parse_cards("K K K K A A A A 2 2 2 2")
    r = client().post("/api/arrange", json={"cards": chain, "room": "points"}, headers=bearer("alice"))
    assert [g["kind"] for g in r.json()["groups"]] == ["chain_bomb"]


@pytest.mark.parametrize("body, code, needle", [
    ({"cards": [0, 0]}, "bad_cards", "distinct"),
    ({"cards": [108]}, "bad_cards", "0..107"),
    ({"cards": [True]}, "bad_cards", "card ids"),
    ({"cards": "3 3"}, "bad_cards", "list"),
    ({"cards": list(range(28))}, "bad_cards", "at most 27"),
    ({"cards": [0], "room": "nowhere"}, "bad_request", "unknown room"),
    ({"cards": [0], "extra": 1}, "bad_request", "cards"),
    ([0], "bad_request", "cards"),
])
def test_arrange_refuses_bad_input(body, code, needle) -> None:
    r = client().post("/api/arrange", json=body, headers=bearer("alice"))
    assert r.status_code == 400 and r.json()["error"] == code and needle in r.json()["reason"], r.json()


def test_readings_list_every_reading_and_whether_it_beats() -> None:
    from engine.rules.cards import parse_cards

    c = client()
    h = bearer("alice")
    cards = parse_cards("5 SJ SJ BJ BJ")
    r = c.post("/api/readings", json={"cards": cards}, headers=h).json()["readings"]
    assert [x["describe"] for x in r][:2] == ["5-xiang bomb of 5", "straight to 9 (5 cards)"]
    assert all(x["beats"] for x in r)  # leading: every reading may be played
    table = parse_cards("6 7 8 9 10")
    r = c.post("/api/readings", json={"cards": cards, "last_cards": table, "last_kind": "straight",
                                      "last_rank": "10"}, headers=h).json()["readings"]
    beats = {x["describe"]: x["beats"] for x in r}
    assert beats["5-xiang bomb of 5"] is True and beats["straight to 9 (5 cards)"] is False
    assert c.post("/api/readings", json={"cards": parse_cards("3 4")}, headers=h).json() == {"readings": []}


def _export_text() -> tuple[str, Any]:
    from engine.tools.export import export_text
    from projections.settlement import settle
    from tests.strategies import MatchSpec, play_match

    for seed in range(50):
        events = play_match(MatchSpec(seed=seed), match_id="w1").store.load("w1")
        s = settle(events)
        if s is not None and s.kou != "escape":
            return export_text(events, s.to_json(), 1), s
    raise AssertionError("no finished match")


def test_replay_endpoints_need_an_operator_and_read_exports() -> None:
    text, s = _export_text()
    c = client()
    for h in ({}, bearer("alice"), bearer("sam", "spectator")):
        assert c.post("/api/replay", content=text, headers=h).status_code in (401, 403)
        assert c.get("/api/replay/w1", headers=h).status_code in (401, 403)
    refused = c.get("/api/replay/w1", headers=bearer("alice")).json()
    assert (refused["error"], refused["reason"]) == ("not_allowed", "this needs an operator token, not player")
    op = bearer("olga", "operator")
    r = c.post("/api/replay", content=text, headers=op)
    assert r.status_code == 200
    data = r.json()
    assert data["match_id"] == "w1" and data["settlement"]["scores"] == s.scores
    assert data["stored_matches"] is True and data["problems"] == []
    assert [st["seq"] for st in data["steps"]] == list(range(1, len(data["steps"]) + 1))
    # each step's own fields for the viewer's words: no hand, no seed (FAIRNESS.md), no config
    secret = {"hands", "set_aside", "client_seed", "client_seeds", "server_seed", "config"}
    assert all(not secret & set(st["fields"]) for st in data["steps"]), [st["fields"] for st in data["steps"]][:3]
    assert any(st["fields"] for st in data["steps"])
    forged = json.loads(text.splitlines()[0])
    forged["settlement"]["scores"] = {p: -v for p, v in s.scores.items()}
    r = c.post("/api/replay", content="\n".join([json.dumps(forged), *text.splitlines()[1:]]), headers=op)
    assert r.json()["stored_matches"] is False
    # an archive header's settlement_record is checked too, and burned with the other keys
    # (the same check as `shuangkou replay --events`: engine.tools.export.settlement_differences)
    for key, value in (("scores", {p: -v for p, v in s.scores.items()}), ("burned", 12345)):
        head = json.loads(text.splitlines()[0])
        head["settlement_record"] = {**head["settlement"], key: value}
        r = c.post("/api/replay", content="\n".join([json.dumps(head), *text.splitlines()[1:]]), headers=op).json()
        assert r["stored_matches"] is False, key
        assert any(key in p and "settlement_record" in p for p in r["stored_problems"]), r["stored_problems"]
    assert c.post("/api/replay?match=zz", content=text, headers=op).status_code == 404
    r = c.post("/api/replay", content="not json", headers=op)
    assert r.status_code == 400 and "not an export" in r.json()["reason"]
    assert c.post("/api/replay", content=b"\xff\xfe", headers=op).status_code == 400
    # no Redis in this context: a readable 404, not a crash
    r = c.get("/api/replay/w1", headers=op)
    assert r.status_code == 404 and r.json()["error"] == "no_store"


@pytest.mark.redis
def test_replay_from_redis_is_read_only_and_says_no_such_match(redis_server, real_redis) -> None:
    import redis.asyncio as aioredis

    from engine.store.redis_store import RedisEventStore
    from projections.ledger import RedisLedger
    from projections.settlement import settle
    from tests.strategies import MatchSpec, play_match

    store = RedisEventStore(real_redis)
    events = play_match(MatchSpec(seed=4), match_id="r1").store.load("r1")
    for e in events:
        store.append("r1", e.seq - 1, f"c{e.seq}", [e], None)
    s = settle(events)
    if s is not None:
        RedisLedger(real_redis).apply_settlement("r1", s)
    before = {k: real_redis.type(k) for k in real_redis.keys("*")}
    op = bearer("olga", "operator")
    with client(redis=aioredis.Redis.from_url(redis_server.url)) as c:  # one event loop for the client
        data = c.get("/api/replay/r1", headers=op).json()
        assert len(data["steps"]) == len(events)
        assert data["stored_matches"] is (True if s is not None else None)
        r = c.get("/api/replay/nope", headers=op)
        assert r.status_code == 404 and "no such match" in r.json()["reason"]
    assert {k: real_redis.type(k) for k in real_redis.keys("*")} == before  # nothing written


def test_the_replay_of_a_live_match_is_refused_409_unless_allowed(redis_server, real_redis) -> None:
    """Issue 23 item 4: the timeline shows both hands, so a match being played is refused
    (and counted), unless the gateway runs with --allow-live-replay."""
    import redis.asyncio as aioredis

    from engine.store.redis_store import RedisEventStore
    from gateway.metrics import GatewayMetrics
    from tests.strategies import MatchSpec, play_match

    store = RedisEventStore(real_redis)
    events = play_match(MatchSpec(seed=4), match_id="live1").store.load("live1")
    live = [e for e in events if e.type != "MatchFinished"][:12]
    assert any(e.type == "HandDealt" for e in live)
    for e in live:
        store.append("live1", e.seq - 1, f"c{e.seq}", [e], None)
    op = bearer("olga", "operator")

    @dataclass
    class Hub:
        metrics: GatewayMetrics

    hub = Hub(GatewayMetrics())
    with client(redis=aioredis.Redis.from_url(redis_server.url), hub=hub) as c:
        r = c.get("/api/replay/live1", headers=op)
        assert r.status_code == 409 and r.json()["error"] == "match_not_finished"
        assert "has not finished" in r.json()["reason"] and "--allow-live-replay" in r.json()["reason"]
        assert "hands" not in r.text.replace("both hands", "")
    assert b'shuangkou_gateway_refusals_total{reason="live_replay"} 1.0' in hub.metrics.exposition()
    with client(redis=aioredis.Redis.from_url(redis_server.url), allow_live_replay=True) as c:
        data = c.get("/api/replay/live1", headers=op).json()
        assert len(data["steps"]) == len(live)


def test_a_replay_the_gateways_redis_user_may_not_read_is_a_typed_503() -> None:
    """Under the shipped ACL the gateway user may not read the match streams: without
    SK_REPLAY_REDIS_URL the viewer answers 503 ``replay_not_permitted`` saying what to set."""
    from redis.exceptions import NoPermissionError

    class Denied:
        async def xrange(self, *a: Any, **kw: Any) -> Any:
            raise NoPermissionError("this user has no permissions to access one of the keys used as arguments")

    r = client(redis=Denied()).get("/api/replay/m1", headers=bearer("olga", "operator"))
    assert r.status_code == 503 and r.json()["error"] == "replay_not_permitted"
    assert "SK_REPLAY_REDIS_URL" in r.json()["reason"]


def test_the_replay_of_an_abandoned_match_is_served(redis_server, real_redis) -> None:
    """A match abandoned before the deal is over (it never finishes): the viewer shows it, with
    no settlement, as ``shuangkou replay`` does."""
    import redis.asyncio as aioredis

    from engine.config import load_config
    from engine.match import commands as mc
    from engine.service.service import MatchService
    from engine.store.redis_store import RedisEventStore
    from engine.service.shuffle import seeded_random

    svc = MatchService(RedisEventStore(real_redis), clock=lambda: 1_700_000_000_000, rng=seeded_random(1))
    svc.execute(mc.CreateMatch(command_id="c0", match_id="ab1", config=load_config("points").to_record()))
    svc.execute(mc.Sit(command_id="c1", match_id="ab1", player="ann"))
    assert svc.execute(mc.Leave(command_id="c2", match_id="ab1", player="ann")).accepted  # MatchAbandoned
    with client(redis=aioredis.Redis.from_url(redis_server.url)) as c:
        r = c.get("/api/replay/ab1", headers=bearer("olga", "operator"))
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["settlement"] is None and data["stored_settlement"] is None
    assert data["names"] == {}  # ann has no display name
    assert [s["type"] for s in data["steps"]][-1] == "MatchAbandoned"


def test_the_pages_keep_the_testability_contract() -> None:
    """The names hidden checks use (issue 15) are in the page sources; data-card only marks the hand."""
    html = (STATIC / "index.html").read_text()
    js = (STATIC / "js" / "table.js").read_text()
    for action in ("play", "pass", "hint", "ready", "join", "lang", "mute", "verify"):
        assert f'data-action="{action}"' in html
    for attr in ("data-opponent-count", "data-opponent-name", "data-status", "data-settlement", "data-fair",
                 'data-your-turn="false"'):
        assert attr in html
    assert '"data-cards-left": s.player' in js and '"data-score": p' in js and '"data-balance": p' in js
    # CSP (issue 23): no inline script and no inline event handler in the page
    assert "<script>" not in html and not re.search(r"\son[a-z]+=", html)
    assert '"data-card": id' in js and '"aria-pressed"' in js and '"data-table-card": id' in js
    replay_js = (STATIC / "js" / "replay.js").read_text()
    assert "\"data-card\"" not in replay_js and "data-card=" not in (STATIC / "replay.html").read_text()
    # renderHand makes hand cards; the end of a match shows the final hands face up (data-cards-left)
    assert js.count('"data-card"') == 2


def test_standing_is_the_effective_xiang_of_the_bombs_seen() -> None:
    from engine.rules.cards import parse_cards

    c = client()
    four = parse_cards("4 4 4 4")
    five = parse_cards("5 5 5 5")
    body = {"room": "points", "bombs": {"a": [{"cards": four, "kind": "bomb", "rank": "4"},
                                              {"cards": five, "kind": "bomb", "rank": "5"}], "b": []}}
    r = c.post("/api/standing", json=body, headers=bearer("sam", "spectator")).json()
    assert r == {"a": {"xiang": 5, "source": "R-9: 4 4 4 4 and 5 5 5 5 consecutive → 5", "c": 0},
                 "b": {"xiang": 0, "source": "no bomb", "c": 0}}
    assert c.post("/api/standing", json=body).status_code == 401
    bad = {"room": "points", "bombs": {"a": [{"cards": parse_cards("3 3"), "kind": "pair", "rank": "3"}]}}
    r = c.post("/api/standing", json=bad, headers=bearer("al"))
    assert r.status_code == 400 and "bomb" in r.json()["reason"]
    r = c.post("/api/standing", json={"bombs": {"a": [], "b": [], "c": []}}, headers=bearer("al"))
    assert r.status_code == 400
    r = c.post("/api/standing", json={**body, "room": "nosuchroom"}, headers=bearer("al"))  # never points' rules
    assert (r.status_code, r.json()["reason"]) == (400, "unknown room")


def test_hint_and_readings_read_the_cards_under_the_rooms_rules() -> None:
    """R-2.2: K K K K A A A A 2 2 2 2 is a chain bomb only in rooms with ``chain_bomb_twos``;
    the page's hint and readings must use the room's rules, not the defaults."""
    from types import SimpleNamespace

    from engine.config import load_config
    from engine.rules import parse_cards

    points = load_config("points")
    strict = points.model_copy(update={"name": "strict", "chain_bomb_twos": False})
    rooms = SimpleNamespace(rooms={"points": points, "strict": strict})
    cards = parse_cards("KS KH KC KD AS AH AC AD 2S 2H 2C 2D")
    kinds = lambda room: {r["kind"] for r in web.readings_for({"cards": cards, "room": room}, rooms)["readings"]}  # noqa: E731
    assert "chain_bomb" in kinds("points")
    assert kinds("strict") == set()                       # not a combination without twos in chains
    assert "chain_bomb" in {r["kind"] for r in web.readings_for({"cards": cards}, rooms)["readings"]}
    hand = cards + parse_cards("3")
    on_table = parse_cards("9S 9H 9C 9D 10S 10H 10C 10D JS JH JC JD")  # a 3-run chain bomb of 4s
    assert web.hint_for({"hand": hand, "last_cards": on_table, "room": "points"}, rooms)["kind"] == "chain_bomb"
    assert web.hint_for({"hand": hand, "last_cards": on_table, "room": "strict"}, rooms) == {"pass": True}
    with pytest.raises(web.HttpError) as err:
        web.readings_for({"cards": cards, "room": "nope"}, rooms)
    assert (err.value.status, err.value.code, err.value.reason) == (400, "bad_request", "unknown room")


def test_the_lobby_lists_base_entry_and_the_players_own_balance() -> None:
    """GET /api/rooms (issue 25): each room's base and entry (R-11.1) with the player's own
    balance, so a player who cannot afford a room sees why before Join."""
    from gateway.rooms import RoomBook

    class Lobby:
        async def balance(self, player: str, mode: str) -> int:
            return {"points": 40, "wealth": 0}[mode] if player == "alice" else 999

    @dataclass
    class Hub:
        rooms: Any
        lobby: Any

    c = client(hub=Hub(RoomBook.load([]), Lobby()))
    assert c.get("/api/rooms").status_code == 401
    assert c.get("/api/rooms", headers=bearer("sam", role="spectator")).status_code == 403
    body = c.get("/api/rooms", headers=bearer("alice")).json()
    rooms = {r["name"]: r for r in body["rooms"]}
    assert body["balances"] == {"points": 40, "wealth": 0}
    assert rooms["points"]["need"] == 0 and rooms["points"]["admits"] and rooms["points"]["balance"] == 40
    assert rooms["wealth"]["need"] > 0 and not rooms["wealth"]["admits"] and rooms["wealth"]["balance"] == 0
    assert all(isinstance(r["base"], int) and r["base"] > 0 for r in rooms.values())
    # each room's R-11 table, for the page's level badge (issue 36)
    assert rooms["points"]["levels"][0] == {"level": 0, "need": 0, "base": 5}
    assert rooms["points"]["levels"][-1] == {"level": 16, "need": 2000000, "base": 800}
    assert rooms["wealth"]["levels"][0] == {"level": 1, "need": 100, "base": 5}
    assert [lv["level"] for lv in web.room_list(None)[0]["levels"]] == list(range(17))  # no room book: the built-in ones


@pytest.mark.parametrize("declared", [True, False])
def test_a_body_over_the_limit_is_refused_before_it_is_all_read(declared: bool) -> None:
    """A body announced over the limit is refused before a byte is read; one streamed without a
    length, once the bytes read pass the limit: never the whole body in memory."""
    import asyncio

    app = Starlette(routes=web.routes(Ctx()))
    chunk, chunks = 1 << 20, 300  # 300 MB offered
    taken = 0
    sent: list[dict] = []

    async def receive() -> dict:
        nonlocal taken
        taken += 1
        return {"type": "http.request", "body": b" " * chunk, "more_body": taken < chunks}

    async def send(message: dict) -> None:
        sent.append(message)

    headers = [(k.lower().encode(), v.encode()) for k, v in bearer("al").items()]
    headers.append((b"content-type", b"application/json"))
    if declared:
        headers.append((b"content-length", str(chunk * chunks).encode()))
    scope = {"type": "http", "method": "POST", "path": "/api/hint", "raw_path": b"/api/hint", "query_string": b"",
             "headers": headers, "http_version": "1.1", "scheme": "http", "root_path": "",
             "server": ("testserver", 80), "client": ("127.0.0.1", 5000)}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 400 and b"body too large" in sent[1]["body"]
    assert taken == (0 if declared else web.MAX_BODY_BYTES // chunk + 1), taken


def test_the_api_refuses_a_bad_body_with_its_reason() -> None:
    """Each refusal of a request body the routes read: 400 ``bad_request`` with a reason that
    says what was wrong (never a 500)."""
    c = client()
    al, op = bearer("al"), bearer("olga", "operator")
    big = b" " * (web.MAX_BODY_BYTES + 1)
    rows = [
        ("a body over the limit", "/api/hint", big, al, "body too large"),
        ("a replay file over the limit", "/api/replay", big, op, "body too large"),
        ("a body that is no JSON object", "/api/hint", b"[1, 2]", al, "send a JSON object"),
        ("a player's bombs that are no list", "/api/standing",
         json.dumps({"room": "points", "bombs": {"a": "4 4 4 4"}}).encode(), al, "at most 27 plays"),
        ("a bomb that is no object", "/api/standing",
         json.dumps({"room": "points", "bombs": {"a": [[0, 1, 2, 3]]}}).encode(), al, "each bomb is"),
        ("JSON nested beyond the parser", "/api/hint", b"[" * 100_000 + b"]" * 100_000, al, "nested too deeply"),
        ("a replay file nested beyond the parser", "/api/replay", b"[" * 100_000 + b"]" * 100_000, op,
         "nested too deeply"),
        ("a Content-Length that is no number", "/api/hint", b"{}", {**al, "Content-Length": "x2"}, "Content-Length"),
    ]
    for name, path, body, who, needle in rows:
        r = c.post(path, content=body, headers={**who, "Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"] == "bad_request" and needle in r.json()["reason"], \
            (name, r.status_code, r.text[:200])
    r = c.get("/api/leaderboard?room=points&around=you", headers=al)
    assert r.status_code == 400 and "around must be 'me'" in r.json()["reason"]


def test_a_replay_file_of_several_matches_must_name_one() -> None:
    text, _s = _export_text()
    two = text + "\n" + text.replace('"w1"', '"w2"')
    r = client().post("/api/replay", content=two, headers=bearer("olga", "operator"))
    assert r.status_code == 400 and "holds 2 matches; name one" in r.json()["reason"], r.text[:300]
