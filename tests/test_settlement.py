"""Worked settlements from event lists (R-7, R-8, R-9, R-10, R-11.2, R-12).

Every expected number below is recomputed by hand in the row's comment:
W = X·a·b + X·(c_W − c_L) (R-8.6); escapes by R-12.2 / R-12.3.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.rules.classify import classify
from engine.config import load_config
from engine.match.events import (
    CardsPlayed,
    MatchCreated,
    MatchFinished,
    Passed,
    PlayerEscaped,
    PlayerSeated,
    Reading,
)
from projections.settlement import Settlement, settle, transfer_share

POINTS = load_config("points")
WEALTH = load_config("wealth")
CONFIGS = {"points": POINTS, "wealth": WEALTH}
# a seat: (level, base, balance)
P2 = (2, 10, 150)          # points level 2 → X = 10
W2 = (2, 10, 5000)         # wealth level 2 → X = 10


def build(mode="points", a=P2, b=P2, plays=(), winner="a", left=None, escape=None, escape_policy="forfeit",
          overrides=None, finished=True):
    """Events of a match: MatchCreated (full config record), two PlayerSeated, the plays
    (``(player, "cards")``; each play is followed by a pass so turns look real), then
    an escape and/or MatchFinished.  ``left``: the loser's cards left (kou by the config)."""
    cfg = CONFIGS[mode]
    if overrides:
        cfg = cfg.model_copy(update=overrides)
    seq = itertools.count(1)
    env = lambda: {"match_id": "m1", "seq": next(seq), "ts": 1000, "command_id": "c"}  # noqa: E731
    ev = [MatchCreated(**env(), config=cfg.to_record())]
    for seat, (pid, (level, base, balance)) in enumerate((("a", a), ("b", b))):
        ev.append(PlayerSeated(**env(), player=pid, seat=seat, balance=balance, level=level, base=base))
    for pid, cards in plays:
        c = classify(cards)
        assert c is not None, cards
        ev.append(CardsPlayed(**env(), player=pid, cards=(), reading=Reading.of(c)))
        ev.append(Passed(**env(), player="b" if pid == "a" else "a"))
    if escape is not None:
        ev.append(PlayerEscaped(**env(), player=escape, policy=escape_policy))
    if not finished:
        return ev
    if escape is not None and escape_policy == "forfeit":
        w = "b" if escape == "a" else "a"
        ev.append(MatchFinished(**env(), winner=w, loser=escape, cards_left={"a": 20, "b": 20},
                                kou="escape", reason="escape"))
    else:
        loser = "b" if winner == "a" else "a"
        n = 6 if left is None else left
        ev.append(MatchFinished(**env(), winner=winner, loser=loser, cards_left={winner: 0, loser: n},
                                kou=cfg.kou.kou_of(n), reason="out"))
    return ev


B4, B5, B6, B7, B8 = "4 4 4 4", "5 5 5 5 5", "6 6 6 6 6 6", "7 7 7 7 7 7 7", "8 8 8 8 8 8 8 8"
J3, J4 = "SJ SJ BJ", "SJ SJ BJ BJ"
CH7 = "4 4 4 4 5 5 5 5 6 6 6 6"
CH8 = "4 4 4 4 5 5 5 5 6 6 6 6 7 7 7 7"
CH8b = "5 5 5 5 5 6 6 6 6 6 7 7 7 7 7"
B9, B10 = "9 9 9 9 9 9 9 9 BJ", "10 10 10 10 10 10 10 10 SJ BJ"
B11, B12 = "J J J J J J J J SJ SJ BJ", "2 2 2 2 2 2 2 2 SJ SJ BJ BJ"

# (id, mode, winner's plays, loser's plays, loser's cards left, overrides, expected winner score, kou)
# X = 10 everywhere (level 2 both).
NORMAL = [
    # kou by cards left, R-7.2 a = 1/2/4
    ("flat-6", "points", [], [], 6, None, 10, "flat"),               # 10·1·1
    ("single-7", "points", [], [], 7, None, 20, "single"),           # 10·2·1
    ("single-11", "points", [], [], 11, None, 20, "single"),
    ("double-12", "points", [], [], 12, None, 40, "double"),         # 10·4·1
    ("flat-1", "wealth", [], [], 1, None, 10, "flat"),
    ("double-27", "wealth", [], [], 27, None, 40, "double"),
    # points table rows, flat kou (a = 1): X·b + X·c
    ("p4", "points", [B4], [], 6, None, 10, "flat"),                 # b1 c0
    ("p5", "points", [B5], [], 6, None, 20, "flat"),                 # b2 c0
    ("p6-jokers", "points", [J3], [], 6, None, 60, "flat"),          # 10·4 + 10·2
    ("p6", "points", [B6], [], 6, None, 60, "flat"),
    ("p7", "points", [B7], [], 6, None, 120, "flat"),                # 10·8 + 10·4
    ("p7-heavenly", "points", [J4], [], 6, None, 120, "flat"),
    ("p7-chain", "points", [CH7], [], 6, None, 120, "flat"),
    ("p8", "points", [B8], [], 6, None, 240, "flat"),                # 10·16 + 10·8
    ("p8-chain4", "points", [CH8], [], 6, None, 240, "flat"),
    ("p8-chain5", "points", [CH8b], [], 6, None, 240, "flat"),
    ("p9", "points", [B9], [], 6, None, 480, "flat"),                # 10·32 + 10·16
    ("p10", "points", [B10], [], 6, None, 960, "flat"),              # 640 + 320
    ("p11", "points", [B11], [], 6, None, 1920, "flat"),             # 1280 + 640
    ("p12", "points", [B12], [], 6, None, 3840, "flat"),             # 2560 + 1280
    # wealth table rows, flat kou
    ("w4", "wealth", [B4], [], 6, None, 10, "flat"),
    ("w5", "wealth", [B5], [], 6, None, 10, "flat"),                 # wealth b(5) = 1
    ("w6-jokers", "wealth", [J3], [], 6, None, 40, "flat"),          # 10·2 + 10·2
    ("w6", "wealth", [B6], [], 6, None, 40, "flat"),
    ("w7", "wealth", [B7], [], 6, None, 80, "flat"),                 # 40 + 40
    ("w7-heavenly", "wealth", [J4], [], 6, None, 80, "flat"),
    ("w8", "wealth", [CH8], [], 6, None, 160, "flat"),
    ("w9", "wealth", [B9], [], 6, None, 320, "flat"),
    ("w10", "wealth", [B10], [], 6, None, 640, "flat"),
    ("w11", "wealth", [B11], [], 6, None, 1280, "flat"),
    ("w12", "wealth", [B12], [], 6, None, 2560, "flat"),
    # kou × doubling, contribution both ways
    ("p7-single", "points", [B7], [], 8, None, 200, "single"),       # 10·2·8 + 10·4
    ("p7-vs-6-double", "points", [B7], [B6], 12, None, 340, "double"),  # 10·4·8 + 10·(4−2)
    ("loser-bombs-no-doubling", "points", [], [B8], 6, None, -70, "flat"),  # 10·1·1 + 10·(0−8)
    ("both-8", "wealth", [CH8b], [B8], 7, None, 160, "single"),      # 10·2·8 + 10·(8−8)
    ("loser-7-winner-4", "wealth", [B4], [J4], 12, None, 0, "double"),  # 10·4·1 + 10·(0−4)
    #
    ("r9-4-5", "points", [B4, "5 5 5 5"], [], 6, None, 20, "flat"),  # → 5: b2 c0
    ("r9-4-6", "points", [B4, "6 6 6 6"], [], 6, None, 10, "flat"),  # not consecutive
    ("r9-A-2", "points", ["A A A A", "2 2 2 2"], [], 6, None, 20, "flat"),  # R-9.2 R-2.2 twos on → 5: b2 c0
    ("r9-A-2-off", "points", ["A A A A", "2 2 2 2"], [], 6, {"chain_bomb_twos": False}, 10, "flat"),  # 4: b1
    ("r9-A-2-5s-wealth", "wealth", ["A A A A A", "2 2 2 2 2"], [], 6, None, 40, "flat"),  # → 6: 10·2 + 10·2
    ("r9-A-2-5s-wealth-off", "wealth", ["A A A A A", "2 2 2 2 2"], [], 6, {"chain_bomb_twos": False},
     10, "flat"),                                                    # 5: wealth b1 c0
    ("p7-chain-to-2", "points", ["K K K K A A A A 2 2 2 2"], [], 6, None, 120, "flat"),  # 10·8 + 10·4
    ("r9-joker", "points", [B4, "5 5 5 BJ"], [], 6, None, 20, "flat"),
    ("r9-three", "points", [B4, "5 5 5 5", "6 6 6 6"], [], 6, None, 20, "flat"),  # still 5
    ("r9-5s", "points", [B5, "6 6 6 6 6"], [], 6, None, 60, "flat"),  # → 6: 40 + 20
    ("r9-loser", "points", [], ["4 4 4 4", "5 5 5 5"], 6, None, 10, "flat"),  # loser's R-9: c(5)=0, no doubling
    #
    ("r10-off", "points", ["3 3 3 3", "6 6 6 6", "9 9 9 9"], [], 6, None, 10, "flat"),
    ("r10-3", "points", ["3 3 3 3", "6 6 6 6", "9 9 9 9"], [], 6, {"separate_bombs": True}, 20, "flat"),
    ("r10-4", "points", ["3 3 3 3", "6 6 6 6", "9 9 9 9", "Q Q Q Q"], [], 6, {"separate_bombs": True}, 60, "flat"),
    ("r10-5", "wealth", ["3 3 3 3", "6 6 6 6", "9 9 9 9", "Q Q Q Q", "K K K K"], [], 6,
     {"separate_bombs": True}, 80, "flat"),                          # → 7: 10·4 + 10·4
    ("r10-6", "points", ["3 3 3 3", "6 6 6 6", "9 9 9 9", "Q Q Q Q", "K K K K", "J J J J"], [], 7,
     {"separate_bombs": True}, 400, "single"),                       # → 8: 10·2·16 + 10·8
    ("r10-two-5s", "points", ["3 3 3 3 3", "9 9 9 9 9"], [], 6, {"separate_bombs": True}, 60, "flat"),
]


@pytest.mark.parametrize("name,mode,wplays,lplays,left,overrides,score,kou", NORMAL, ids=[r[0] for r in NORMAL])
def test_normal_settlements(name, mode, wplays, lplays, left, overrides, score, kou):
    """R-8.6: W gets X·a·b + X·(c_W − c_L), L the negation; zero-sum."""
    plays = [("a", p) for p in wplays] + [("b", p) for p in lplays]
    s = settle(build(mode, a=P2 if mode == "points" else W2, b=P2 if mode == "points" else W2,
                     plays=plays, winner="a", left=left, overrides=overrides))
    assert s is not None
    assert (s.winner, s.loser, s.kou) == ("a", "b", kou)
    assert s.scores == {"a": score, "b": -score}
    assert s.burned == 0 and sum(s.scores.values()) == 0
    assert s.breakdown["X"] == 10
    assert s.breakdown["win_term"] + s.breakdown["contribution"]["a"] == score


def test_recorded_config_without_chain_bomb_twos_keeps_old_rules():
    """R-11.3, R-9.2: a MatchCreated recorded before ``chain_bomb_twos`` existed settles
    as that match was played (chain bombs, and so R-9, to A only): AAAA + 2222 stay 4-xiang."""
    ev = build("points", plays=[("a", "A A A A"), ("a", "2 2 2 2")])
    record = {k: v for k, v in ev[0].config.items() if k != "chain_bomb_twos"}
    ev[0] = MatchCreated(match_id="m1", seq=1, ts=1000, command_id="c", config=record)
    assert settle(ev).scores == {"a": 10, "b": -10}                  # 10·1·1: no R-9
    assert settle(build("points", plays=[("a", "A A A A"), ("a", "2 2 2 2")])).scores["a"] == 20


def test_base_from_lower_level_points():
    """R-8.2: X is the base of the lower level of the two seated players (here b: level 2, X 10)."""
    s = settle(build("points", a=(5, 60, 1500), b=(2, 10, 150), plays=[("a", B7)], left=8))
    assert s.breakdown["X"] == 10 and s.breakdown["X_from"]["lower"] == "b"
    assert s.scores["a"] == 200                                     # 10·2·8 + 10·4


def test_base_from_lower_level_wealth():
    """R-8.2 decision: the same for wealth (a: level 5, X 1000; b: level 3, X 100)."""
    s = settle(build("wealth", a=(5, 1000, 600_000), b=(3, 100, 20_000), winner="b", left=12))
    assert s.breakdown["X"] == 100 and s.breakdown["X_from"]["lower"] == "b"
    assert s.scores == {"b": 400, "a": -400}                       # 100·4·1


# Escapes: (id, mode, seats, plays, escaper, overrides, escaper score, opponent score, burned)
ESCAPES = [
    # points: 12·X + X·c_O + X·a_single·b_O (b_O > 1), ratio 1.0
    ("p-nothing", "points", P2, [], "a", None, -120, 120, 0),
    ("p-O7", "points", P2, [("b", B7)], "a", None, -320, 320, 0),            # 120 + 40 + 10·2·8
    ("p-O7-own6", "points", P2, [("a", B6), ("b", B7)], "a", None, -320, 320, 0),  # own c counts 0
    ("p-O5", "points", P2, [("b", B5)], "a", None, -160, 160, 0),           # 120 + 0 + 10·2·2
    ("p-O4", "points", P2, [("b", B4)], "a", None, -120, 120, 0),           # b_O = 1 → D = 0
    ("p-ratio", "points", P2, [("b", B7)], "a", {"escape_transfer_ratio": 0.5}, -320, 160, 160),
    # wealth before any card was played: 12·X only, 70% / 30%
    ("w-before", "wealth", (5, 1000, 600_000), [], "b", None, -12000, 8400, 3600),
    # wealth after: 12·X + X·c_O + X·b_O (b_O > 1)
    ("w-sheet", "wealth", (5, 1000, 600_000), [("a", B6), ("b", B7)], "a", None, -20000, 14000, 6000),
    ("w-after-O4", "wealth", (5, 1000, 600_000), [("b", B4)], "a", None, -12000, 8400, 3600),
    ("w-after-own-only", "wealth", (5, 1000, 600_000), [("a", B8)], "a", None, -12000, 8400, 3600),
    ("w-after-O5", "wealth", (5, 1000, 600_000), [("b", B5)], "a", None, -12000, 8400, 3600),  # wealth b(5)=1
    ("w-floor", "wealth", (1, 5, 500), [], "a", {"escape_penalty_multiple": 13}, -65, 45, 20),  # floor(45.5)
    ("w-after-r9", "wealth", (2, 10, 5000), [("b", "5 5 5 5 5"), ("b", "6 6 6 6 6")], "a", None,
     -160, 112, 48),                                                        # O → 6: 120 + 20 + 20
]


@pytest.mark.parametrize("name,mode,seat,plays,escaper,overrides,esc,opp,burned", ESCAPES,
                         ids=[r[0] for r in ESCAPES])
def test_escape_forfeit(name, mode, seat, plays, escaper, overrides, esc, opp, burned):
    """R-12.1 forfeit, R-12.2 points, R-12.3 wealth (70% to the opponent, floor; the rest burned)."""
    s = settle(build(mode, a=seat, b=seat, plays=plays, escape=escaper, overrides=overrides))
    other = "b" if escaper == "a" else "a"
    assert (s.kou, s.loser, s.winner) == ("escape", escaper, other)
    assert s.scores == {escaper: esc, other: opp}
    assert s.burned == burned
    assert sum(s.scores.values()) + s.burned == 0


def test_sheet_escape_example_breakdown():
    """R-12.3 worked example: X = 1000, A 6-xiang, B 7-xiang, A escapes → A −20000, B +14000."""
    s = settle(build("wealth", a=(5, 1000, 600_000), b=(5, 1000, 600_000),
                     plays=[("a", B6), ("b", B7)], escape="a"))
    e = s.breakdown["escape"]
    assert (e["penalty"], e["contribution"], e["doubling"], e["owed"]) == (12000, 4000, 4000, 20000)
    assert e["received"] == 14000 and s.burned == 6000
    assert s.breakdown["c"] == {"b": 4, "a": 0}


def test_escape_to_trustee_settles_normally():
    """R-12.1 trustee: the system plays on; the normal settlement applies."""
    s = settle(build("points", plays=[("b", B7)], escape="a", escape_policy="trustee", winner="b", left=3))
    assert s.kou == "flat" and s.scores == {"b": 120, "a": -120}
    assert s.breakdown["escaped_to_trustee"] == ["a"]


# wealth cap: (id, seats a/b, plays, winner/escaper, expected scores, burned)
def test_cap_loser_pays_at_most_balance():
    """R-11.2: loser b holds 120 coins, owes 5·4·128 + 5·128 = 3200 → pays 120, a receives 120."""
    s = settle(build("wealth", a=(1, 5, 300), b=(1, 5, 120), plays=[("a", B12)], left=12))
    assert s.scores == {"a": 120, "b": -120} and s.burned == 0
    cap = s.breakdown["cap"]
    assert cap["applied"] and cap["owed"] == 3200 and cap["paid"] == 120


def test_cap_when_winner_pays_net():
    """R-11.2 decision: the cap applies to whoever pays net (here the winner, by contribution)."""
    s = settle(build("wealth", a=(1, 5, 200), b=(1, 5, 5000), plays=[("b", B12)], left=3))
    # a wins: 5·1·1 + 5·(0 − 128) = −635, a holds 200
    assert s.scores == {"a": -200, "b": 200}
    assert s.breakdown["cap"]["payer"] == "a"


def test_cap_on_escape():
    """R-11.2 + R-12.3: escaper holds 150, owes 60 + 640 + 640 = 1340 → pays 150, opponent floor(105)."""
    s = settle(build("wealth", a=(1, 5, 150), b=(1, 5, 5000), plays=[("b", B12)], escape="a"))
    assert s.scores == {"a": -150, "b": 105} and s.burned == 45


def test_cap_not_applied_when_balance_suffices():
    s = settle(build("wealth", a=W2, b=W2, plays=[("a", B7)], left=12))
    assert s.scores == {"a": 200, "b": -200} and s.breakdown["cap"]["applied"] is False  # 10·4·4 + 10·4


def test_points_no_cap_by_default():
    """R-11.2 cap is a wealth default; points balances may go below zero."""
    s = settle(build("points", a=P2, b=(2, 10, 0), plays=[("a", B12)], left=12))
    assert s.scores["b"] == -(10 * 4 * 256 + 10 * 128) and s.breakdown["cap"] is None


def test_unfinished_match_is_none():
    assert settle(build("points", plays=[("a", B4)], finished=False)) is None
    assert settle([]) is None


def test_to_json_shape():
    """docs/ARCHITECTURE.md run-script result: winner kou cards_left scores breakdown (+ burned)."""
    s = settle(build("wealth", a=W2, b=W2, plays=[("a", B7)], left=8))
    j = s.to_json()
    assert set(j) == {"winner", "kou", "cards_left", "scores", "breakdown", "burned"}
    assert json.loads(json.dumps(j)) == j
    assert Settlement.model_validate_json(s.model_dump_json()) == s


def test_transfer_share_floor():
    """Rounding (docs/SETTLEMENT.md): the receiver's share is rounded down, the rest burned."""
    assert [transfer_share(n, 0.7) for n in (0, 1, 2, 10, 65, 20000)] == [0, 0, 1, 7, 45, 14000]
    assert transfer_share(999, 1.0) == 999 and transfer_share(999, 0.0) == 0


# ---- properties -----------------------------------------------------------------------------

BOMB_POOL = [B4, "5 5 5 5", "6 6 6 6", B5, "6 6 6 6 6", J3, B6, B7, J4, CH7, B8, CH8, B9, B10, B11, B12,
             "A A A A", "2 2 2 2", "3 3 3 BJ"]
LEVELS = {"points": [(lv.level, lv.base) for lv in POINTS.levels],
          "wealth": [(lv.level, lv.base) for lv in WEALTH.levels]}

seat_st = st.tuples(st.integers(0, 16), st.integers(0, 10**7))
plays_st = st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from(BOMB_POOL)), max_size=6)


def _seat(mode, i, balance):
    level, base = LEVELS[mode][i % len(LEVELS[mode])]
    return (level, base, balance)


@settings(max_examples=150, deadline=None)
@given(mode=st.sampled_from(["points", "wealth"]), sa=seat_st, sb=seat_st, plays=plays_st,
       winner=st.sampled_from("ab"), left=st.integers(1, 27), escape=st.sampled_from([None, "a", "b"]),
       cap=st.booleans(), ratio=st.sampled_from([0.0, 0.3, 0.7, 1.0]), r10=st.booleans())
def test_conservation_properties(mode, sa, sb, plays, winner, left, escape, cap, ratio, r10):
    """Points normal ends are zero-sum; sum(scores) + burned == 0 always; burned ≥ 0;
    with the cap no one pays more than the balance they were seated with (R-8.6, R-11.2, R-12)."""
    overrides = {"cap_loss_at_balance": cap, "escape_transfer_ratio": ratio, "separate_bombs": r10}
    a, b = _seat(mode, sa[0], sa[1]), _seat(mode, sb[0], sb[1])
    s = settle(build(mode, a=a, b=b, plays=plays, winner=winner, left=left, escape=escape, overrides=overrides))
    assert s.burned >= 0
    assert sum(s.scores.values()) + s.burned == 0
    if escape is None or ratio == 1.0:
        assert sum(s.scores.values()) == 0 and s.burned == 0
    if cap:
        bal = {"a": a[2], "b": b[2]}
        for p, v in s.scores.items():
            assert v >= -bal[p]
    assert s.breakdown["X"] == min((a, b), key=lambda t: t[0])[1]


# ---- match scripts through `shuangkou run-script --json` (examples/settlement/*.json) --------

from pathlib import Path  # noqa: E402

SCRIPTS = sorted((Path(__file__).resolve().parent.parent / "examples" / "settlement").glob("*.json"))


def _subset(expected, actual, where="result"):
    """Every key of ``expected`` is in ``actual`` with an equal (recursively subset) value."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected a mapping, got {actual!r}"
        for k, v in expected.items():
            assert k in actual, f"{where}.{k} missing"
            _subset(v, actual[k], f"{where}.{k}")
    else:
        assert expected == actual, f"{where}: expected {expected!r}, got {actual!r}"


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_settlement_scripts(path, capsys):
    """The worked examples of docs/SETTLEMENT.md, played through the real service."""
    from shuangkou.cli import main

    assert main(["run-script", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expect = json.loads(path.read_text(encoding="utf-8"))["expect"]
    assert out["rejections"] == [], out["rejections"]
    _subset(expect, out["result"])
    result = out["result"]
    assert sum(result["scores"].values()) + result.get("burned", 0) == 0


def test_settlement_scripts_exist():
    assert len(SCRIPTS) >= 6
