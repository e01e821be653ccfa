"""run-script on every example, bad scripts (exit 2), and replay of run-script output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shuangkou.cli import main
from engine.match.replay import check_stream
from engine.tools.script import ScriptError, run_script

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))


def run_json(path: Path, capsys) -> dict:
    assert main(["run-script", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_there_are_examples() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {"normal_win", "bomb_battle", "auto_pass_chain", "bad_inputs", "timeouts_trustee",
            "escape_forfeit"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_gives_the_expected_result(path: Path, capsys) -> None:
    expect = json.loads(path.read_text())["expect"]
    out = run_json(path, capsys)
    assert set(out) == {"events", "rejections", "result"}
    assert out["result"]["winner"] == expect["winner"]
    assert out["result"]["kou"] == expect["kou"]
    assert [r["index"] for r in out["rejections"]] == expect["rejections"]
    assert all(r["reason"] for r in out["rejections"])
    if out["result"]["winner"] is not None and out["result"]["kou"] != "escape":
        assert sum(out["result"]["scores"].values()) == 0  # zero-sum
    from engine.match.events import event_from_dict

    events = [event_from_dict(e) for e in out["events"]]
    assert check_stream(events) == []


def test_example_specifics(capsys) -> None:
    out = run_json(ROOT / "examples" / "auto_pass_chain.json", capsys)
    assert [e["by"] for e in out["events"] if e["type"] == "Passed"] == ["auto"] * 3
    out = run_json(ROOT / "examples" / "timeouts_trustee.json", capsys)
    timed = [e for e in out["events"] if e["type"] == "TurnTimedOut"]
    assert [e["count"] for e in timed] == [1, 2, 3]
    assert any(e["type"] == "TrusteeshipStarted" and e["reason"] == "timeouts" for e in out["events"])
    assert any(e["type"] == "CardsPlayed" and e["by"] == "trustee" for e in out["events"])
    out = run_json(ROOT / "examples" / "bomb_battle.json", capsys)
    kinds = [e["reading"]["kind"] for e in out["events"] if e["type"] == "CardsPlayed"]
    assert kinds == ["single", "three_jokers", "chain_bomb", "bomb", "single"]


def test_text_output_is_a_play_by_play(capsys) -> None:
    assert main(["run-script", str(ROOT / "examples" / "normal_win.json")]) == 0
    text = capsys.readouterr().out
    assert "a plays 5 6 7 8 9 -- straight to 9 (5 cards)" in text
    assert "b passes [auto]" in text and "result: a wins, kou single" in text


def test_cli_entry_point_subprocess() -> None:
    p = subprocess.run([sys.executable, "-m", "shuangkou", "run-script", str(ROOT / "examples" / "escape_forfeit.json"),
                        "--json"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["result"]["kou"] == "escape"


BAD = [
    ({"players": [{"id": "a"}, {"id": "b"}], "actions": [], "seed": 1}, "missing key 'config'"),
    ({"config": "points", "actions": [], "seed": 1}, "missing key 'players'"),
    ({"config": "points", "players": [{"id": "a"}], "actions": [], "seed": 1}, "exactly 2"),
    ({"config": "nope", "players": [{"id": "a"}, {"id": "b"}], "actions": [], "seed": 1}, "unknown or bad config"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "actions": []}, "seed"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "actions": [],
      "deal": {"hands": ["3 X", "4"]}}, "bad card token"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1,
      "actions": [{"player": "a", "play": "3 Z"}]}, "bad card token"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1,
      "actions": [{"player": "a", "dance": True}]}, "exactly one of"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1, "actions": [], "bogus": 1}, "unknown keys"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "actions": [],
      "deal": {"hands": ["3 3 3 3 3 3 3 3", "3"]}}, "too many 3"),
    ({"config": "wealth", "players": [{"id": "a", "points": 500}, {"id": "b", "coins": 500}], "seed": 1,
      "actions": []}, "is a wealth room"),
    # malformed values are one-line errors too, never a traceback
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1,
      "actions": [{"player": "a", "play": ""}]}, "actions[0].play names no cards"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1,
      "actions": [{"player": "a", "play": []}]}, "actions[0].play names no cards"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1,
      "actions": [{"player": "a", "play": "3", "reading": 5}]}, "actions[0].reading must be"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1,
      "actions": [{"player": "a", "play": "3", "reading": "single 3 extra"}]}, "actions[0].reading must be"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1,
      "actions": [{"player": "a", "pass": True, "reading": "single"}]}, "actions[0]: unknown keys ['reading']"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1,
      "actions": [{"player": "a", "pass": False}]}, 'actions[0]: write "pass": true'),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1,
      "actions": [{"player": "a", "trustee": "no"}]}, "actions[0].trustee must be true"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1,
      "actions": ["a passes"]}, 'actions[0] needs a "player"'),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": [1, 2], "actions": []},
     '"seed" must be an integer or a string'),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 1, "match_id": {"x": 1},
      "actions": []}, '"match_id" must be a non-empty string'),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "actions": [],
      "deal": {"hands": ["3", "4"], "first": True}}, "deal.first must be 0 or 1"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "actions": [],
      "deal": {"hands": ["3", "4"], "lead": 0}}, "deal: unknown keys ['lead']"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "actions": [],
      "deal": {"hands": ["3S 3S", "3S"]}}, "too many 3S"),           # the same card in both hands
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "actions": [],
      "deal": {"hands": [" ".join(["3"] * 8 + ["4"] * 8 + ["5"] * 8 + ["6"] * 4), "7"]}},
     "hand 0 has 28 cards"),
    ({"config": "points", "players": [{"id": "a"}, {"id": "b"}], "actions": [],
      "deal": {"hands": ["", "7"]}}, "hand 0 has 0 cards"),
]


@pytest.mark.parametrize("script, needle", BAD, ids=[n for _, n in BAD])
def test_bad_scripts_exit_2_with_one_line(script, needle, tmp_path, capsys) -> None:
    f = tmp_path / "s.json"
    f.write_text(json.dumps(script))
    assert main(["run-script", str(f), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_missing_and_invalid_files_exit_2(tmp_path, capsys) -> None:
    assert main(["run-script", str(tmp_path / "none.json")]) == 2
    f = tmp_path / "x.json"
    f.write_text("{not json")
    assert main(["run-script", str(f)]) == 2


def test_wealth_player_below_the_lowest_level_is_a_bad_script(tmp_path, capsys) -> None:
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"config": "wealth", "players": [{"id": "a", "coins": 5}, {"id": "b", "coins": 500}],
                             "seed": 1, "actions": []}))
    assert main(["run-script", str(f)]) == 2
    assert "R-11.1" in capsys.readouterr().err


def test_seeded_script_is_deterministic_and_unfinished_result_has_no_scores() -> None:
    script = {"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 42,
              "actions": [{"player": "a", "timeout": True}, {"player": "b", "timeout": True}]}
    r1, r2 = run_script(script), run_script(script)
    assert [e.model_dump() for e in r1.events] == [e.model_dump() for e in r2.events]
    assert r1.result["winner"] is None and r1.result["scores"] == {}
    assert sum(r1.result["cards_left"].values()) <= 54
    dealt = [e for e in r1.events if e.type == "HandDealt"][0]
    assert dealt.lead_card in dealt.hands[dealt.first]
    # each timeout either runs the clock of the player on turn or is refused as such
    timed = [e for e in r1.events if e.type == "TurnTimedOut"]
    assert len(timed) + len(r1.rejections) == 2 and timed
    assert all("no turn clock runs" in r["reason"] for r in r1.rejections)
    first = ("a", "b")[dealt.first]
    assert timed[0].player == first and (first == "a") == (0 not in [r["index"] for r in r1.rejections])


def test_script_with_all_trustee_players_runs_to_the_end() -> None:
    script = {"config": "points", "players": [{"id": "a"}, {"id": "b"}], "seed": 7,
              "actions": [{"player": "a", "trustee": True}, {"player": "b", "trustee": True}]}
    out = run_script(script)
    assert out.state.phase == "finished" and out.result["winner"] in ("a", "b")


def test_replay_cli_checks_run_script_output(tmp_path, capsys) -> None:
    out = run_json(ROOT / "examples" / "bomb_battle.json", capsys)
    f = tmp_path / "events.json"
    f.write_text(json.dumps(out))
    assert main(["replay", "script", "--events", str(f)]) == 0
    text = capsys.readouterr().out
    assert "b plays 8 8 8 8 8 8 8" in text and "check: ok" in text
    assert main(["replay", "--events", str(f), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["problems"] == [] and rep["result"]["winner"] == "b"
    # tamper: a card played that the player never held
    played = [e for e in out["events"] if e["type"] == "CardsPlayed"][0]
    played["cards"] = [107]
    f.write_text(json.dumps(out))
    assert main(["replay", "script", "--events", str(f)]) == 1
    assert "problem" in capsys.readouterr().out
    # tamper: a gap in the sequence
    del out["events"][7]
    f.write_text(json.dumps(out))
    assert main(["replay", "script", "--events", str(f), "--json"]) == 1
    assert any("expected seq" in p for p in json.loads(capsys.readouterr().out)["problems"])


def test_replay_all_of_an_empty_store_says_so(monkeypatch, capsys) -> None:
    """Nothing to audit (every match archived, say): exit 0 and one line that says so."""
    import fakeredis

    from engine.store.redis_store import RedisEventStore
    from shuangkou.cli import main

    store = RedisEventStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()))
    monkeypatch.setattr(RedisEventStore, "from_url", classmethod(lambda cls, url, **kw: store))
    assert main(["replay", "--redis", "redis://x", "--all"]) == 0
    out = capsys.readouterr()
    assert out.out == "" and out.err.strip() == "shuangkou replay: no matches to check: the store holds none"


def test_replay_cli_needs_a_source(capsys) -> None:
    assert main(["replay", "m1"]) == 2


@pytest.mark.parametrize("content, needle", [
    ({"events": []}, "holds no events"),
    ([], "holds no events"),
    ({"events": [5]}, "event 0 is not an object"),
    ({"events": [{"type": "Nope"}]}, "event 0: not a valid event"),
])
def test_replay_cli_bad_event_files_exit_2_with_one_line(content, needle, tmp_path, capsys) -> None:
    f = tmp_path / "events.json"
    f.write_text(json.dumps(content))
    for extra in ([], ["--json"]):
        assert main(["replay", "--events", str(f), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and "\n" not in err, err


@pytest.mark.parametrize("tamper, needle", [
    (lambda ev: [e for e in ev if e["type"] == "CardsPlayed"][0].update(cards=[500]),
     "played cards not in hand: #500"),
    (lambda ev: [e for e in ev if e["type"] == "HandDealt"][0]["hands"][0].append(999),
     "invalid card ids [999]"),
    (lambda ev: [e for e in ev if e["type"] == "CardsPlayed"][0]["reading"].update(kind="bomb"),
     "is not a reading of"),
    (lambda ev: ev[0].update(config={}), "seq 1 (MatchCreated): apply failed: ValidationError"),
])
def test_replay_cli_reports_a_tampered_stream_as_problems(tamper, needle, tmp_path, capsys) -> None:
    """Untrusted events: every oddity is a problem line (exit 1), never a traceback."""
    out = run_json(ROOT / "examples" / "normal_win.json", capsys)
    tamper(out["events"])
    f = tmp_path / "events.json"
    f.write_text(json.dumps(out))
    assert main(["replay", "--events", str(f)]) == 1
    problems = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  problem: ")]
    assert any(needle in p for p in problems), problems
    assert main(["replay", "--events", str(f), "--json"]) == 1
    assert any(needle in p for p in json.loads(capsys.readouterr().out)["problems"])


def test_run_script_raises_script_error_directly() -> None:
    with pytest.raises(ScriptError):
        run_script({"config": "points"})


def test_replay_cli_on_a_redis_store_checks_every_match(monkeypatch, capsys) -> None:
    import fakeredis

    from engine.store.redis_store import RedisEventStore
    from tests.strategies import MatchSpec, play_match

    store = RedisEventStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()))
    for n in range(3):
        run = play_match(MatchSpec(seed=n, chaos=0.1), match_id=f"m{n}")
        for e in run.store.load(f"m{n}"):
            store.append(f"m{n}", e.seq - 1, f"copy{e.seq}", [e], None)
    monkeypatch.setattr(RedisEventStore, "from_url", classmethod(lambda cls, url, **kw: store))
    finished_unsettled = main(["replay", "--redis", "redis://x", "--all"])
    capsys.readouterr()
    from projections.runner import reconcile
    from projections.ledger import RedisLedger

    reconcile(store, RedisLedger(store.client))  # issue 11 §3: --all fails until every finished match is settled
    assert main(["replay", "--redis", "redis://x", "--all"]) == 0
    assert finished_unsettled == (1 if any(store.load(m)[-1].type == "MatchFinished" for m in ("m0", "m1", "m2"))
                                  else 0)
    lines = capsys.readouterr().out.splitlines()
    assert sorted(line.split(":")[0] for line in lines) == ["m0", "m1", "m2"]
    assert main(["replay", "m1", "--redis", "redis://x", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == []
    assert main(["replay", "nope", "--redis", "redis://x"]) == 1


def test_replay_cli_checks_the_stored_settlement(monkeypatch, capsys) -> None:
    """Issue: replay prints the settlement and checks it against the stored projection."""
    import fakeredis

    from engine.store.redis_store import RedisEventStore
    from projections.ledger import RedisLedger
    from projections.settlement import settle
    from tests.strategies import MatchSpec, play_match

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    store = RedisEventStore(client)
    ledger = RedisLedger(client)
    finished = []
    for n in range(12):
        run = play_match(MatchSpec(seed=n), match_id=f"m{n}")
        events = run.store.load(f"m{n}")
        for e in events:
            store.append(f"m{n}", e.seq - 1, f"copy{e.seq}", [e], None)
        s = settle(events)
        if s is not None:
            finished.append((f"m{n}", s))
    assert len(finished) >= 2
    monkeypatch.setattr(RedisEventStore, "from_url", classmethod(lambda cls, url, **kw: store))

    honest_id, honest = finished[0]
    assert main(["replay", honest_id, "--redis", "redis://x"]) == 0
    assert "stored settlement: none yet" in capsys.readouterr().out
    ledger.apply_settlement(honest_id, honest)
    assert main(["replay", honest_id, "--redis", "redis://x"]) == 0
    assert "stored settlement: matches the replay" in capsys.readouterr().out

    forged_id, real = finished[1]
    winner = real.winner
    forged = real.model_copy(update={"scores": {p: (v + 1 if p == winner else v - 1)
                                                for p, v in real.scores.items()}})
    ledger.apply_settlement(forged_id, forged)
    assert main(["replay", forged_id, "--redis", "redis://x"]) == 1
    out = capsys.readouterr().out
    assert "stored settlement differs from the replay: scores" in out
    assert main(["replay", "--redis", "redis://x", "--all"]) == 1
    assert f"{forged_id}: " in capsys.readouterr().out


# -- "expect" is checked: a wrong expectation exits 1 naming the key -------------------------

SETTLEMENT = ROOT / "examples" / "settlement"
WRONG_EXPECT = [  # (example, expect key, a wrong value)  examples
    (SETTLEMENT / "points_r9_consecutive.json", "scores", {"a": 11, "b": -11}),
    (SETTLEMENT / "points_r9_consecutive.json", "winner", "b"),
    (SETTLEMENT / "points_r9_consecutive.json", "kou", "double"),
    (SETTLEMENT / "points_r9_consecutive.json", "breakdown", {"xiang": {"a": {"xiang": 4}}}),
    (SETTLEMENT / "wealth_escape_sheet.json", "burned", 1),
    (SETTLEMENT / "wealth_escape_sheet.json", "balances", {"a": 0, "b": 0}),
    (SETTLEMENT / "points_doubling_contribution.json", "cards_left", {"a": 0, "b": 99}),
    (ROOT / "examples" / "bad_inputs.json", "rejections", [0, 1]),
]


@pytest.mark.parametrize("path, key, wrong", WRONG_EXPECT, ids=[f"{p.stem}-{k}" for p, k, _ in WRONG_EXPECT])
def test_a_wrong_expectation_exits_1_naming_it(tmp_path, capsys, path, key, wrong):
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["config"] in ("points", "wealth")  # a built-in room: the copy runs from tmp_path
    data["expect"] = {**data["expect"], key: wrong}
    f = tmp_path / path.name
    f.write_text(json.dumps(data), encoding="utf-8")
    for flags in ([], ["--json"]):
        assert main(["run-script", str(f), *flags]) == 1
        err = capsys.readouterr().err
        assert f"expect mismatch: {key}" in err and err.count("expect mismatch") == 1, err


@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "examples").rglob("*.json")
                                         if "client" not in p.relative_to(ROOT / "examples").parts),
                         ids=lambda p: p.stem)  # examples/client: the node bot (package.json …)
def test_every_shipped_example_meets_its_expectation(path, capsys):
    assert main(["run-script", str(path)]) == 0, capsys.readouterr().err
    assert "expect mismatch" not in capsys.readouterr().err


def test_balances_expectation_is_start_plus_score(tmp_path, capsys):
    path = SETTLEMENT / "wealth_escape_sheet.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    start = {p["id"]: p.get("coins", 0) for p in data["players"]}
    data["expect"]["balances"] = {p: start[p] + s for p, s in data["expect"]["scores"].items()}
    f = tmp_path / "ok.json"
    f.write_text(json.dumps(data), encoding="utf-8")
    assert main(["run-script", str(f)]) == 0


def test_an_unknown_expect_key_is_a_bad_script(tmp_path, capsys):
    data = json.loads((ROOT / "examples" / "normal_win.json").read_text(encoding="utf-8"))
    data["expect"]["scorez"] = {}
    f = tmp_path / "typo.json"
    f.write_text(json.dumps(data), encoding="utf-8")
    assert main(["run-script", str(f)]) == 2
    assert "unknown \"expect\" key(s): scorez" in capsys.readouterr().err
