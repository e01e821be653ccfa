"""The browser client's HTTP side: static pages, dev tokens, hints, readings and the replay viewer's data.

The gateway's Starlette app mounts :func:`routes` beside ``/ws``.  Pages (no
build step: HTML, CSS and JavaScript modules under ``gateway/static/``):

==========================  ===========================================================
``/``                       the table: join a room, play, settle, next match
``/watch/<match_id>``       a spectator's view of a live match (no hands)
``/replay/<match_id>``      the operator's replay viewer (step through a finished match)
``/static/…``               the page's files
==========================  ===========================================================

JSON endpoints (a token as ``Authorization: Bearer <jwt>``, verified like the
socket's; errors are ``{"error": code, "reason": text}`` with 400/401/403/404/409):

* ``POST /api/dev/token`` -- only with ``shuangkou gateway --dev``:
  ``{"name": "小明", "role": "player"}`` → ``{"token", "player", "role", "name"}`` (the id is
  derived from the name, :func:`dev_identity`; a bad name is ``{"error": "bad_name"}``).
  Without ``--dev`` the route does not exist (404).
* ``GET /api/rooms`` (player) -- the rooms (:func:`room_list`: base, ``need``) with the
  player's own ``balance`` and ``admits`` each, plus ``balances`` by mode (the lobby's list).
* ``GET /api/leaderboard?room=R&season=S&limit=N`` (anyone; ``&around=me`` with a player's
  token) -- a ranked room's ladder (:func:`leaderboard_for`, docs/RANKED.md):
  ``{"room", "season", "entries": [{"rank", "player", "name", "rating", "tier"}]}`` and with
  ``around=me`` also ``me`` (the player's entry with ``neighbours``, or null).  404
  ``unknown_room`` / ``not_ranked`` / ``unknown_season``, 400 ``bad_request`` (limit 1..1000).
  ``&players=a,b`` (1..10 ids) adds ``players``: each one's entry or null (the table's tier badges).
* ``POST /api/leaderboard/name`` (player) -- ``{"hidden": true|false}``: hide the player's name
  from every leaderboard (``name`` null) or show it again.
* ``POST /api/hint`` (player) -- ``{"hand": [ids], "last_cards": [ids] | null,
  "last_kind", "last_rank"}`` → the trustee's choice for that hand (R-13.3):
  ``{"cards": [ids], "kind", "rank", "describe"}`` or ``{"pass": true}``.
  It reads nothing from Redis: the page sends its own hand and the play on the table.
* ``POST /api/readings`` (player) -- ``{"cards": [ids], "last_cards", "last_kind",
  "last_rank"}`` → every reading of the selection (R-4.6), best first, each with
  ``beats`` (legal where it would be played).
* ``POST /api/arrange`` (player) -- ``{"cards": [ids], "room"?}`` → ``{"groups": [{"kind",
  "cards"}]}``: 理牌, the split of the cards with the fewest combinations, bombs first, then
  chains, triples, pairs and singles (:func:`engine.rules.arrange.arrange`; the jokers are
  never wild in it).  Bad cards are ``{"error": "bad_cards"}`` (400).
* ``POST /api/standing`` (player, spectator) -- ``{"room", "bombs": {player: [{cards,
  kind, rank}]}}`` → each player's effective xiang, its source and c (R-8.3, R-8.5), so
  the page shows contributions as bombs are played, between full views.
* ``GET /api/replay/<match_id>`` (operator) -- the match's
  :func:`projections.timeline.timeline` plus the ledger's stored settlement and
  whether it equals the replayed one, and ``names``: the players' display names (those who
  have one, ``sk:{names}:display``).  A match still under way (neither finished nor
  abandoned) is refused 409 ``match_not_finished`` (its timeline shows both hands) unless the gateway runs
  with ``--allow-live-replay`` (dangerous: any operator token then reads the hands
  of a match being played).  Read-only (XRANGE, HGET): it uses the
  Redis URL in ``SK_REPLAY_REDIS_URL`` (the read-only user of deploy/) when
  set, else the gateway's own client (development without ACLs).
* ``POST /api/replay`` (operator) -- the body is an export file
  (``shuangkou export``) or run-script JSON; the same answer for its match.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from redis.exceptions import NoPermissionError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"
MAX_BODY_BYTES = 8 * 1024 * 1024  # an export of a long match is ~100 kB
DEV_ROLES = ("player", "spectator", "operator")
_PLAIN_ID = re.compile(r"[A-Za-z0-9._-]{1,24}")


class HttpError(Exception):
    def __init__(self, status: int, code: str, reason: str):
        super().__init__(reason)
        self.status, self.code, self.reason = status, code, reason


def _error(exc: HttpError) -> JSONResponse:
    return JSONResponse({"error": exc.code, "reason": exc.reason}, status_code=exc.status)


def _secret(ctx: Any) -> bytes:
    s = getattr(ctx, "secret")
    return s if isinstance(s, bytes) else str(s).encode()


def _token_policy(ctx: Any) -> Any:
    """What a token must also satisfy (the hub's :class:`gateway.tokens.TokenPolicy`; the
    default where the context has no hub, or one without a policy)."""
    from gateway.tokens import TokenPolicy

    policy = getattr(getattr(ctx, "hub", None), "token_policy", None)
    return policy if isinstance(policy, TokenPolicy) else TokenPolicy()


def _identity(ctx: Any, request: Request, roles: tuple[str, ...]) -> Any:
    from gateway.tokens import TokenError, verify

    auth = request.headers.get("authorization", "")
    token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    if not token:
        raise HttpError(401, "unauthorized", "send the token as Authorization: Bearer <token>")
    try:
        ident = verify(_secret(ctx), token, policy=_token_policy(ctx))
    except TokenError as exc:
        raise HttpError(401, "unauthorized", str(exc)) from None
    if ident.role not in roles:
        wanted = " or ".join(roles)
        raise HttpError(403, "not_allowed", f"this needs {'an' if wanted[0] in 'aeiou' else 'a'} {wanted} token, "
                                            f"not {ident.role}")
    return ident


async def _read_body(request: Request) -> bytes:
    """The request body, refused 400 ``bad_request`` once it passes :data:`MAX_BODY_BYTES`: a
    declared Content-Length over it before anything is read, a streamed body as soon as the
    bytes read pass it (never the whole body in memory first)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HttpError(400, "bad_request", "the Content-Length is not a number")
        if int(declared) > MAX_BODY_BYTES:
            raise HttpError(400, "bad_request", f"body too large ({declared} bytes; the limit is {MAX_BODY_BYTES})")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise HttpError(400, "bad_request", f"body too large (over the limit of {MAX_BODY_BYTES} bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


async def _json_body(request: Request) -> Any:
    body = await _read_body(request)
    try:
        return json.loads(body or b"null")
    except ValueError:
        raise HttpError(400, "bad_request", "the body is not JSON") from None
    except RecursionError:
        raise HttpError(400, "bad_request", "the body's JSON is nested too deeply") from None


def _ids(value: Any, what: str, allow_none: bool = False, max_len: int = 27) -> list[int] | None:
    if value is None and allow_none:
        return None
    if (not isinstance(value, list) or not 1 <= len(value) <= max_len
            or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 107 for c in value)
            or len(set(value)) != len(value)):
        raise HttpError(400, "bad_request", f"{what} must be a list of 1–{max_len} distinct card ids 0..107")
    return list(value)


def dev_identity(typed: Any) -> tuple[str, str]:
    """The ``--dev`` login's (player id, display name) for the name a person typed: the name
    cleaned (:func:`gateway.names.clean_name`); the id is the name itself when it is plain
    ``[A-Za-z0-9._-]``, else derived from it (``u-`` and 12 hex digits of its SHA-256), so
    the same name signs in as the same player.  A bad name is a 400 ``bad_name``.

    >>> dev_identity(" alice ")
    ('alice', 'alice')
    >>> dev_identity("小明")
    ('u-df3ea25a4369', '小明')
    """
    import hashlib

    from gateway.names import BadName, clean_name

    try:
        name = clean_name(typed)
    except BadName as exc:
        raise HttpError(400, "bad_name", str(exc)) from None
    if _PLAIN_ID.fullmatch(name):
        return name, name
    return "u-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:12], name


class RoomRules(NamedTuple):
    """The rule options of a room that change how cards read (R-2.2, R-5.4)."""

    heavenly: Any = "top"
    chain_bomb_twos: bool = True


def room_rules(data: dict[str, Any], rooms: Any) -> RoomRules:
    """The rules of the room the page names (``"room"``: a registered or built-in room);
    the defaults when it names none.  An unknown room is a 400, so a hint never reads
    the cards under another room's rules.

    >>> room_rules({}, None)
    RoomRules(heavenly='top', chain_bomb_twos=True)
    """
    from engine.config import ConfigError, load_config

    name = data.get("room")
    if name is None:
        return RoomRules()
    cfg = (getattr(rooms, "rooms", None) or {}).get(name) if isinstance(name, str) else None
    if cfg is None and name in ("points", "wealth"):
        try:
            cfg = load_config(name)
        except ConfigError:  # pragma: no cover - the shipped configs load
            cfg = None
    if cfg is None:
        raise HttpError(400, "bad_request", "unknown room")
    return RoomRules(cfg.heavenly_bomb, cfg.chain_bomb_twos)


def _to_beat(data: dict[str, Any], rules: RoomRules = RoomRules()) -> Any:
    """The Combo on the table from the page's view (``last_play``), or None when leading."""
    from engine.rules.classify import interpretations

    cards = _ids(data.get("last_cards"), "last_cards", allow_none=True)
    if cards is None:
        return None
    readings = interpretations(cards, rules.heavenly, chain_bomb_twos=rules.chain_bomb_twos)
    kind, rank = data.get("last_kind"), data.get("last_rank")
    for r in readings:
        if (kind is None or r.kind == kind) and (rank is None or r.rank == rank):
            return r
    raise HttpError(400, "bad_request", "last_cards are not a combination of that kind and rank")


def _reading_json(c: Any) -> dict[str, Any]:
    return {**c.to_json(), "describe": c.describe()}


def hint_for(data: Any, rooms: Any = None) -> dict[str, Any]:
    """The trustee's choice (R-13.3) for the page's hand and the play on the table,
    under the rules of the room the page names (:func:`room_rules`).

    >>> hint_for({"hand": [0, 1, 4], "last_cards": None})["cards"]
    [0]
    >>> hint_for({"hand": [0, 1], "last_cards": [40], "last_kind": "single", "last_rank": "K"})
    {'pass': True}
    """
    from engine.rules.moves import trustee_choice

    if not isinstance(data, dict):
        raise HttpError(400, "bad_request", "send a JSON object")
    hand = _ids(data.get("hand"), "hand")
    assert hand is not None
    rules = room_rules(data, rooms)
    play = trustee_choice(hand, _to_beat(data, rules), rules.heavenly, chain_bomb_twos=rules.chain_bomb_twos)
    if play is None:
        return {"pass": True}
    return {"cards": list(play.cards), **_reading_json(play.combo)}


def readings_for(data: Any, rooms: Any = None) -> dict[str, Any]:
    """Every reading of the selected cards, best first, and whether each beats the table
    (R-4.6, R-5), under the rules of the room the page names (:func:`room_rules`).

    >>> [(r["describe"], r["beats"]) for r in readings_for({"cards": [8, 52, 53, 106, 107]})["readings"]][:2]
    [('5-xiang bomb of 5', True), ('straight to 9 (5 cards)', True)]
    """
    from engine.rules.classify import interpretations
    from engine.rules.combo import beats

    if not isinstance(data, dict):
        raise HttpError(400, "bad_request", "send a JSON object")
    cards = _ids(data.get("cards"), "cards")
    rules = room_rules(data, rooms)
    prev = _to_beat(data, rules)
    out = [{**_reading_json(c), "beats": prev is None or beats(c, prev, rules.heavenly)}
           for c in interpretations(cards or [], rules.heavenly, chain_bomb_twos=rules.chain_bomb_twos)]
    return {"readings": out}


def arrange_for(data: Any, rooms: Any = None) -> dict[str, Any]:
    """理牌: the page's cards split into the fewest combinations (:func:`engine.rules.arrange.arrange`),
    under the chain-bomb rule of the room the page names (R-2.2).

    >>> arrange_for({"cards": [0, 1, 4]})
    {'groups': [{'kind': 'pair', 'cards': [0, 1]}, {'kind': 'single', 'cards': [4]}]}
    """
    from engine.rules.arrange import BadCards, arrange

    if not isinstance(data, dict) or set(data) - {"cards", "room"}:
        raise HttpError(400, "bad_request", "send {\"cards\": [ids]} (and optionally \"room\")")
    cards = data.get("cards")
    if not isinstance(cards, list):
        raise HttpError(400, "bad_cards", "cards must be a list of card ids")
    rules = room_rules(data, rooms)
    try:
        groups = arrange(cards, chain_bomb_twos=rules.chain_bomb_twos)
    except BadCards as exc:
        raise HttpError(400, "bad_cards", str(exc)) from None
    return {"groups": [{"kind": g.kind, "cards": list(g.cards)} for g in groups]}


def standing_for(data: Any, rooms: Any) -> dict[str, Any]:
    """Each player's effective xiang, its source and contribution multiplier c so far (R-8.3, R-8.5).

    ``{"room": name, "bombs": {player: [{"cards": [ids], "kind", "rank"}]}}``: the bombs the page
    saw played.  (The full view carries the same as ``contribution``; this keeps the page
    current between full views.)

    >>> standing_for({"room": "points", "bombs": {"a": [{"cards": [8, 9, 10, 11, 62], "kind": "bomb", "rank": "5"}]}}, None)
    {'a': {'xiang': 5, 'source': 'played 5 5 5 5 5 (5-xiang)', 'c': 0}}
    """
    from engine.config import ConfigError, load_config
    from projections.scoring import contribution_of, effective_xiang

    if not isinstance(data, dict) or not isinstance(data.get("bombs"), dict) or len(data["bombs"]) > 2:
        raise HttpError(400, "bad_request", 'send {"room": name, "bombs": {player: [...]}} for at most 2 players')
    name = data.get("room", "points")  # no room: the shipped points room's rules
    cfg = (getattr(rooms, "rooms", None) or {}).get(name) if isinstance(name, str) else None
    if cfg is None and name in ("points", "wealth"):
        try:
            cfg = load_config(name)
        except ConfigError:  # pragma: no cover - the shipped configs load
            cfg = None
    if cfg is None:  # a room nobody serves: its rules are unknown, never another room's
        raise HttpError(400, "bad_request", "unknown room")
    out: dict[str, Any] = {}
    for player, plays in data["bombs"].items():
        if not isinstance(plays, list) or len(plays) > 27:
            raise HttpError(400, "bad_request", "bombs: a list of at most 27 plays per player")
        combos = []
        for play in plays:
            if not isinstance(play, dict):
                raise HttpError(400, "bad_request", "each bomb is {cards, kind, rank}")
            c = _to_beat({"last_cards": play.get("cards"), "last_kind": play.get("kind"),
                          "last_rank": play.get("rank")})
            if c is None or not c.is_bomb:
                raise HttpError(400, "bad_request", "each play must be a bomb")
            combos.append(c)
        x = effective_xiang(combos, cfg)
        out[str(player)[:100]] = {"xiang": x.xiang, "source": x.source, "c": contribution_of(x.xiang, cfg)}
    return out


# -- replay viewer ---------------------------------------------------------------------------

class ReplaySource:
    """Where the viewer reads matches: ``SK_REPLAY_REDIS_URL`` (the read-only user of
    deploy/, recommended: the gateway's own user may not read match streams) or else
    the gateway's client (development, no ACL).  Only XRANGE and HGET are sent."""

    def __init__(self, ctx: Any):
        self.ctx = ctx
        self._client: Any = None

    def client(self) -> Any:
        if self._client is None:
            url = os.environ.get("SK_REPLAY_REDIS_URL")
            if url:
                from engine.store.connect import connect_async

                self._client = connect_async(url, option="SK_REPLAY_REDIS_URL")
            else:
                self._client = getattr(self.ctx, "redis", None)
        if self._client is None:
            raise HttpError(404, "no_store", "this gateway has no Redis for replays (set SK_REPLAY_REDIS_URL)")
        return self._client

    async def load(self, match_id: str) -> dict[str, Any]:
        from engine.match.events import decode_event
        from engine.store import keys
        from projections.ledger import SETTLED_KEY
        from projections.settlement import Settlement

        if not 1 <= len(match_id) <= 200:
            raise HttpError(400, "bad_request", "a match id is 1–200 characters")
        r = self.client()
        key = keys.events_key(match_id, keys.bucket_of(match_id))
        events: list[Any] = []
        start = "-"
        while True:  # paged, like RedisEventStore._range
            try:
                page = await r.xrange(key, min=start, max="+", count=1000)
            except NoPermissionError:
                raise HttpError(503, "replay_not_permitted",
                                "this gateway's Redis user may not read the matches: set SK_REPLAY_REDIS_URL to "
                                "the read-only user (docs/OPERATIONS.md)") from None
            events += [decode_event(fields[b"e"]) for _, fields in page]
            if len(page) < 1000:
                break
            start = f"{keys.seq_of(page[-1][0]) + 1}-0"
        if not events:
            raise HttpError(404, "unknown_match", f"no such match: {match_id!r}")
        over = any(e.type in ("MatchFinished", "MatchAbandoned") for e in events)
        if not over and not getattr(self.ctx, "allow_live_replay", False):
            raise HttpError(409, "match_not_finished",
                            f"match {match_id!r} has not finished: its replay would show both hands of a match "
                            f"being played (replay it once it is over; shuangkou gateway --allow-live-replay "
                            f"opts in)")
        raw = await r.hget(SETTLED_KEY, match_id)
        stored = None if raw is None else Settlement.model_validate_json(raw).to_json()
        answer = await run_in_threadpool(replay_answer, events, stored)
        players = sorted({e.player for e in events if e.type == "PlayerSeated"})
        got = await r.hmget(keys.NAMES_KEY, players) if players else []
        answer["names"] = {p: _text(n) for p, n in zip(players, got) if n is not None}
        return answer


def replay_answer(events: list[Any], stored: Any, forms: dict[str, Any] | None = None) -> dict[str, Any]:
    """The viewer's data: the timeline, the stored settlement and whether every stored form
    (``forms``, default ``{"ledger": stored}``) agrees with the replay, as ``replay`` checks
    it (:func:`engine.tools.export.settlement_differences`; the differences in
    ``stored_problems``)."""
    from engine.tools.export import settlement_differences
    from projections.timeline import timeline

    t = timeline(events)
    t["stored_settlement"] = stored
    mine = t["settlement"]
    forms = ({"ledger": stored} if stored is not None else {}) if forms is None else forms
    if not forms or mine is None:
        t["stored_matches"] = None
        t["stored_problems"] = []
    else:
        problems = settlement_differences(mine, forms)
        t["stored_matches"] = not problems
        t["stored_problems"] = problems
    return t


def replay_from_text(text: str, match_id: str | None) -> dict[str, Any]:
    from engine.tools.export import ExportFormatError, parse_events_text

    try:
        parsed = parse_events_text(text)
    except ExportFormatError as exc:
        raise HttpError(400, "bad_request", f"not an export: {exc}") from None
    if match_id is None:
        if len(parsed.by_match) != 1:
            raise HttpError(400, "bad_request", f"the file holds {len(parsed.by_match)} matches; name one")
        match_id = next(iter(parsed.by_match))
    if match_id not in parsed.by_match:
        raise HttpError(404, "unknown_match", f"no such match in the file: {match_id!r}")
    forms = parsed.stored_forms(match_id)
    stored = forms.get("settlement", forms.get("settlement_record"))
    return replay_answer(parsed.by_match[match_id], stored, forms)


def room_list(ctx: Any) -> list[dict[str, Any]]:
    """The rooms the lobby offers, for the page's room picker: name, mode, turn clock, and what
    sitting down takes (R-11.1): ``need`` (the lowest level's balance; a points room seats any
    balance) and ``base`` (that level's X); ``levels`` is the room's R-11 table
    (``[{level, need, base}]``, the page's level badge shows it).  With no room book: the
    built-in points and wealth rooms."""
    book = getattr(getattr(ctx, "hub", None), "rooms", None)
    rooms = getattr(book, "rooms", None)
    if not isinstance(rooms, dict):
        from engine.config import load_config

        builtin = [load_config(mode) for mode in ("points", "wealth")]
        return [{"name": cfg.mode, "mode": cfg.mode, "levels": _levels(cfg), "ranked": False,
                 "timeouts_before_trustee": cfg.timeouts_before_trustee} for cfg in builtin]
    out = []
    for name, cfg in sorted(rooms.items()):
        low = cfg.levels[0]
        out.append({"name": name, "mode": cfg.mode, "turn_seconds": cfg.turn_seconds,
                    "trustee_delay_seconds": cfg.trustee_delay_seconds,
                    "reclaim_after_reconnect": cfg.reclaim_after_reconnect,
                    "timeouts_before_trustee": cfg.timeouts_before_trustee,
                    "base": low.base, "need": low.need if cfg.mode == "wealth" else 0,
                    "levels": _levels(cfg), "ranked": bool(getattr(cfg, "ranked", False))})
    return out


def _levels(cfg: Any) -> list[dict[str, int]]:
    return [{"level": lv.level, "need": lv.need, "base": lv.base} for lv in cfg.levels]


async def rooms_for(ctx: Any, player: str) -> dict[str, Any]:
    """:func:`room_list` with the player's own balance in each room's mode (from the ledger) and
    whether the room seats it (``admits``), so the lobby says why before Join."""
    hub = getattr(ctx, "hub", None)
    lobby = getattr(hub, "lobby", None)
    book = getattr(hub, "rooms", None)
    out = []
    balances: dict[str, int] = {}
    for r in room_list(ctx):
        mode = r["mode"]
        if mode not in balances:
            balances[mode] = await lobby.balance(player, mode) if lobby is not None else 0
        cfg = getattr(book, "rooms", {}).get(r["name"]) if book is not None else None
        admits = book.admits(cfg, balances[mode]) if cfg is not None and book is not None else True
        out.append({**r, "balance": balances[mode], "admits": admits})
    return {"rooms": out, "balances": balances}


LEADERBOARD_LIMIT = 100  # the default of ``limit``; at most projections.ladders.MAX_LIMIT


async def leaderboard_for(redis: Any, room: str, season: str | None, limit: int,
                          me: str | None = None, players: list[str] | None = None) -> dict[str, Any]:
    """``GET /api/leaderboard``: the top ``limit`` of ``room``'s ladder in ``season`` (None: the
    running season, else the last), and with ``me`` the player's own entry and neighbours
    (projections.ladders.board_answer).  Reads only: ZREVRANGE/ZREVRANK on the ladder's board
    (O(log n) each), the season list, the display names; a player who hides their name
    (``sk:{names}:hidden``) shows as ``name: null``."""
    from engine.store import keys
    from projections.ladders import HIDDEN_KEY, NAMES_KEY, NEIGHBOURS, board_answer, board_entry
    from projections.ratings import Season

    raw = await redis.hgetall(keys.SEASONS)
    seasons = sorted((Season.from_json(json.loads(v)) for v in raw.values()), key=lambda x: (x.start_ms, x.name))
    if season is None:
        running = [x for x in seasons if x.end_ms is None]
        found = running[-1] if running else (seasons[-1] if seasons else None)
    else:
        found = next((x for x in seasons if x.name == season), None)
    if found is None:
        raise HttpError(404, "unknown_season", f"no season {season!r}" if season else "no season has started yet")
    board = keys.ladder_key(room, found.name, "board")

    def rows(reply: Any) -> list[tuple[str, float]]:
        return [(_text(p), float(sc)) for p, sc in reply]

    top = rows(await redis.zrevrange(board, 0, limit - 1, withscores=True))
    pos = None if me is None else await redis.zrevrank(board, me)
    mine: list[tuple[str, float]] = []
    if pos is not None:
        pos = int(pos)
        mine = rows(await redis.zrevrange(board, max(0, pos - NEIGHBOURS), pos + NEIGHBOURS, withscores=True))
    asked: dict[str, tuple[int, float] | None] = {}
    for p in players or ():  # the table's players (their tier badges): rank and rating each
        r, sc = await redis.zrevrank(board, p), await redis.zscore(board, p)
        asked[p] = None if r is None or sc is None else (int(r), float(sc))
    everyone = list(dict.fromkeys([p for p, _ in top] + [p for p, _ in mine] + list(asked)))
    names: dict[str, str | None] = {}
    if everyone:
        got = await redis.hmget(NAMES_KEY, everyone)
        hidden = await redis.smismember(HIDDEN_KEY, everyone)
        names = {p: None if h else (None if n is None else _text(n)) for p, n, h in zip(everyone, got, hidden)}
    out = board_answer(room, found.name, top, me, pos, mine, names)
    if players is not None:
        out["players"] = {p: None if v is None else board_entry(v[0] + 1, p, v[1], names) for p, v in asked.items()}
    return out


def _text(v: Any) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


# -- routes --------------------------------------------------------------------------------

def routes(ctx: Any) -> list[Any]:
    """The browser client's routes for the gateway app (``ctx``: a
    :class:`gateway.context.WebContext`: ``redis``, ``secret``, ``dev``, ``bots``)."""

    def page(name: str) -> Any:
        async def endpoint(request: Request) -> Response:
            return FileResponse(STATIC_DIR / name, headers={"Cache-Control": "no-cache"})
        return endpoint

    def guarded(fn: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                return await fn(request)
            except HttpError as exc:
                return _error(exc)
        return endpoint

    async def dev_token(request: Request) -> Response:
        from gateway.tokens import mint

        data = await _json_body(request)
        if not isinstance(data, dict):
            raise HttpError(400, "bad_request", "send {\"name\": …}")
        role = data.get("role", "player")
        if role not in DEV_ROLES:
            raise HttpError(400, "bad_request", f"role is one of {', '.join(DEV_ROLES)}")
        player, name = dev_identity(data.get("name"))
        policy = _token_policy(ctx)  # what this gateway's own checks ask
        token = mint(_secret(ctx), player, role=role, ttl_seconds=12 * 3600, name=name,
                     audience=policy.audience, issuer=policy.issuer)
        return JSONResponse({"token": token, "player": player, "role": role, "name": name})

    async def hint(request: Request) -> Response:
        _identity(ctx, request, ("player",))
        return JSONResponse(hint_for(await _json_body(request), getattr(getattr(ctx, "hub", None), "rooms", None)))

    async def standing(request: Request) -> Response:
        _identity(ctx, request, ("player", "spectator"))
        return JSONResponse(standing_for(await _json_body(request), getattr(getattr(ctx, "hub", None), "rooms", None)))

    async def readings(request: Request) -> Response:
        _identity(ctx, request, ("player",))
        return JSONResponse(readings_for(await _json_body(request),
                                         getattr(getattr(ctx, "hub", None), "rooms", None)))

    async def arrange(request: Request) -> Response:
        _identity(ctx, request, ("player",))
        return JSONResponse(arrange_for(await _json_body(request),
                                        getattr(getattr(ctx, "hub", None), "rooms", None)))

    source = ReplaySource(ctx)

    async def replay_get(request: Request) -> Response:
        _identity(ctx, request, ("operator",))
        try:
            return JSONResponse(await source.load(request.path_params["match_id"]))
        except HttpError as exc:
            metrics = getattr(getattr(ctx, "hub", None), "metrics", None)
            if exc.code == "match_not_finished" and metrics is not None:
                metrics.refused("live_replay")
            raise

    async def replay_post(request: Request) -> Response:
        _identity(ctx, request, ("operator",))
        body = await _read_body(request)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise HttpError(400, "bad_request", "the file is not UTF-8 text") from None
        mid = request.query_params.get("match") or None
        return JSONResponse(await run_in_threadpool(replay_from_text, text, mid))

    async def rooms(request: Request) -> Response:
        ident = _identity(ctx, request, ("player",))
        return JSONResponse(await rooms_for(ctx, ident.player))

    def lobby_redis() -> Any:
        lobby = getattr(getattr(ctx, "hub", None), "lobby", None)
        return getattr(lobby, "redis", None) or ctx.redis

    async def leaderboard(request: Request) -> Response:
        from engine.config import RANKED_NAME
        from projections.ladders import MAX_LIMIT

        q = request.query_params
        room, season = q.get("room") or "", q.get("season") or None
        book = getattr(getattr(ctx, "hub", None), "rooms", None)
        cfg = getattr(book, "rooms", {}).get(room) if book is not None else None
        if not RANKED_NAME.fullmatch(room) or (book is not None and cfg is None):
            raise HttpError(404, "unknown_room", f"no room {room!r}")
        if cfg is not None and not getattr(cfg, "ranked", False):
            raise HttpError(404, "not_ranked", f"room {room!r} is not ranked: it has no leaderboard")
        try:
            limit = int(q.get("limit") or LEADERBOARD_LIMIT)
        except ValueError:
            raise HttpError(400, "bad_request", "limit must be a whole number") from None
        if not 1 <= limit <= MAX_LIMIT:
            raise HttpError(400, "bad_request", f"limit must be 1..{MAX_LIMIT}, got {limit}")
        me = None
        if q.get("around") is not None:
            if q.get("around") != "me":
                raise HttpError(400, "bad_request", "around must be 'me' (with the player's token)")
            me = _identity(ctx, request, ("player",)).player
        if season is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", season):
            raise HttpError(404, "unknown_season", f"no season {season!r}")
        players = None
        if q.get("players") is not None:
            players = [p for p in q.get("players", "").split(",") if p]
            if not 1 <= len(players) <= 10 or any(len(p) > 100 for p in players):
                raise HttpError(400, "bad_request", "players is 1..10 player ids, comma-separated")
        return JSONResponse(await leaderboard_for(lobby_redis(), room, season, limit, me, players))

    async def leaderboard_name(request: Request) -> Response:
        from projections.ladders import HIDDEN_KEY

        ident = _identity(ctx, request, ("player",))
        data = await _json_body(request)
        if not isinstance(data, dict) or not isinstance(data.get("hidden"), bool):
            raise HttpError(400, "bad_request", 'send {"hidden": true} or {"hidden": false}')
        redis = lobby_redis()
        if data["hidden"]:
            await redis.sadd(HIDDEN_KEY, ident.player)
        else:
            await redis.srem(HIDDEN_KEY, ident.player)
        return JSONResponse({"player": ident.player, "hidden": data["hidden"]})

    async def config(request: Request) -> Response:
        return JSONResponse({"dev": bool(getattr(ctx, "dev", False)), "bots": bool(getattr(ctx, "bots", False)),
                             "rooms": room_list(ctx),
                             "frame_ancestors": list(getattr(ctx, "frame_ancestors", ()) or ())})

    out: list[Any] = [
        Route("/", page("index.html")),
        Route("/watch/{match_id:path}", page("index.html")),
        Route("/t/{code}", page("index.html")),  # a private table's shared link (issue 39)
        Route("/replay/{match_id:path}", page("replay.html")),
        Route("/leaderboard", page("leaderboard.html")),
        Route("/api/client-config", config),
        Route("/api/rooms", guarded(rooms)),
        Route("/api/leaderboard", guarded(leaderboard)),
        Route("/api/leaderboard/name", guarded(leaderboard_name), methods=["POST"]),
        Route("/api/hint", guarded(hint), methods=["POST"]),
        Route("/api/readings", guarded(readings), methods=["POST"]),
        Route("/api/arrange", guarded(arrange), methods=["POST"]),
        Route("/api/standing", guarded(standing), methods=["POST"]),
        Route("/api/replay/{match_id:path}", guarded(replay_get)),
        Route("/api/replay", guarded(replay_post), methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    if getattr(ctx, "dev", False):
        out.insert(0, Route("/api/dev/token", guarded(dev_token), methods=["POST"]))
    return out
