"""Match scripts (docs/ARCHITECTURE.md "Contracts that stay stable"): a whole match as JSON.

    {"config": "points" | "wealth" | "path/to/room.toml",
     "players": [{"id": "a", "points": 100}, {"id": "b", "coins": 5000}],
     "deal": {"hands": ["3 3 4 …", ["5", "5", …]], "first": 0},   # or "seed": 42
     "actions": [{"player": "a", "play": "3 3"}, {"player": "b", "pass": true},
                 {"player": "a", "timeout": true}, {"player": "b", "disconnect": true},
                 {"player": "b", "reconnect": true}, {"player": "b", "escape": true},
                 {"player": "a", "trustee": true}, {"player": "a", "trustee": false}]}

A script runs through :class:`engine.service.service.MatchService` on an
:class:`engine.store.memory.InMemoryEventStore` with a fake clock, so it is
deterministic and takes exactly the code paths of a live match:

* ``config`` may also be ``{"base": "points", "escape_policy": "trustee", …}``
  (a room file with some keys changed) or a whole config record;
* setup: CreateMatch, Sit ×2, Ready ×2 and -- with ``deal`` -- a fixed Deal
  (hands in card notation, as one string or a list of tokens; 1–27 cards a
  hand; ``first`` defaults to 0), or -- without ``deal`` -- a shuffle seeded
  by ``seed`` (required then);
* each action becomes one command; a refused one is reported as
  ``{"index": i, "reason": "…"}`` and the script goes on;
* ``timeout`` is the turn clock running out now (TurnTimeout for the current
  version; it must be that player's turn);
* ``play`` may carry ``"reading": "kind"`` or ``"kind rank"`` to name a
  reading among several (R-4.6);
* automatic events happen between actions exactly as live: auto-passes are
  part of the decision (R-6.4); after every action, while the player on turn
  is in trusteeship (timeouts, request, disconnect, escape under the trustee
  policy) the timer worker's TrusteeAct is executed (R-13.3), the clock
  jumping to each deadline.

Optional top-level keys ``title``, ``description`` and ``match_id`` are
informational.  ``expect`` is checked (:func:`expect_mismatches`; ``run-script``
exits 1 naming each mismatch): ``winner``, ``kou``, ``scores``, ``burned`` and
``cards_left`` must equal the result's, ``balances`` the players' balances after
the settlement (start + score), ``rejections`` the indices of the refused
actions, and ``breakdown`` must be contained in the result's (only the keys it
names are compared, at every depth).
A malformed script raises :class:`ScriptError` (one readable line).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.rules.cards import CardNotationError, parse_cards, parse_tokens
from engine.match.commands import (
    CancelTrustee,
    CommandBase,
    CreateMatch,
    Deal,
    Disconnect,
    Escape,
    Leave,
    Pass,
    Play,
    Ready,
    Reconnect,
    RequestTrustee,
    Sit,
    TrusteeAct,
    TurnTimeout,
)
from engine.config import ConfigError, RoomConfig, load_config, parse_config
from engine.match.events import (
    EventBase,
)
from engine.match.state import MatchState

START_MS = 1_700_000_000_000
STEP_MS = 1_000
TOP_KEYS = {"config", "players", "deal", "seed", "actions", "title", "description", "expect", "match_id"}
ACTION_KINDS = ("play", "pass", "timeout", "disconnect", "reconnect", "escape", "trustee", "leave")


class ScriptError(ValueError):
    """The script itself is malformed (exit code 2 on the command line)."""


class FakeClock:
    """Milliseconds that move only when told (deterministic scripts and tests)."""

    def __init__(self, start: int = START_MS):
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int = STEP_MS) -> int:
        self.now += ms
        return self.now

    def set_at_least(self, ms: int) -> int:
        self.now = max(self.now, ms)
        return self.now


@dataclass
class ScriptRun:
    events: list[EventBase]
    rejections: list[dict[str, Any]]
    result: dict[str, Any]
    state: MatchState
    expect: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    start_balances: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"events": [e.model_dump(mode="json") for e in self.events],
                "rejections": list(self.rejections), "result": self.result}


# ---- loading --------------------------------------------------------------------

def load_script(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScriptError(f"{p} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise ScriptError(f"{p}: a script is a JSON object")
    return data


def _config_of(spec: Any, base_dir: Path | None) -> RoomConfig:
    try:
        if isinstance(spec, dict) and "base" in spec:
            # {"base": "points", "escape_policy": "trustee", …}: a room file with some keys changed
            base = _config_of(spec["base"], base_dir)
            record = base.to_record()
            record.update({k: v for k, v in spec.items() if k != "base"})
            return parse_config(record, f"config based on {spec['base']!r}")
        if isinstance(spec, dict):
            return parse_config(spec, "inline config")
        if not isinstance(spec, str) or not spec:
            raise ScriptError('"config" must be "points", "wealth" or a path to a TOML file')
        if base_dir is not None and (spec.endswith(".toml") or "/" in spec):
            cand = base_dir / spec
            if cand.exists():
                return load_config(cand)
        return load_config(spec)
    except ConfigError as exc:
        raise ScriptError(f"unknown or bad config {spec!r}: {'; '.join(exc.problems)}") from None


def _tokens(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        toks = value.replace(",", " ").split()
    elif isinstance(value, list) and all(isinstance(t, str) for t in value):
        toks = [t for v in value for t in v.replace(",", " ").split()]
    else:
        raise ScriptError(f"{where}: cards must be a notation string or a list of tokens")
    try:
        parse_tokens(toks)
    except CardNotationError as exc:
        raise ScriptError(f"{where}: {exc}") from None
    return toks


def _players(data: dict[str, Any], cfg: RoomConfig) -> list[tuple[str, int]]:
    players = data.get("players")
    if not isinstance(players, list) or len(players) != 2:
        raise ScriptError('"players" must list exactly 2 players (R-1.2)')
    out = []
    for n, p in enumerate(players):
        if not isinstance(p, dict) or not isinstance(p.get("id"), str) or not p["id"]:
            raise ScriptError(f"players[{n}] needs an \"id\" string")
        wrong = "coins" if cfg.mode == "points" else "points"
        if wrong in p:
            raise ScriptError(f"players[{n}] gives {wrong}, but {cfg.name!r} is a {cfg.mode} room "
                              f"(give {'points' if cfg.mode == 'points' else 'coins'})")
        bal = p.get("points", p.get("coins", p.get("balance", 0)))
        if not isinstance(bal, int) or isinstance(bal, bool):
            raise ScriptError(f"players[{n}]: the balance must be an integer")
        out.append((p["id"], bal))
    if out[0][0] == out[1][0]:
        raise ScriptError("the two players need different ids")
    return out


def _deal(data: dict[str, Any]) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], int] | None:
    deal = data.get("deal")
    if deal is None:
        if "seed" not in data:
            raise ScriptError('a script without "deal" needs a "seed" for the shuffle')
        return None
    if not isinstance(deal, dict) or not isinstance(deal.get("hands"), list) or len(deal["hands"]) != 2:
        raise ScriptError('"deal" needs "hands": [cards of player 1, cards of player 2]')
    if set(deal) - {"hands", "first"}:
        raise ScriptError(f'deal: unknown keys {sorted(set(deal) - {"hands", "first"})} (it has "hands", "first")')
    t0 = _tokens(deal["hands"][0], "deal.hands[0]")
    t1 = _tokens(deal["hands"][1], "deal.hands[1]")
    try:
        ids = parse_cards(t0 + t1)  # one parse: the two hands get distinct physical cards
    except CardNotationError as exc:
        raise ScriptError(f"deal: {exc}") from None
    first = deal.get("first", 0)
    if isinstance(first, bool) or first not in (0, 1):
        raise ScriptError('deal.first must be 0 or 1 (the seat that leads)')
    return (tuple(ids[:len(t0)]), tuple(ids[len(t0):])), first


def _check_actions(data: dict[str, Any]) -> list[dict[str, Any]]:
    actions = data.get("actions")
    if not isinstance(actions, list):
        raise ScriptError('"actions" must be a list')
    for i, a in enumerate(actions):
        if not isinstance(a, dict) or not isinstance(a.get("player"), str):
            raise ScriptError(f"actions[{i}] needs a \"player\"")
        kinds = [k for k in ACTION_KINDS if k in a]
        if len(kinds) != 1:
            raise ScriptError(f"actions[{i}] needs exactly one of {', '.join(ACTION_KINDS)}")
        kind = kinds[0]
        extra = set(a) - {"player", kind, "note"} - ({"reading"} if kind == "play" else set())
        if extra:
            raise ScriptError(f"actions[{i}]: unknown keys {sorted(extra)}")
        if kind == "play":
            if not _tokens(a["play"], f"actions[{i}].play"):
                raise ScriptError(f"actions[{i}].play names no cards")
            if "reading" in a and not (isinstance(a["reading"], str) and 1 <= len(a["reading"].split()) <= 2):
                raise ScriptError(f'actions[{i}].reading must be "kind" or "kind rank", e.g. "straight 9"')
        elif kind == "trustee":
            if not isinstance(a["trustee"], bool):
                raise ScriptError(f"actions[{i}].trustee must be true (request) or false (cancel)")
        elif a[kind] is not True:
            raise ScriptError(f'actions[{i}]: write "{kind}": true')
    return actions


def check_script(data: dict[str, Any]) -> None:
    """Raise :class:`ScriptError` for a malformed script (without running it)."""
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise ScriptError(f"unknown keys {sorted(unknown)} (a script has {', '.join(sorted(TOP_KEYS))})")
    for key in ("config", "players", "actions"):
        if key not in data:
            raise ScriptError(f"missing key {key!r}")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, str))):
        raise ScriptError('"seed" must be an integer or a string')
    if "match_id" in data and not (isinstance(data["match_id"], str) and data["match_id"]):
        raise ScriptError('"match_id" must be a non-empty string')


# ---- running --------------------------------------------------------------------

class _Runner:
    def __init__(self, cfg: RoomConfig, match_id: str, seed: Any, fixed: bool,
                 balances: dict[str, int] | None = None):
        from engine.service.shuffle import seeded_random, seeded_server_seeds
        from engine.service.service import FixedBalances, MatchService
        from engine.store.memory import InMemoryEventStore

        self.clock = FakeClock()
        self.store = InMemoryEventStore()
        seed = seed if seed is not None else 0
        self.service = MatchService(self.store, self.clock, seeded_random(seed), deal_on_ready=not fixed,
                                    server_seeds=seeded_server_seeds(seed),
                                    # the script's balances stand for the engine's ledger
                                    balances=FixedBalances(balances or {}))
        self.match_id = match_id
        self.n = 0
        self.state = MatchState(match_id=match_id)

    def run(self, cls: type[CommandBase], **fields: Any) -> str | None:
        """Execute one command; the rejection reason or None."""
        self.n += 1
        cmd = cls(command_id=f"s{self.n}", match_id=self.match_id, **fields)
        out = self.service.execute(cmd)
        self.state = out.state
        return None if out.rejection is None else out.rejection.reason

    def automate(self) -> None:
        """What the timer worker does live: play for trusteed players (R-13.3)."""
        for _ in range(1000):
            st = self.state
            if st.phase != "playing" or st.turn is None or not st.seat(st.turn).trusteed:
                return
            d = st.deadline()
            if d is not None:
                self.clock.set_at_least(d.at_ms)
            if self.run(TrusteeAct, version=st.version) is not None:
                return


def run_script(data: dict[str, Any], base_dir: str | Path | None = None) -> ScriptRun:
    """Run a script (already loaded JSON); :class:`ScriptError` if it is malformed."""
    if not isinstance(data, dict):
        raise ScriptError("a script is a JSON object")
    check_script(data)
    cfg = _config_of(data["config"], Path(base_dir) if base_dir is not None else None)
    players = _players(data, cfg)
    deal = _deal(data)
    actions = _check_actions(data)
    match_id = data.get("match_id", "script")

    r = _Runner(cfg, match_id, data.get("seed"), fixed=deal is not None, balances=dict(players))
    setup: list[tuple[type[CommandBase], dict[str, Any]]] = [(CreateMatch, {"config": cfg.to_record()})]
    setup += [(Sit, {"player": p}) for p, _ in players]
    setup += [(Ready, {"player": p}) for p, _ in players]
    if deal is not None:
        setup.append((Deal, {"hands": deal[0], "first": deal[1]}))
    for cls, fields in setup:
        r.clock.advance()
        why = r.run(cls, **fields)
        if why is not None:
            raise ScriptError(f"setup failed at {cls.__name__}: {why}")
    r.automate()

    rejections: list[dict[str, Any]] = []
    for i, a in enumerate(actions):
        r.clock.advance()
        why = _action(r, a)
        if why is not None:
            rejections.append({"index": i, "reason": why})
        r.automate()

    events = r.store.load(match_id)
    return ScriptRun(events=events, rejections=rejections, result=result_of(events, r.state),
                     state=r.state, expect=data.get("expect"), start_balances=dict(players))


EXPECT_KEYS = ("winner", "kou", "scores", "burned", "cards_left", "balances", "rejections", "breakdown")


def _contained(expected: Any, actual: Any, path: str) -> list[str]:
    """Where ``expected`` is not contained in ``actual`` (dicts: only the named keys)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected {expected!r}, got {actual!r}"]
        out = []
        for k, v in expected.items():
            if k not in actual:
                out.append(f"{path}.{k}: expected {v!r}, missing")
            else:
                out += _contained(v, actual[k], f"{path}.{k}")
        return out
    return [] if expected == actual else [f"{path}: expected {expected!r}, got {actual!r}"]


def expect_mismatches(run: ScriptRun) -> list[str]:
    """How the run differs from the script's ``expect`` (one line per key; [] when it agrees
    or there is no ``expect``).  An unknown key is a :class:`ScriptError`.

    >>> r = ScriptRun(events=[], rejections=[{"index": 2, "reason": "x"}], state=MatchState(match_id="m"),
    ...               result={"winner": "a", "kou": "flat", "scores": {"a": 5, "b": -5}, "burned": 0,
    ...                       "breakdown": {"X": 5, "a": 1}}, start_balances={"a": 0, "b": 10},
    ...               expect={"scores": {"a": 5, "b": -9}, "rejections": [2], "breakdown": {"X": 5},
    ...                       "balances": {"a": 5, "b": 5}})
    >>> expect_mismatches(r)
    ["scores: expected {'a': 5, 'b': -9}, got {'a': 5, 'b': -5}"]
    """
    expect = run.expect
    if expect is None:
        return []
    if not isinstance(expect, dict):
        raise ScriptError('"expect" must be an object')
    unknown = sorted(set(expect) - set(EXPECT_KEYS))
    if unknown:
        raise ScriptError(f"unknown \"expect\" key(s): {', '.join(unknown)} (known: {', '.join(EXPECT_KEYS)})")
    scores = run.result.get("scores") or {}
    actual: dict[str, Any] = {
        **{k: run.result.get(k) for k in ("winner", "kou", "scores", "burned", "cards_left")},
        "balances": {p: b + int(scores.get(p, 0)) for p, b in run.start_balances.items()},
        "rejections": [r["index"] for r in run.rejections],
    }
    out: list[str] = []
    for key in EXPECT_KEYS:
        if key not in expect:
            continue
        if key == "breakdown":
            out += _contained(expect[key], run.result.get("breakdown"), "breakdown")
        elif expect[key] != actual[key]:
            out.append(f"{key}: expected {expect[key]!r}, got {actual[key]!r}")
    return out


def _action(r: _Runner, a: dict[str, Any]) -> str | None:
    p = a["player"]
    if "play" in a:
        text = " ".join(_tokens(a["play"], "play"))
        kind, rank, *_ = [*str(a.get("reading") or "").split(), None, None]
        return r.run(Play, player=p, text=text, reading_kind=kind, reading_rank=rank)
    if "pass" in a:
        return r.run(Pass, player=p)
    if "timeout" in a:
        st = r.state
        if st.phase != "playing" or st.current_player != p:
            who = st.current_player
            return (f"no turn clock runs for {p}: " + (f"it is {who}'s turn" if who else f"phase {st.phase}"))
        d = st.deadline()
        if d is not None:
            r.clock.set_at_least(d.at_ms)
        return r.run(TurnTimeout, version=st.version)
    if "disconnect" in a:
        return r.run(Disconnect, player=p)
    if "reconnect" in a:
        return r.run(Reconnect, player=p)
    if "escape" in a:
        return r.run(Escape, player=p)
    if "leave" in a:
        return r.run(Leave, player=p)
    if "trustee" in a:
        return r.run(RequestTrustee if a["trustee"] else CancelTrustee, player=p)
    raise ScriptError(f"unknown action {a}")  # pragma: no cover - _check_actions


def result_of(events: Sequence[EventBase], state: MatchState) -> dict[str, Any]:
    """settle(events).to_json() when finished; else winner None and no scores."""
    from projections.settlement import SettlementError, settle

    if state.phase == "finished":
        try:
            s = settle(events)
        except SettlementError as exc:
            return {"winner": state.finished.winner if state.finished else None, "kou": None,
                    "cards_left": {}, "scores": {}, "breakdown": {}, "error": str(exc)}
        if s is not None:
            return s.to_json()
    return {"winner": None, "kou": None,
            "cards_left": {x.player: len(x.hand) for x in state.seats if x is not None},
            "scores": {}, "breakdown": {}}


def format_result(result: dict[str, Any]) -> str:
    if result.get("winner") is None:
        return "result: the match has not finished"
    scores = ", ".join(f"{p} {n:+d}" for p, n in result.get("scores", {}).items())
    left = ", ".join(f"{p} {n}" for p, n in result.get("cards_left", {}).items())
    out = f"result: {result['winner']} wins, kou {result['kou']}; cards left: {left}; scores: {scores}"
    if result.get("burned"):
        out += f"; burned {result['burned']}"
    return out
