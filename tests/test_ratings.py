"""Ranked play: which matches are rated, the ladder's fold, seasons, the stores, the rebuild
(issue 40; docs/RANKED.md)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import ConfigError, load_config, parse_config
from engine.store import keys
from engine.match.events import (
    MatchAbandoned,
    MatchCreated,
    MatchFinished,
    PlayerEscaped,
    PlayerSeated,
)
from projections.ladders import (
    MemoryRatingStore,
    RatingProjector,
    RedisRatingStore,
    SeasonError,
    rebuild,
)
from projections.ratings import Ladder, RatedMatch, Skill, rated_match, soft_reset, tier_of
from projections.runner import MemoryFeed, ProjectionRunner
from projections.ledger import InMemoryLedger


def ranked_config(**over) -> dict:
    rec = load_config("points").to_record()
    rec.update({"name": "ranked", "ranked": True, "provisional_matches": 3}, **over)
    return rec


def match_events(mid: str, a: str, b: str, winner: str, ts: int, config: dict | None = None,
                 escaper: str | None = None, escape_reason: bool = False, abandoned: bool = False) -> list:
    cfg = ranked_config() if config is None else config
    loser = b if winner == a else a
    evs: list = [MatchCreated(match_id=mid, seq=1, ts=ts - 10, command_id="c1", config=cfg),
                 PlayerSeated(match_id=mid, seq=2, ts=ts - 9, command_id="c2", player=a, seat=0, balance=0,
                              level=0, base=5),
                 PlayerSeated(match_id=mid, seq=3, ts=ts - 8, command_id="c3", player=b, seat=1, balance=0,
                              level=0, base=5)]
    if abandoned:
        evs.append(MatchAbandoned(match_id=mid, seq=4, ts=ts, command_id="c4", reason="not_ready"))
        return evs
    if escaper is not None:
        evs.append(PlayerEscaped(match_id=mid, seq=len(evs) + 1, ts=ts - 1, command_id="c5", player=escaper,
                                 policy="forfeit" if escape_reason else "trustee"))
    evs.append(MatchFinished(match_id=mid, seq=len(evs) + 1, ts=ts, command_id="c6", winner=winner, loser=loser,
                             cards_left={a: 0 if winner == a else 5, b: 0 if winner == b else 5},
                             kou="escape" if escape_reason else "flat", reason="escape" if escape_reason else "out"))
    return evs


# ---- which matches count --------------------------------------------------------------------

RATED_TABLE = [
    # (case, kwargs, expected winner/loser or skip reason)
    ("a finished ranked match", {}, ("a", "b")),
    ("an abandoned match counts for nothing", {"abandoned": True}, "abandoned"),
    ("an unranked room", {"config": {**load_config("points").to_record()}}, "not_ranked"),
    ("a private table's match", {"config": ranked_config(private=True)}, "private"),
    ("an escape forfeit: the escaper loses", {"winner": "b", "escaper": "a", "escape_reason": True}, ("b", "a")),
    ("an escape to the trustee: the escaper loses although the trustee won", {"escaper": "a"}, ("b", "a")),
]


@pytest.mark.parametrize("case,kw,expect", RATED_TABLE, ids=[c for c, _, _ in RATED_TABLE])
def test_which_matches_are_rated(case, kw, expect):
    kw = dict(kw)
    winner = kw.pop("winner", "a")
    got = rated_match(match_events("m1", "a", "b", winner, 1000, **kw))
    if isinstance(expect, str):
        assert got == expect
    else:
        assert isinstance(got, RatedMatch)
        assert (got.winner, got.loser, got.room, got.finished_ms) == (*expect, "ranked", 1000)


def test_matches_against_bots_count_only_with_rate_bots():
    assert rated_match(match_events("m1", "a", "bot-3", "a", 1000)) == "bot"
    got = rated_match(match_events("m1", "a", "bot-3", "a", 1000, config=ranked_config(rate_bots=True)))
    assert isinstance(got, RatedMatch) and got.loser == "bot-3"


def test_unfinished_match_is_not_rated():
    assert rated_match(match_events("m1", "a", "b", "a", 1000)[:3]) == "not_finished"


# ---- the config keys (config check) ----------------------------------------------------------

def test_ranked_keys_are_checked():
    base = load_config("points").to_record()
    cfg = parse_config({**base, "name": "ranked", "ranked": True, "rate_bots": True, "provisional_matches": 5,
                        "match_window": 40, "match_window_per_second": 5, "match_max_wait_seconds": 30})
    assert (cfg.ranked, cfg.rate_bots, cfg.provisional_matches) == (True, True, 5)
    for bad, where in (({"rate_bots": True}, "rate_bots"), ({"ranked": True, "name": "a room"}, "name"),
                       ({"ranked": True, "match_window": -1}, "match_window"),
                       ({"ranked": "maybe"}, "ranked"), ({"provisional_matches": -2}, "provisional_matches")):
        with pytest.raises(ConfigError) as exc:
            parse_config({**base, **bad})
        assert any(p.startswith(where) for p in exc.value.problems), exc.value.problems


# ---- the fold -------------------------------------------------------------------------------

def test_winner_gains_loser_drops_and_provisional_flag():
    lad = Ladder("ranked", "s1")
    ch = lad.apply(RatedMatch("m1", "ranked", 5, "a", "b", provisional_matches=1))
    assert ch is not None
    assert ch.after["a"].rating > ch.before["a"].rating and ch.after["b"].rating < ch.before["b"].rating
    msg = ch.message("a")
    assert set(msg) == {"kind", "match", "room", "season", "before", "after", "provisional"}
    assert msg["before"] == {"rating": 1000, "tier": "bronze"} and msg["provisional"] is False
    assert lad.apply(RatedMatch("m1", "ranked", 5, "a", "b")) is None  # once per match


def test_tiers_from_the_ordinal():
    assert [tier_of(x) for x in (-5, 10, 15, 20, 25, 30)] == ["bronze", "silver", "gold", "platinum", "diamond",
                                                              "master"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from("abcd"), st.integers(0, 5)),
                min_size=1, max_size=15), st.randoms(use_true_random=False))
def test_any_arrival_order_folds_to_the_settlement_order(games, rnd):
    """Property: the live ladder, whatever order the matches reach it in, equals the ladder
    folded in settlement order (finish time, then match id)."""
    ms = [RatedMatch(f"m{i}", "r", t, a, b) for i, (a, b, t) in enumerate(games) if a != b]
    ordered = Ladder.build("r", "s", ms)
    shuffled = list(ms)
    rnd.shuffle(shuffled)
    live = Ladder("r", "s")
    for m in shuffled:
        live.apply(m)
    assert live.same(ordered) and live.players == ordered.players


def test_soft_reset_pulls_back_to_a_new_player():
    assert soft_reset(Skill(35.0, 2.0, 9), 1.0) == Skill()
    assert soft_reset(Skill(35.0, 2.0, 9), 0.0) == Skill(35.0, 2.0, 0)


# ---- the stores -----------------------------------------------------------------------------

@pytest.fixture(params=["memory", "redis"])
def ratings(request, fake_redis):
    return MemoryRatingStore() if request.param == "memory" else RedisRatingStore(fake_redis)


def test_seasons_start_end_list(ratings):
    s1 = ratings.start_season("s1", 1000)
    assert ratings.current() == s1
    s2 = ratings.start_season("s2", 2000, soft_reset=0.5)
    assert [(s.name, s.start_ms, s.end_ms) for s in ratings.seasons()] == [("s1", 1000, 2000), ("s2", 2000, None)]
    assert ratings.end_season(3000).end_ms == 3000 and ratings.current() is None
    assert s2.soft_reset == 0.5
    for call, code in ((lambda: ratings.start_season("s1", 4000), "exists"),
                       (lambda: ratings.start_season("a b", 4000), "bad_name"),
                       (lambda: ratings.start_season("s3", 4000, soft_reset=2), "bad_reset"),
                       (lambda: ratings.end_season(5000), "none_running")):
        with pytest.raises(SeasonError) as exc:
            call()
        assert exc.value.code == code


def test_store_folds_once_and_answers_the_leaderboard(ratings):
    ratings.start_season("s1", 0)
    proj = RatingProjector(ratings)
    games = [("m%02d" % i, "a", "b" if i % 3 else "c", "a", 100 + i) for i in range(12)]
    for mid, x, y, w, t in games:
        assert proj.project(match_events(mid, x, y, w, t)) is not None
    assert proj.project(match_events("m00", "a", "b", "a", 100)) is None  # redelivered: nothing changes
    if isinstance(ratings, MemoryRatingStore):
        ratings.display_names.update({"a": "Alice", "b": "Bob"})
        ratings.hidden.add("b")
    else:
        ratings.client.hset(keys.NAMES_KEY, mapping={"a": "Alice", "b": "Bob"})
        ratings.hide_name("b", True)
    board = ratings.leaderboard("ranked", "s1", limit=2, me="c")
    assert [e["player"] for e in board["entries"]] == ["a", "b"] or [e["player"] for e in board["entries"]] == ["a", "c"]
    top = board["entries"][0]
    assert set(top) == {"rank", "player", "name", "rating", "tier", "bot"}
    assert (top["rank"], top["name"]) == (1, "Alice")
    assert board["me"]["player"] == "c" and board["me"]["rank"] in (2, 3)
    assert [e["rank"] for e in board["me"]["neighbours"]] == [1, 2, 3]
    names = {e["player"]: e["name"] for e in board["me"]["neighbours"]}
    assert names["b"] is None  # b hides their name
    assert ratings.leaderboard("ranked", "s1", me="nobody")["me"] is None


def test_redis_store_equals_memory_store(fake_redis):
    mem, red = MemoryRatingStore(), RedisRatingStore(fake_redis)
    rng = random.Random(7)
    games = [RatedMatch(f"m{i}", "ranked", rng.randrange(50), *rng.sample("abcdef", 2)) for i in range(40)]
    for store in (mem, red):
        store.start_season("s1", 0)
    for m in games:  # the same arrival order (many out of settlement order)
        a, b = mem.apply(m, "s1"), red.apply(m, "s1")
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert a.message(m.winner) == b.message(m.winner)
    assert red.ladder("ranked", "s1").same(mem.ladder("ranked", "s1"))
    assert red.top("ranked", "s1", 0, 99) == mem.top("ranked", "s1", 0, 99)


def test_soft_reset_seeds_the_next_season(ratings):
    ratings.start_season("s1", 0)
    for i in range(5):
        ratings.apply(RatedMatch(f"m{i}", "ranked", 10 + i, "a", "b"), "s1")
    ratings.start_season("s2", 100, soft_reset=0.5)
    before = ratings.skill("ranked", "s1", "a")
    ch = ratings.apply(RatedMatch("n1", "ranked", 200, "b", "a"), "s2")
    assert ch is not None and ch.before["a"] == soft_reset(before, 0.5)
    assert ratings.skill("ranked", "s1", "a") == before  # the earlier season stays queryable


# ---- the live projection and the rebuild -------------------------------------------------------

def test_rebuild_equals_the_live_projection(fake_redis, fake_redis_store, capsys, monkeypatch):
    """Matches of two rooms and two seasons, with a bot, an escape and an abandoned one, settled by the
    projection runner from the bucket feeds (buckets in turn: not in finish order); the rebuild from
    the events equals the live ladders, through ``shuangkou ratings rebuild``."""
    ratings = RedisRatingStore(fake_redis)
    ratings.start_season("s1", 0)
    store = fake_redis_store
    rng = random.Random(3)
    cfg2 = ranked_config(name="ranked2")
    t = 1000
    for i in range(60):
        if i == 30:
            ratings.start_season("s2", t + 5, soft_reset=0.5)
        a, b = rng.sample(["p1", "p2", "p3", "p4", "bot-1"], 2)
        t += rng.choice([0, 7])
        evs = match_events(f"x{i:03d}", a, b, rng.choice([a, b]), t, config=cfg2 if i % 4 == 0 else None,
                           escaper=a if i % 7 == 0 else None, abandoned=i % 11 == 0)
        for e in evs:
            store.append(e.match_id, e.seq - 1, f"c{e.seq}", [e], None)
    runner = ProjectionRunner(store, InMemoryLedger(), MemoryFeed(store), ratings=RatingProjector(ratings))
    runner.drain()
    assert not runner.errors
    assert ratings.ladder("ranked", "s1").results  # something was rated
    for season in ("s1", "s2"):
        report = rebuild(store, ratings, season, write=False)
        assert report.same and all(report.same.values()), season
    from shuangkou.cli import main
    from shuangkou.cli import ratings_cmd  # noqa: F401

    monkeypatch.setattr("shuangkou.cli.serve.connect_redis", lambda url, opt: fake_redis)
    assert main(["ratings", "rebuild", "--season", "s2", "--json", "--redis", "redis://x"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["same"] is True and set(out["rooms"]) == {"ranked", "ranked2"}
    # a ladder changed behind the projection's back is found
    fake_redis.hset("sk:{rk:ranked:s2}:players", "p1", json.dumps([40.0, 1.0, 3]))
    assert main(["ratings", "rebuild", "--season", "s2", "--check", "--redis", "redis://x"]) == 1
    assert "DIFFERS" in capsys.readouterr().out
    assert main(["ratings", "rebuild", "--season", "nope", "--redis", "redis://x"]) == 1


def test_a_rebuild_after_an_archive_keeps_the_archived_matches(fake_redis, fake_redis_store, tmp_path, capsys,
                                                               monkeypatch):
    """``shuangkou archive`` deletes finished matches from Redis: a rebuild from what Redis holds
    then dropped their ratings, and wrote that ladder over the live one.  Now it writes nothing
    while a live ladder's rated match was not read again (exit 1), and ``--archive DIR`` reads
    them from the archive, whose tables' files beside them are not matches."""
    from engine.tools.archive import archive_matches
    from shuangkou.cli import main

    ratings = RedisRatingStore(fake_redis)
    ratings.start_season("s1", 0)
    store = fake_redis_store
    rng = random.Random(5)
    for i in range(12):
        a, b = rng.sample(["p1", "p2", "p3", "p4"], 2)
        for e in match_events(f"y{i:02d}", a, b, rng.choice([a, b]), 1_000 + 10 * i):
            store.append(e.match_id, e.seq - 1, f"c{e.seq}", [e], None)
    from projections.ledger import RedisLedger

    ledger = RedisLedger(fake_redis)  # its archived markers in Redis, as a deployment's
    ProjectionRunner(store, ledger, MemoryFeed(store), ratings=RatingProjector(ratings)).drain()
    live = ratings.ladder("ranked", "s1")
    assert len(live.results) == 12
    (tmp_path / "table-0123456789abcdef-t1.jsonl").write_text('{"table": "t1"}\n', encoding="utf-8")
    gone = archive_matches(store, ledger, tmp_path, older_than_ms=0, now_ms=10**13, limit=5).archived
    assert len(gone) == 5 and all(not store.load(m) for m in gone)
    monkeypatch.setattr("shuangkou.cli.serve.connect_redis", lambda url, opt: fake_redis)
    r = ["--season", "s1", "--redis", "redis://x"]
    assert main(["ratings", "rebuild", *r]) == 1
    out, err = capsys.readouterr()
    assert "5 rated match(es) of the live ladder have no events here" in out and "nothing written" in err
    assert ratings.ladder("ranked", "s1").same(live)  # the live ladder kept
    assert main(["ratings", "rebuild", *r, "--archive", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["written"] and report["rooms"]["ranked"] == {"players": 4, "matches": 12, "same": True,
                                                              "missing": 0}
    assert report["archived_not_read"] == 0 and ratings.ladder("ranked", "s1").same(live)
    # a ladder that is gone cannot name what it rated: the archived matches not read are counted
    for k in list(fake_redis.scan_iter(match="sk:{rk:ranked:s1}:*")):
        fake_redis.delete(k)
    assert main(["ratings", "rebuild", *r, "--json"]) == 1  # differs from the (empty) live one: written
    out, err = capsys.readouterr()
    rebuilt = json.loads(out)
    assert rebuilt["written"] and rebuilt["rooms"]["ranked"]["matches"] == 7
    assert rebuilt["archived_not_read"] == 5 and "5 archived match(es) were not read" in err


def test_every_tier_has_a_name_in_the_three_languages():
    from pathlib import Path

    from projections.ratings import TIERS

    root = Path(__file__).resolve().parents[1] / "gateway" / "static" / "i18n"
    for lang in ("en", "zh-Hans", "zh-Hant"):
        catalogue = json.loads((root / f"{lang}.json").read_text(encoding="utf-8"))
        assert [t for t, _ in TIERS] == ["bronze", "silver", "gold", "platinum", "diamond", "master"]
        for tier, _ in TIERS:
            assert catalogue.get(f"tier.{tier}"), (lang, tier)
    assert json.loads((root / "zh-Hant.json").read_text(encoding="utf-8"))["tier.bronze"] == "青銅"


def test_season_and_ratings_show_commands(fake_redis, capsys, monkeypatch):
    from shuangkou.cli import main

    monkeypatch.setattr("shuangkou.cli.serve.connect_redis", lambda url, opt: fake_redis)
    r = ["--redis", "redis://x"]
    assert main(["season", "end", *r]) == 1  # none running
    assert "no season is running" in capsys.readouterr().err
    assert main(["season", "start", "2026-12", "--json", *r]) == 0
    started = json.loads(capsys.readouterr().out)
    assert started["name"] == "2026-12" and started["end_ms"] is None and started["soft_reset"] == 1.0
    assert main(["season", "start", "bad name", *r]) == 2
    assert main(["season", "start", "2027-01", "--soft-reset", "1.5", *r]) == 2
    assert main(["season", "start", "2027-01", "--soft-reset", "0.5", *r]) == 0
    capsys.readouterr()
    assert main(["season", "list", "--json", *r]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in listed] == ["2026-12", "2027-01"] and listed[0]["end_ms"] == listed[1]["start_ms"]
    store = RedisRatingStore(fake_redis)
    store.apply(RatedMatch("m1", "ranked", listed[1]["start_ms"] + 1, "a", "b"), "2027-01")
    assert main(["ratings", "show", "ranked", "--json", *r]) == 0
    board = json.loads(capsys.readouterr().out)
    assert board["season"] == "2027-01" and [e["player"] for e in board["entries"]] == ["a", "b"]
    assert main(["ratings", "show", "ranked", "--season", "2026-12", "--json", *r]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == []  # the earlier season stays queryable
    assert main(["ratings", "show", "nowhere", *r]) == 1  # no such room: not an empty board
    assert "no room 'nowhere'" in capsys.readouterr().err
    from engine.service.rooms import RedisRooms, register_shipped

    register_shipped(RedisRooms(fake_redis))
    assert main(["ratings", "show", "points", *r]) == 1
    assert "'points' is not ranked" in capsys.readouterr().err
    assert main(["season", "end", *r]) == 0
    assert "2027-01" in capsys.readouterr().out


def test_ladder_keys_spread_over_the_cluster_by_their_own_tags():
    from redis.crc import key_slot

    from engine.store import keys

    one = {key_slot(keys.ladder_key("ranked", "s1", part).encode()) for part in ("players", "board", "results", "meta")}
    assert len(one) == 1  # one ladder: one slot (its fold is one script)
    many = {key_slot(keys.ladder_key(room, season, "board").encode())
            for room in ("ranked", "r2", "r3", "r4") for season in ("s1", "s2", "s3", "s4")}
    assert len(many) > 8  # sixteen ladders: many slots, no global tag


def test_a_fold_that_raced_another_projector_reads_again(fake_redis, monkeypatch):
    """Two projectors: while one folds a match that arrived out of order, the other folds another
    one (also out of order, so the ladder's last match stays the same); the first one's write is
    refused ('moved'), it reads again, and the ladder equals the fold in settlement order."""
    store = RedisRatingStore(fake_redis)
    store.start_season("s1", 0)
    ms = [RatedMatch("m5", "ranked", 50, "a", "b"), RatedMatch("m1", "ranked", 10, "c", "a"),
          RatedMatch("m2", "ranked", 20, "b", "c")]
    store.apply(ms[0], "s1")
    other = RedisRatingStore(fake_redis)
    real_ladder = store.ladder
    raced = []

    def ladder_then_race(room, season):
        lad = real_ladder(room, season)
        if not raced:
            raced.append(other.apply(ms[2], "s1"))  # lands between the read and the write
        return lad

    monkeypatch.setattr(store, "ladder", ladder_then_race)
    assert store.apply(ms[1], "s1") is not None and raced[0] is not None
    monkeypatch.undo()
    assert store.ladder("ranked", "s1").same(Ladder.build("ranked", "s1", ms))
