"""Issue 11 §8 retention: ``shuangkou archive`` exports finished, settled matches
(events, settlement, ledger entries) and deletes them from Redis; replay and the
ledger's exactly-once keep working on the archive."""

from __future__ import annotations

import json

import pytest

from shuangkou.cli import main
from engine.store import keys
from engine.store.redis_store import RedisEventStore
from projections.ledger import RedisLedger
from projections.runner import reconcile
from projections.settlement import settle

pytestmark = pytest.mark.redis


def json_events(folder, mid):
    from engine.tools.archive import read_archive

    return read_archive(folder)[0][mid]


def _copy_matches(store, n: int) -> list[str]:
    from tests.strategies import MatchSpec, play_match

    ids = []
    for i in range(n):
        mid = f"arch-{i}"
        run = play_match(MatchSpec(seed=i, chaos=0.1), match_id=mid)
        for e in run.store.load(mid):
            store.append(mid, e.seq - 1, f"copy{e.seq}", [e], None)
        ids.append(mid)
    return ids


def test_archive_exports_deletes_and_replay_reads_the_archive(real_redis, redis_server, tmp_path, capsys):
    store = RedisEventStore(real_redis)
    ids = _copy_matches(store, 6)
    ledger = RedisLedger(real_redis)
    finished = [m for m in ids if settle(store.load(m)) is not None]
    assert len(finished) >= 3
    unsettled_finished = finished[-1]
    # one finished match is left unsettled (the projections have not got to it): it must stay in Redis
    reconcile(store, ledger, match_ids=[m for m in ids if m != unsettled_finished])
    balances = {p: ledger.balance(p, "points") for p in ("a", "b")}
    url = redis_server.url
    capsys.readouterr()
    assert main(["archive", "--older-than", "0", "--to", str(tmp_path / "arch"), "--redis", url, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert sorted(rep["archived"]) == sorted(finished[:-1])
    assert rep["skipped_unsettled"] == [unsettled_finished]
    for mid in finished[:-1]:
        b = keys.bucket_of(mid)
        assert not real_redis.exists(keys.events_key(mid, b), keys.commands_key(mid, b))
        assert not real_redis.sismember(keys.matches_key(b), mid)
        assert ledger.settlement(mid) is None and ledger.is_settled(mid)   # marker only
    assert real_redis.hlen("sk:{ledger}:settled") == 0  # the settlement JSON left Redis too
    assert {p: ledger.balance(p, "points") for p in ("a", "b")} == balances
    # exactly once after archiving: a late feed entry settles nothing again
    for mid in finished[:-1]:
        assert ledger.apply_settlement(mid, settle(json_events(tmp_path / "arch", mid))) is False
    assert {p: ledger.balance(p, "points") for p in ("a", "b")} == balances
    files = sorted((tmp_path / "arch").glob("*.jsonl"))
    assert len(files) == len(finished) - 1
    head = json.loads(files[0].read_text().splitlines()[0])
    assert head["ledger_entries"] and sum(e["delta"] for e in head["ledger_entries"]
                                          if e["kind"] == "settlement") == -sum(
        e["delta"] for e in head["ledger_entries"] if e["kind"] == "burned")
    # replay reads one archived file, and --all with the archive checks Redis and the archive together
    assert main(["replay", "--events", str(files[0])]) == 0
    capsys.readouterr()
    reconcile(store, ledger)  # settle the one left behind again
    # the folder also holds the tables' and the series' archive files (shuangkou archive writes
    # them there): not matches, not read as matches
    for name in ("table-0123456789abcdef-t1.jsonl", "series-0123456789abcdef-s1.jsonl"):
        (tmp_path / "arch" / name).write_text('{"kind": "table", "table": "t1"}\n', encoding="utf-8")
    assert main(["replay", "--all", "--redis", url, "--archive", str(tmp_path / "arch"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(r["match_id"] for r in out) == sorted(ids)
    archived_reports = [r for r in out if r["match_id"] in finished[:-1]]
    assert all("matches the replay" in " ".join(r["notes"]) for r in archived_reports)
    # a single archived match by id (deleted from Redis)
    assert main(["replay", finished[0], "--redis", url, "--archive", str(tmp_path / "arch")]) == 0
    # a second run archives the rest and nothing twice
    capsys.readouterr()
    assert main(["archive", "--older-than", "0", "--to", str(tmp_path / "arch"), "--redis", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["archived"] == [unsettled_finished]


def test_archive_keeps_recent_matches(real_redis, redis_server, tmp_path, capsys):
    store = RedisEventStore(real_redis)
    _copy_matches(store, 2)
    reconcile(store, RedisLedger(real_redis))
    assert main(["archive", "--older-than", "36500", "--to", str(tmp_path), "--redis", redis_server.url,
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["archived"] == []
    assert main(["archive", "--older-than", "-1", "--to", str(tmp_path), "--redis", redis_server.url]) == 2


def test_archived_matches_stay_findable(real_redis, redis_server, tmp_path, capsys):
    """Issue 22 §5: after ``archive``, ``replay``, ``verify-deal`` and ``export`` of an archived
    match say where it went (exit 1, not in the store) and ``matches`` lists it, marked, with
    ``--archived`` / ``--live`` filters; an unknown match is "no such match" (exit 1) everywhere."""
    store = RedisEventStore(real_redis)
    ids = _copy_matches(store, 4)
    ledger = RedisLedger(real_redis)
    finished = [m for m in ids if settle(store.load(m)) is not None]
    reconcile(store, ledger)
    url = redis_server.url
    arch = tmp_path / "arch"
    assert main(["archive", "--older-than", "0", "--to", str(arch), "--redis", url]) == 0
    gone = finished[0]
    file = ledger.archived(gone)
    assert file is not None and file.startswith(str(arch))
    capsys.readouterr()
    hints = {"replay": f"`shuangkou replay --events {file}`", "verify-deal": f"`shuangkou verify-deal --events {file}`",
             "export": "that file is its export"}
    for command, hint in hints.items():
        assert main([command, gone, "--redis", url]) == 1, command
        err = capsys.readouterr().err
        assert f"match {gone!r} was archived on " in err and f" UTC to {file}; {hint}" in err, err
        assert main([command, "no-such-id", "--redis", url]) == 1, command
        assert "no such match: 'no-such-id'" in capsys.readouterr().err
    assert main(["replay", "--events", file]) == 0  # the hint works
    capsys.readouterr()
    # matches: live and archived together, or one kind only
    assert main(["matches", "--redis", url, "--json"]) == 0
    rows = {r["match_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(ids)
    assert {m for m, r in rows.items() if r["archived"]} == set(finished)
    row = rows[gone]
    assert row["archive_file"] == file and row["archived_at"] and row["players"] == ["a", "b"]
    assert row["archive_readable"] is True
    assert row["winner"] is not None and row["settled"] is True
    for flag, expected in (("--archived", set(finished)), ("--live", set(ids) - set(finished))):
        assert main(["matches", "--redis", url, flag, "--json"]) == 0
        assert {r["match_id"] for r in json.loads(capsys.readouterr().out)} == expected, flag
    assert main(["matches", "--redis", url, "--player", "a", "--archived"]) == 0
    text = capsys.readouterr().out
    assert "[archived on " in text and f"to {file}]" in text and gone in text
    with pytest.raises(SystemExit) as usage:  # one or the other
        main(["matches", "--redis", url, "--archived", "--live"])
    assert usage.value.code == 2
    capsys.readouterr()
    # a file moved away: the match still lists, marked, without its players
    import shutil

    shutil.move(file, tmp_path / "moved.jsonl")
    assert main(["matches", "--redis", url, "--archived", "--json"]) == 0
    row = {r["match_id"]: r for r in json.loads(capsys.readouterr().out)}[gone]
    assert row["archived"] and row["players"] == [] and row["archive_file"] == file
    assert row["archive_readable"] is False and row["phase"] is None and row["settled"] is None  # not guessed
    assert main(["matches", "--redis", url, "--archived"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(gone))
    assert line == f"{gone}  [{row['archive_where']}; the file cannot be read here]", line
    assert main(["replay", gone, "--redis", url]) == 1
    assert f"match {gone!r} was archived to {file}" in capsys.readouterr().err


def test_an_abandoned_match_is_named_listed_and_archived(real_redis, redis_server, tmp_path, capsys):
    """Issue 22 §6: a match that ends before the deal (MatchAbandoned) -- replay names it (never
    "settlement ok"), matches shows it ``abandoned``, archive takes it (no settlement in its file)."""
    from engine.config import load_config
    from engine.match.commands import CreateMatch, Leave, Sit
    from engine.service.service import MatchService
    from engine.service.shuffle import seeded_random

    store = RedisEventStore(real_redis)
    service = MatchService(store, clock=lambda: 1_700_000_000_000, rng=seeded_random(1))
    cfg = load_config("points").to_record()
    for cmd in (CreateMatch(command_id="c1", match_id="ab-1", config=cfg),
                Sit(command_id="c2", match_id="ab-1", player="a"),
                Leave(command_id="c3", match_id="ab-1", player="a")):
        out = service.execute(cmd)
        assert out.rejection is None, out.rejection
    assert type(store.load("ab-1")[-1]).__name__ == "MatchAbandoned"
    url = redis_server.url
    capsys.readouterr()
    assert main(["replay", "ab-1", "--redis", url]) == 0
    out = capsys.readouterr().out
    assert "result: abandoned before the deal (left): nothing to settle" in out
    assert "rules of every play, settlement)" not in out  # never the finished match's "settlement ok"
    assert "check: ok (seq, match id; abandoned before the deal" in out
    assert main(["replay", "ab-1", "--redis", url, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["phase"] == "abandoned" and rep["abandoned"] == "left" and rep["problems"] == []
    assert main(["matches", "--redis", url, "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["phase"] == "abandoned" and row["abandoned"] == "left" and row["winner"] is None
    assert main(["matches", "--redis", url]) == 0
    assert "abandoned (left)" in capsys.readouterr().out
    assert main(["archive", "--older-than", "0", "--to", str(tmp_path), "--redis", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["archived"] == ["ab-1"]
    assert store.load("ab-1") == []
    file = RedisLedger(real_redis).archived("ab-1")
    assert file and json.loads(open(file).read().splitlines()[0])["settlement"] is None
    assert main(["matches", "--redis", url, "--archived", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["phase"] == "abandoned" and row["archived"] and row["settled"] is False
    assert main(["replay", "--events", file]) == 0
