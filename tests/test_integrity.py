"""The chip-dumping detector (issue 37, docs/INTEGRITY.md): the pure record and score
functions as tables and properties, the projection on fakeredis, a small population played
through the real engine (a blatant dumper pair is flagged, honest pairs are not), and the
``shuangkou integrity`` commands on a real redis-server."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.tools.script import run_script
from projections.integrity.features import is_bot, match_record, pair_key, split_pair
from projections.integrity.score import (CAPS, DEFAULT_MIN_SCORE, FLOORS, MIN_LOSSES, MIN_MATCHES, SIGNALS, Rates, indicators,
                                         population, score_pair, surprise)
from tests.tool_support import need



def _bench() -> Any:
    """bench/integrity.py, loaded from its file: putting bench/ on sys.path would shadow the
    ``gateway`` package with bench/gateway.py for every test collected after this one."""
    import importlib.util

    if (mod := sys.modules.get("sk_bench_integrity")) is not None:
        return mod
    spec = importlib.util.spec_from_file_location(
        "sk_bench_integrity", Path(__file__).resolve().parents[1] / "bench" / "integrity.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sk_bench_integrity"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def _script(hands: tuple[str, str], first: int, actions: list[dict[str, Any]], config: str = "wealth") -> Any:
    return run_script({"config": config, "players": [{"id": "a", "coins": 5000}, {"id": "b", "coins": 5000}],
                       "deal": {"hands": list(hands), "first": first}, "actions": actions})


# -- what one match says (features.match_record): real matches of the engine -----------------------
def test_a_pass_that_gives_away_a_win_is_a_concession_with_its_replay_position() -> None:
    # b leads 3; a holds the 9 alone (a single beats, R-5, and empties the hand) and passes
    run = _script(("9", "3 5 7"), 1, [{"player": "b", "play": "3"}, {"player": "a", "pass": True},
                                     {"player": "b", "play": "5"}, {"player": "a", "play": "9"}])
    rec = match_record(run.events)
    assert rec is not None and rec["winner"] == "a"
    assert rec["f"]["a"]["wpass"] == 1 and rec["f"]["a"]["vpass"] == 1
    passed = next(e for e in run.events if e.type == "Passed" and e.player == "a")
    assert [passed.seq, "passed_a_win"] in rec["ev"]["a"]
    assert rec["f"]["b"]["lost"] == 1 and rec["f"]["b"]["left"] == 1
    assert rec["f"]["a"]["net"] > 0 > rec["f"]["b"]["net"]


def test_the_engines_automatic_passes_are_never_held_against_a_player() -> None:
    # a cannot beat the 2 with a 4: the engine passes for a (by "auto"), not a concession
    run = _script(("4 9", "2 3"), 1, [{"player": "b", "play": "2"}, {"player": "b", "play": "3"},
                                     {"player": "a", "play": "4"}, {"player": "a", "play": "9"}])
    rec = match_record(run.events)
    assert rec is not None
    assert any(e.type == "Passed" and e.by == "auto" for e in run.events)
    assert rec["f"]["a"]["wpass"] == 0 and rec["f"]["a"]["vpass"] == 0


def test_splitting_a_bomb_and_escaping_are_recorded() -> None:
    run = _script(("7 7 7 7 8 9 10", "3 5 6 J Q"), 1,
                  [{"player": "b", "play": "3"}, {"player": "a", "play": "7"}, {"player": "a", "escape": True}])
    rec = match_record(run.events)
    assert rec is not None and rec["kou"] == "escape"
    row = rec["f"]["a"]
    assert row["broke"] == 1 and row["esc"] == 1 and row["lost"] == 1
    assert [what for _seq, what in rec["ev"]["a"]] == ["broke_a_bomb", "escape"]


def test_bot_seats_and_unfinished_matches_are_never_scored() -> None:
    run = run_script({"config": "wealth", "players": [{"id": "bot-3", "coins": 5000}, {"id": "b", "coins": 5000}],
                      "deal": {"hands": ["9", "3"], "first": 1}, "actions": [{"player": "b", "play": "3"}]})
    assert run.events[-1].type == "MatchFinished"
    assert match_record(run.events) is None  # b went out, but the opponent is a bot seat
    unfinished = _script(("9 9", "3 4"), 1, [{"player": "b", "play": "3"}])
    assert unfinished.events[-1].type != "MatchFinished"
    assert match_record(unfinished.events) is None


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["points", "wealth"]), st.sampled_from(["forfeit", "trustee"]))
def test_records_of_random_matches_count_only_the_players_own_choices(seed: int, mode: str, policy: str) -> None:
    """Random matches with timeouts, trusteeship, disconnects and escapes (tests/strategies.py)."""
    from tests.strategies import MatchSpec, play_match

    run = play_match(MatchSpec(seed=seed, mode=mode, escape_policy=policy, chaos=0.25))
    events = list(run.store.load("m1"))
    rec = match_record(events)
    if rec is None:
        assert not events or events[-1].type != "MatchFinished"
        return
    own = {p: [e.seq for e in events if e.type in ("CardsPlayed", "Passed") and e.player == p and e.by == "player"]
           for p in rec["players"]}
    for p, row in rec["f"].items():
        assert rec["dec"][p] == own[p]  # every decision of the player's own, and nothing else
        assert row["vpass"] <= row["fopp"] and row["wpass"] <= sum(
            1 for e in events if e.type == "Passed" and e.player == p and e.by == "player")
        assert row["esc"] == sum(1 for e in events if e.type == "PlayerEscaped" and e.player == p)
        assert row["lost"] + row["won"] == 1
        assert all(seq in own[p] or what in ("escape", "trustee_requested") for seq, what in rec["ev"][p])
    from projections.settlement import settle

    s = settle(events)
    assert s is not None and sum(row["net"] for row in rec["f"].values()) + s.burned == 0


@pytest.mark.parametrize(("player", "bot"), [("bot-1", True), ("bot-204", True), ("bot-", False), ("robot-1", False),
                                             ("bot-1x", False), ("alice", False)])
def test_bot_ids(player: str, bot: bool) -> None:
    assert is_bot(player) is bot


@given(st.text(min_size=1, max_size=8, alphabet="abcxyz-_0"), st.text(min_size=1, max_size=8, alphabet="abcxyz-_0"))
def test_pair_keys_are_unordered(a: str, b: str) -> None:
    assert pair_key(a, b) == pair_key(b, a)
    assert set(split_pair(pair_key(a, b))) == {a, b}


# -- the signals of one row (score.indicators) -------------------------------------------------------
@pytest.mark.parametrize(("row", "on"), [
    ({}, set()),
    ({"esc": 1, "lost": 1, "left": 25}, {"escape", "heavy"}),
    ({"treq": 1}, {"trustee"}),
    ({"wpass": 1, "vpass": 1, "fopp": 6}, {"win_pass"}),
    ({"vpass": 3, "fopp": 6}, {"passive"}),            # half the chances to follow passed
    ({"vpass": 3, "fopp": 3, "lost": 1, "left": 5}, {"passive", "conceded"}),  # every chance, and lost
    ({"vpass": 3, "fopp": 3, "won": 1}, {"passive"}),  # every chance, but won
    ({"vpass": 3, "fopp": 7}, set()),                  # fewer than half
    ({"vpass": 2, "fopp": 2}, set()),                  # fewer than 3
    ({"lost": 1, "left": 12}, {"heavy"}),              # the double kou (R-7)
    ({"lost": 1, "left": 11}, set()),
    ({"won": 1, "left": 0, "held": 1}, set()),         # only a loser holds a bomb against himself
    ({"lost": 1, "left": 4, "held": 1}, {"held"}),
    ({"broke": 2}, {"broke"}),
])
def test_indicators(row: dict[str, int], on: set[str]) -> None:
    assert {s for s, v in indicators(row).items() if v} == on


# -- the binomial surprise ---------------------------------------------------------------------------
@pytest.mark.parametrize(("k", "n", "p", "expect"), [
    (0, 20, 0.1, 0.0),           # nothing seen
    (2, 20, 0.1, 0.0),           # no more than expected
    (20, 20, 0.5, 6.02),         # 0.5^20
    (1, 1, 0.02, 1.7),           # log10(50)
    (50, 50, 0.02, 12.0),        # capped
])
def test_surprise_table(k: int, n: int, p: float, expect: float) -> None:
    assert surprise(k, n, p) == pytest.approx(expect, abs=0.01)


@given(st.integers(0, 60), st.integers(1, 60), st.floats(0.01, 0.9), st.floats(0.01, 0.9))
def test_surprise_grows_with_the_count_and_shrinks_with_the_base_rate(k: int, n: int, p: float, q: float) -> None:
    k = min(k, n)
    s = surprise(k, n, p)
    assert 0.0 <= s <= 12.0
    if k < n:
        assert surprise(k + 1, n, p) >= s - 1e-9
    lo, hi = sorted((p, q))
    assert surprise(k, n, lo) >= surprise(k, n, hi) - 1e-9


# -- the pair score (pure) ---------------------------------------------------------------------------
def _rec(m: int, giver: str, receiver: str, net: int, **row: int) -> dict[str, Any]:
    g = {"lost": int(net < 0), "won": int(net > 0), "net": net, **row}
    r = {"lost": int(net > 0), "won": int(net < 0), "net": -net}
    return {"m": f"m{m}", "ts": m, "X": 10, "players": [giver, receiver], "winner": receiver if net < 0 else giver,
            "f": {giver: g, receiver: r}, "ev": {}}


def _history(kind: str, n: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """A giver ``g`` and receiver ``r`` with ``n`` matches, each also playing others."""
    rng = random.Random(seed)
    recs: list[dict[str, Any]] = []
    for i in range(n):
        if kind == "dump":
            recs.append(_rec(i, "g", "r", -40, vpass=5, fopp=6, left=20))
        elif kind == "escape":
            recs.append(_rec(i, "g", "r", -120, esc=1, left=27))
        else:  # an honest weak player: loses more than half, sometimes heavily, never concedes
            lose = rng.random() < 0.7
            recs.append(_rec(i, "g", "r", -30 if lose else 20, vpass=rng.randrange(2), fopp=6,
                             left=rng.choice((3, 8, 14)) if lose else 0))
    others = [_rec(1000 + i, "g", f"o{i}", rng.choice((-20, 20)), vpass=rng.randrange(2), fopp=6) for i in range(n)]
    others += [_rec(2000 + i, "r", f"o{i}", rng.choice((-20, 20))) for i in range(n)]
    return {"g": recs + [x for x in others if "g" in x["players"]], "r": recs + [x for x in others if "r" in x["players"]]}


@pytest.mark.parametrize(("kind", "flagged"), [("dump", True), ("escape", True), ("weak", False)])
def test_a_dumper_scores_above_the_threshold_and_a_weak_honest_player_does_not(kind: str, flagged: bool) -> None:
    h = _history(kind, 20, 1)
    pop = population(r for rs in h.values() for r in rs)
    ev = score_pair("g", "r", h, pop)
    assert (ev["score"] >= DEFAULT_MIN_SCORE) is flagged
    if flagged:
        assert ev["giver"] == "g" and ev["directions"][0]["net_coins"] > 0


def test_a_dismissal_leaves_only_the_evidence_after_it() -> None:
    h = _history("dump", 20, 2)
    pop = population(r for rs in h.values() for r in rs)
    assert score_pair("g", "r", h, pop, since_ts=19)["score"] == 0.0  # no match after ts 19: nothing new
    assert score_pair("g", "r", h, pop, since_ts=5)["score"] >= DEFAULT_MIN_SCORE  # 14 new dumped matches


rows = st.fixed_dictionaries({"esc": st.integers(0, 1), "treq": st.integers(0, 1), "wpass": st.integers(0, 2),
                              "vpass": st.integers(0, 6), "fopp": st.integers(0, 8), "broke": st.integers(0, 2),
                              "held": st.integers(0, 1), "left": st.integers(0, 27), "net": st.integers(-300, 300)})


def _records(draw_rows: list[tuple[dict[str, int], dict[str, int], bool]]) -> dict[str, list[dict[str, Any]]]:
    recs = []
    for i, (ra, rb, a_wins) in enumerate(draw_rows):
        ra = {**ra, "net": abs(ra["net"]) * (1 if a_wins else -1), "lost": int(not a_wins), "won": int(a_wins)}
        rb = {**rb, "net": -ra["net"], "lost": int(a_wins), "won": int(not a_wins)}
        recs.append({"m": f"m{i}", "ts": i, "X": 5, "players": ["a", "b"], "winner": "a" if a_wins else "b",
                     "f": {"a": ra, "b": rb}, "ev": {}})
    return {"a": recs, "b": recs}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(rows, rows, st.booleans()), min_size=0, max_size=30))
def test_score_properties(draw_rows: list[tuple[dict[str, int], dict[str, int], bool]]) -> None:
    h = _records(draw_rows)
    pop = population(h["a"])
    ev = score_pair("a", "b", h, pop)
    # the order of the two accounts does not matter
    assert ev["score"] == score_pair("b", "a", h, pop)["score"]
    assert 0.0 <= ev["score"] <= sum(CAPS.values())
    for d in ev["directions"]:
        # a giver who lost fewer than MIN_LOSSES matches to the receiver scores 0
        assert d["losses"] == sum(1 for r in h["a"] if r["winner"] != d["giver"])
        if d["losses"] < MIN_LOSSES or d["matches"] < MIN_MATCHES:
            assert d["score"] == 0.0
    # friends who play only each other: the share alone (1.0 here) never flags
    quiet = _records([({**ra, "esc": 0, "treq": 0, "wpass": 0, "vpass": 0, "broke": 0, "held": 0, "left": 0},
                       {**rb, "esc": 0, "treq": 0, "wpass": 0, "vpass": 0, "broke": 0, "held": 0, "left": 0}, w)
                      for ra, rb, w in draw_rows])
    q = score_pair("a", "b", quiet, population(quiet["a"]))
    assert q["score"] == 0.0
    if quiet["a"]:
        assert q["share"] == {"a": 1.0, "b": 1.0}


def test_rates_and_floors() -> None:
    r = Rates()
    r.add({"esc": 1})
    r.add({})
    assert r.rate("escape") == 0.5 and r.matches == 2
    assert set(FLOORS) == set(SIGNALS)


# -- the projection and a population through the real engine ---------------------------------------
def _play_population(rounds: int, seed: int) -> tuple[Any, Any, list[Any]]:
    """A blatant dumper pair and honest pairs (bench/integrity.py's accounts) through the real
    engine into the projection on fakeredis; the population, the projection, the last match."""
    import fakeredis
    bench = _bench()

    from projections.integrity.store import IntegrityProjection, IntegrityStore

    pop = bench.build(seed, groups=1, friends=1, dumpers=0)
    giver, receiver = bench.Account("dumper", "normal"), bench.Account("partner", "greedy")
    giver.dumps_to, giver.kind = receiver.name, "blatant"
    for a in (giver, receiver):
        pop.accounts[a.name] = a
    others = [n for n in pop.accounts if n.startswith("h")][:2]
    pop.pairs += [(giver.name, receiver.name, "blatant")] + [(x, o, "honest") for x in (giver.name, receiver.name)
                                                             for o in others]
    engine = bench.Engine()
    from engine.tools.quality import evaluate

    proj = IntegrityProjection(IntegrityStore(fakeredis.FakeRedis()), evaluate=evaluate)
    rng = random.Random(seed)
    events: list[Any] = []
    for rnd in range(rounds):
        for i, (a, b, _k) in enumerate(pop.pairs):
            events = engine.play(f"t{rnd}-{i}", pop.accounts[a], pop.accounts[b], rng)
            proj.observe(events)
    return pop, proj, events


@pytest.mark.slow
def test_a_blatant_dumper_pair_is_flagged_and_honest_pairs_are_not() -> None:
    from projections.metrics import INTEGRITY_FLAGS, REGISTRY

    flags_before = REGISTRY.get_sample_value("shuangkou_integrity_flags_total") or 0.0
    pop, proj, last = _play_population(rounds=8, seed=7)
    # the metric counts the pair once, when it crossed the threshold (not at every rescoring)
    assert INTEGRITY_FLAGS is not None
    assert REGISTRY.get_sample_value("shuangkou_integrity_flags_total") == flags_before + 1
    assert len(pop.pairs) == 6 + 1 + 1 + 4
    flagged = {e["pair"]: e for e in proj.store.ranked(DEFAULT_MIN_SCORE)}
    assert set(flagged) == {pair_key("dumper", "partner")}
    ev = flagged[pair_key("dumper", "partner")]
    assert ev["giver"] == "dumper" and ev["directions"][0]["signals"]["passive"]["k"] >= 6
    # evidence that points at replayable moves: the passes that let a play go, newest first
    assert {c["what"] for c in ev["concessions"]} >= {"passed_a_play"}
    assert all(c["match"].startswith("t") and c["seq"] > 0 for c in ev["concessions"])
    # idempotent: a redelivered match changes nothing
    before = proj.store.client.hgetall("sk:integrity:population")
    assert proj.observe(last) is None
    assert proj.store.client.hgetall("sk:integrity:population") == before


# -- the commands, on a real redis-server --------------------------------------------------------------
@pytest.mark.redis
@pytest.mark.slow
def test_integrity_commands(redis_server, real_redis, real_redis_store, capsys, monkeypatch) -> None:
    bench = _bench()

    from engine.store import keys
    from shuangkou.cli import main

    url = redis_server.url
    giver, receiver, other = (bench.Account("dumper", "normal"), bench.Account("partner", "greedy"),
                              bench.Account("bystander", "greedy"))
    giver.dumps_to, giver.kind = receiver.name, "blatant"
    engine = bench.Engine(real_redis_store)
    rng = random.Random(3)
    for i in range(8):
        engine.play(f"c{i}-dump", giver, receiver, rng)
        engine.play(f"c{i}-fair", giver, other, rng)
    assert main(["integrity", "scan", "--redis", url]) == 0
    assert "scored 16 match(es)" in capsys.readouterr().out
    assert main(["integrity", "scan", "--redis", url]) == 0  # nothing new: every entry was acknowledged
    assert "scored 0 match(es)" in capsys.readouterr().out

    assert main(["integrity", "report", "--redis", url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(p["a"], p["b"], p["giver"]) for p in report["pairs"]] == [("dumper", "partner", "dumper")]
    assert report["min_score"] == DEFAULT_MIN_SCORE
    pos = report["pairs"][0]["concessions"][0]
    assert pos["match"].endswith("-dump") and pos["seq"] > 0 and pos["what"]  # a replay position
    assert main(["integrity", "report", "--redis", url]) == 0
    text = capsys.readouterr().out
    assert text.startswith("1. dumper / partner") and "dumper → partner" in text
    assert main(["integrity", "report", "--redis", url, "--since", "1h"]) == 0  # the engine's clock is in 2023
    assert "no pair scores" in capsys.readouterr().out
    for bad in ("0", "-1", "nan", "inf", "high"):  # a pair at 0 is not indexed: no report could list it
        with pytest.raises(SystemExit) as usage:
            main(["integrity", "report", "--redis", url, "--min-score", bad])
        assert usage.value.code == 2 and "--min-score" in capsys.readouterr().err

    assert main(["integrity", "show", "partner", "dumper", "--redis", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["score"] >= DEFAULT_MIN_SCORE
    assert main(["integrity", "show", "dumper", "nobody", "--redis", url]) == 1
    assert "no scored match" in capsys.readouterr().err
    assert main(["integrity", "show", "dumper", "dumper", "--redis", url]) == 2

    assert main(["integrity", "dismiss", "dumper", "partner", "--reason", "family, checked", "--redis", url]) == 0
    assert "dismissed dumper / partner" in capsys.readouterr().out
    assert real_redis.ttl(keys.integrity_dismissed_key(pair_key("dumper", "partner"))) > 170 * 86_400
    assert main(["integrity", "report", "--redis", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pairs"] == []
    assert main(["integrity", "show", "dumper", "partner", "--redis", url]) == 0
    assert "family, checked (nothing new since: the score counts only later matches)" in capsys.readouterr().out
    # the flag comes back only on new evidence: matches after the review
    engine.clock.set_at_least(int(__import__("time").time() * 1000) + 60_000)
    for i in range(8):
        engine.play(f"n{i}-dump", giver, receiver, rng)
    assert main(["integrity", "scan", "--redis", url]) == 0
    capsys.readouterr()
    assert main(["integrity", "report", "--redis", url, "--json"]) == 0
    back = json.loads(capsys.readouterr().out)["pairs"]
    assert [p["pair"] for p in back] == [pair_key("dumper", "partner")]
    assert back[0]["dismissed"]["reason"] == "family, checked"
    assert main(["integrity", "show", "dumper", "partner", "--redis", url]) == 0
    assert "family, checked (new evidence since)" in capsys.readouterr().out
    assert back[0]["concessions"] and all(c["match"].startswith("n") for c in back[0]["concessions"])
    assert main(["integrity", "dismiss", "dumper", "partner", "--reason", "  ", "--redis", url]) == 2


def test_promtool_integrity_alert() -> None:
    need("promtool", "apt-get install prometheus")
    import subprocess

    out = subprocess.run(["promtool", "test", "rules", "integrity_test.yml"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent / "promtool", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


# -- the store: TTLs, the index, sampling --------------------------------------------------------------
def test_store_keys_expire_by_the_documented_policy_and_the_index_drops_expired_pairs() -> None:
    import fakeredis

    from engine.store import keys
    from projections.integrity.store import (DISMISS_TTL_S, PAIR_TTL_S, RECORD_TTL_S, IntegrityStore)

    store = IntegrityStore(fakeredis.FakeRedis())
    h = _history("dump", 20, 3)
    for rec in h["g"]:
        store.add(rec)
    assert store.add(h["g"][0]) is False  # once per match
    assert 0 < store.client.ttl(keys.integrity_records_key("g")) <= RECORD_TTL_S
    ev = store.score("g", "r")
    assert ev["score"] >= DEFAULT_MIN_SCORE
    ev["last_ts"] = 5
    assert store.keep(ev) is True and store.keep(ev) is False  # counted when it crosses, not again
    assert 0 < store.client.ttl(keys.integrity_pair_key(ev["pair"])) <= PAIR_TTL_S
    assert [e["pair"] for e in store.ranked(DEFAULT_MIN_SCORE)] == [pair_key("g", "r")]
    assert store.ranked(DEFAULT_MIN_SCORE, since_ms=6) == []
    store.dismiss("g", "r", "checked", now_ms=10)
    assert 0 < store.client.ttl(keys.integrity_dismissed_key(pair_key("g", "r"))) <= DISMISS_TTL_S
    assert store.ranked(0.0) == []
    store.keep(ev)
    store.client.delete(keys.integrity_pair_key(ev["pair"]))  # its evidence expired
    assert store.ranked(0.0) == [] and store.client.zcard(keys.INTEGRITY_SCORES) == 0


@given(st.text(min_size=1, max_size=12), st.booleans(),
       st.lists(st.integers(1, 200), min_size=0, max_size=40, unique=True))
def test_sampling_is_reproducible_and_bounded(mid: str, watched: bool, seqs: list[int]) -> None:
    from projections.integrity.store import BACKGROUND_EVERY, WATCH_DECISIONS, sample

    rec = {"m": mid, "players": ["a", "b"], "winner": "b", "dec": {"a": seqs, "b": seqs[:3]}}
    picks = sample(rec, watched)
    assert picks == sample(rec, watched)
    if watched:
        assert set(picks.values()) <= {"a"} and len(picks) == min(WATCH_DECISIONS, len(seqs))
    else:
        assert len(picks) <= 1
    assert all(seq in rec["dec"][p] for seq, p in picks.items())
    assert BACKGROUND_EVERY >= 2


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(rows, rows, st.booleans()), min_size=0, max_size=40))
def test_outcomes_and_quality_alone_never_flag_a_pair(draw_rows: list[tuple[dict[str, int], dict[str, int], bool]]) -> None:
    """A weak player loses heavily, holds and splits bombs and plays badly everywhere: without a
    choice signal (escape, trusteeship, a pass that let a play or a win go) no pair is flagged."""
    from projections.integrity.score import OUTCOMES_CAP

    quiet = {"esc": 0, "treq": 0, "wpass": 0, "vpass": 0}
    h = _records([({**ra, **quiet}, {**rb, **quiet}, w) for ra, rb, w in draw_rows])
    for rec in h["a"]:  # the worst regrets there are, against this partner only
        rec["q"] = {"a": [[1, 1.0, "pass", "3"]] * 3, "b": [[1, 1.0, "pass", "3"]] * 3}
    pop = population(h["a"])
    pop.regrets = [0.0] * 50
    ev = score_pair("a", "b", h, pop)
    assert ev["score"] < DEFAULT_MIN_SCORE
    for d in ev["directions"]:
        assert d["score"] <= OUTCOMES_CAP + CAPS["quality"] + 1e-9


@pytest.mark.redis
@pytest.mark.slow
def test_serve_integrity_scores_the_matches_of_every_bucket(redis_server, real_redis, tmp_path) -> None:
    """``serve --integrity`` (what compose's serve runs): its integrity projection follows the
    buckets the replica owns, as the ledger's runner does, and scores every finished match --
    here two replicas share the 16 buckets, one of them run with ``--no-projections``."""
    import subprocess

    from engine.match.events import PlayerSeated
    from engine.store.redis_store import RedisEventStore
    from projections.integrity.store import IntegrityStore
    from tests.processes import stop_group, wait_for

    root = Path(__file__).resolve().parents[1]
    url = redis_server.url
    procs, logs = [], []
    try:
        for name, extra in (("it-1", ["--integrity"]), ("it-2", ["--integrity", "--no-projections"])):
            log = tmp_path / f"{name}.log"
            logs.append(log)
            procs.append(subprocess.Popen([sys.executable, "-m", "shuangkou", "serve", "--redis", url,
                                           "--consumer", name, *extra], cwd=root, stdout=log.open("wb"),
                                          stderr=subprocess.STDOUT, start_new_session=True))
        for log in logs:
            wait_for(lambda log=log: "ready consumer" in log.read_text(errors="replace"), 60, "serve did not start",
                     logs)
        sim = subprocess.run([sys.executable, "-m", "shuangkou", "simulate", "--external", "--redis", url, "-n", "6",
                              "-c", "3", "--seed", "2", "--prefix", "integ-", "--json", "--no-progress"],
                             cwd=root, capture_output=True, text=True, timeout=300)
        assert sim.returncode == 0, sim.stdout[-2000:] + sim.stderr[-2000:]
        ids = json.loads(sim.stdout)["match_ids"]
        store, records = RedisEventStore(real_redis), IntegrityStore(real_redis)
        assert len({store.bucket_of(m) for m in ids}) > 1
        players = {m: [e.player for e in store.load(m) if isinstance(e, PlayerSeated)] for m in ids}

        def scored() -> bool:
            return all(any(r["m"] == m for r in records.records(p)) for m, ps in players.items() for p in ps)

        wait_for(scored, 60, "serve --integrity did not score every match", logs)
    finally:
        for p in procs:
            stop_group(p)
