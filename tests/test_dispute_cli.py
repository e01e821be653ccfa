"""Dispute tooling on the command line (issue 15): ``export``, ``matches`` and the
``replay`` text / JSON, on a real redis-server.

The matches are played by tests/strategies.play_match (timeouts, trusteeship,
disconnects, escapes among them) and copied into Redis; the ledger holds the
settlement of each finished one, as the projection would have written it.
"""

from __future__ import annotations

import json
import re

import pytest

from shuangkou.cli import main
from engine.match.events import event_from_dict
from engine.store.redis_store import RedisEventStore
from projections.ledger import RedisLedger
from projections.settlement import settle
from tests.strategies import MatchSpec, play_match

pytestmark = pytest.mark.redis


def _recast(events, names: dict[str, str], shift_ms: int):
    """The same match with other player names, ``shift_ms`` later."""
    out = []
    for e in events:
        d = e.model_dump(mode="json")
        for key in ("player", "winner", "loser"):
            if d.get(key) in names:
                d[key] = names[d[key]]
        if "cards_left" in d:
            d["cards_left"] = {names.get(p, p): n for p, n in d["cards_left"].items()}
        d["ts"] += shift_ms
        out.append(event_from_dict(d))
    return out


@pytest.fixture
def stored(redis_server, real_redis):
    """Eight matches in Redis (points and wealth, an hour apart, players p0..p4);
    the finished ones settled in the ledger."""
    store = RedisEventStore(real_redis)
    ledger = RedisLedger(real_redis)
    out = {}
    for n in range(8):
        mid = f"d{n}"
        run = play_match(MatchSpec(seed=100 + n, mode="points" if n % 2 == 0 else "wealth", chaos=0.2),
                         match_id=mid)
        events = _recast(run.store.load(mid), {"a": f"p{n % 4}", "b": f"p{n % 4 + 1}"}, n * 3_600_000)
        for e in events:
            store.append(mid, e.seq - 1, f"copy{e.seq}", [e], None)
        s = settle(events)
        if s is not None:
            ledger.apply_settlement(mid, s)
        out[mid] = (events, s)
    return redis_server.url, out


def _finished(out):
    return [(mid, ev, s) for mid, (ev, s) in out.items() if s is not None and s.kou != "escape"]


def test_export_then_replay_events_gives_the_same_report(stored, tmp_path, capsys) -> None:
    url, out = stored
    mid, events, s = _finished(out)[0]
    assert main(["export", mid, "--redis", url]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    header = json.loads(lines[0])
    assert header["export"] == "shuangkou-match" and header["match_id"] == mid
    assert header["settlement"]["scores"] == s.scores  # what the ledger stored
    assert [json.loads(x)["seq"] for x in lines[1:]] == [e.seq for e in events]
    f = tmp_path / "match.jsonl"
    f.write_text(text)
    assert main(["replay", mid, "--events", str(f), "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main(["replay", mid, "--redis", url, "--json"]) == 0
    from_redis = json.loads(capsys.readouterr().out)
    # --json carries the full event list, not its count
    assert from_file["events"] == from_redis["events"] == [e.model_dump(mode="json") for e in events]
    assert from_file["event_count"] == len(events)
    assert from_file["result"]["scores"] == from_redis["result"]["scores"] == s.scores
    assert from_file["steps"] == from_redis["steps"]


def test_export_to_a_file_and_an_unknown_match(stored, tmp_path, capsys) -> None:
    url, out = stored
    f = tmp_path / "m.jsonl"
    assert main(["export", "d0", "--redis", url, "--out", str(f)]) == 0
    assert f.read_text().startswith('{"export": "shuangkou-match"')
    assert main(["export", "nope", "--redis", url]) == 1
    assert "no such match" in capsys.readouterr().err


def test_replay_says_no_such_match(stored, capsys) -> None:
    url, _ = stored
    assert main(["replay", "nope", "--redis", url]) == 1
    cap = capsys.readouterr()
    assert "no such match" in cap.err and "not finished" not in cap.out + cap.err
    assert (cap.out + cap.err).count("no such match") == 1  # said once (it was said twice)
    assert main(["replay", "nope", "--redis", url, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["problems"] == ["no such match: 'nope'"]


def test_replay_text_has_times_turns_tricks_cards_left_and_the_formula(stored, capsys) -> None:
    url, out = stored
    mid, events, s = _finished(out)[0]
    assert main(["replay", mid, "--redis", url]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    plays = [x for x in lines if re.match(r"#\d+\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\s+\+\d+\.\ds  .* (plays|passes)", x)]
    n_turns = sum(1 for e in events if type(e).__name__ in ("CardsPlayed", "Passed"))
    assert len(plays) == n_turns  # every turn: time stamp and time per turn
    assert all("| left: " in x for x in plays)  # cards left after each play
    tricks = [x for x in lines if x.startswith("---- trick ")]
    n_tricks = 1 + sum(1 for e in events if type(e).__name__ == "Passed")
    assert len(tricks) in (n_tricks, n_tricks - 1)  # a trick after the last pass may be empty
    # the last play's cards-left line agrees with MatchFinished
    fin = events[-1]
    left = dict(p.split(" ") for p in plays[-1].split("| left: ")[1].split(", "))
    assert {p: int(n) for p, n in left.items()} == fin.cards_left
    b = s.breakdown
    assert f"X·a·b = {b['X']}·{b['a']}·{b['b']} = {b['win_term']}" in text
    assert b["contribution_formula"] in text
    for p, x in b["xiang"].items():
        assert f"effective xiang of {p}: {x['xiang']} ({x['source']})" in text
    assert "scores: " + ", ".join(f"{p} {v:+d}" for p, v in s.scores.items()) in text
    assert "stored settlement: matches the replay" in text


def test_matches_finds_a_player_by_display_name_and_shows_the_names(stored, capsys) -> None:
    """An operator knows the player as 小明, not by the token's id: ``--player 小明`` finds every
    player going by that name, and the listing names them beside their ids."""
    import redis as redis_py

    from engine.store import keys

    url, out = stored
    client = redis_py.Redis.from_url(url)
    client.hset(keys.NAMES_KEY, mapping={"p1": "小明", "p2": "Bob"})
    try:
        assert main(["matches", "--redis", url, "--player", "小明", "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert sorted(r["match_id"] for r in got) == ["d0", "d1", "d4", "d5"]  # p1's, as by id
        assert all(r["names"]["p1"] == "小明" for r in got)
        assert main(["matches", "--redis", url, "--player", "小明"]) == 0
        text = capsys.readouterr().out
        assert "p1 (小明)" in text and "no matches" not in text
        assert main(["matches", "--redis", url, "--player", "小红", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == []
    finally:
        client.delete(keys.NAMES_KEY)


def test_replay_names_the_players_who_go_by_a_display_name(stored, capsys) -> None:
    """The replay's lines name players by id (what the events hold); where a player goes by a
    display name that is not the id (a gateway's ``u-…`` id for a name it cannot use), a first
    line says whose id is whose, so an operator reads the lines below by name."""
    import redis as redis_py

    from engine.store import keys

    url, _out = stored
    assert main(["replay", "d1", "--redis", url]) in (0, 1)
    assert not capsys.readouterr().out.startswith("players:")  # nobody has a name: no line
    client = redis_py.Redis.from_url(url)
    client.hset(keys.NAMES_KEY, mapping={"p1": "小明", "p2": "p2"})
    try:
        assert main(["replay", "d1", "--redis", url]) in (0, 1)
        first = capsys.readouterr().out.splitlines()[0]
        assert first == "players: p1 (小明) · p2", first
        assert main(["replay", "d1", "--redis", url, "--json"]) in (0, 1)
        assert "players" not in json.loads(capsys.readouterr().out)  # the JSON is unchanged
    finally:
        client.delete(keys.NAMES_KEY)


def test_replay_events_reads_old_json_and_bad_jsonl(tmp_path, capsys) -> None:
    run = play_match(MatchSpec(seed=3), match_id="j1")
    events = run.store.load("j1")
    f = tmp_path / "old.json"
    f.write_text(json.dumps({"events": [e.model_dump(mode="json") for e in events]}))
    assert main(["replay", "j1", "--events", str(f), "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["event_count"] == len(events)
    g = tmp_path / "bad.jsonl"
    g.write_text('{"export": "shuangkou-match", "format": 1, "match_id": "j1"}\n{"type": "Nope"}\n')
    assert main(["replay", "--events", str(g)]) == 2
    err = capsys.readouterr().err.strip()
    assert "line 2: not a valid event" in err and "\n" not in err
    g.write_text('{"export": "shuangkou-match", "format": 9, "match_id": "j1"}\n')
    assert main(["replay", "--events", str(g)]) == 2
    assert "format 9 is not supported" in capsys.readouterr().err
    assert main(["replay", "zz", "--events", str(f)]) == 2
    assert "no such match" in capsys.readouterr().err


def test_matches_filters_by_player_room_and_time(stored, capsys) -> None:
    url, out = stored
    assert main(["matches", "--redis", url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["match_id"] for r in rows) == sorted(out)
    for r in rows:
        events, s = out[r["match_id"]]
        assert r["settled"] == (s is not None)
        assert r["scores"] == (s.scores if s else None)
        assert "hand" not in json.dumps(r)  # a listing, never cards
    assert main(["matches", "--redis", url, "--room", "wealth", "--json"]) == 0
    assert sorted(r["match_id"] for r in json.loads(capsys.readouterr().out)) == ["d1", "d3", "d5", "d7"]
    assert main(["matches", "--redis", url, "--player", "p1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert sorted(r["match_id"] for r in got) == ["d0", "d1", "d4", "d5"]
    assert main(["matches", "--redis", url, "--player", "p1", "--room", "points", "--json"]) == 0
    assert sorted(r["match_id"] for r in json.loads(capsys.readouterr().out)) == ["d0", "d4"]
    assert main(["matches", "--redis", url, "--player", "nobody-at-all"]) == 0
    assert capsys.readouterr().out.strip() == "no matches"
    t0 = min(r["started_ms"] for r in rows)
    assert [r["match_id"] for r in rows] == [f"d{n}" for n in range(7, -1, -1)]  # newest first
    assert main(["matches", "--redis", url, "--since", str(t0 + 5 * 3_600_000), "--json"]) == 0
    assert [r["match_id"] for r in json.loads(capsys.readouterr().out)] == ["d7", "d6", "d5"]
    from projections.timeline import format_ts
    iso = format_ts(t0 + 6 * 3_600_000).replace(" ", "T")
    assert main(["matches", "--redis", url, "--since", iso, "--json"]) == 0
    assert [r["match_id"] for r in json.loads(capsys.readouterr().out)] == ["d7", "d6"]
    assert main(["matches", "--redis", url, "--since", "next tuesday"]) == 2
    assert "--since" in capsys.readouterr().err
    assert main(["matches", "--redis", url]) == 0
    text = capsys.readouterr().out
    assert all(mid in text for mid in out)


def test_a_match_lists_who_sat_in_it_even_once_removed() -> None:
    """An abandoned match whose players were removed before the deal (not ready, R-13.2) still
    names them, so ``matches --player`` finds it for a dispute; ``removed`` says who was."""
    from shuangkou.cli.matches import summary
    from tests.test_decide import M
    from engine.match.commands import ReadyTimeout

    m = M()
    m.do(ReadyTimeout, version=m.state.version)
    row = summary("m", m.history, None)
    assert row["phase"] == "abandoned" and row["players"] == ["a", "b"] and sorted(row["removed"]) == ["a", "b"], row
