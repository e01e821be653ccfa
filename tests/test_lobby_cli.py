"""``shuangkou replay --table ID`` and ``shuangkou matches --player P`` on tables stored by the
lobby's command service (issue 34 §5), on a real redis-server (tests/lobby_stack.py)."""

from __future__ import annotations

import json

import pytest

from engine.store import keys
from shuangkou.cli import main
from tests.lobby_stack import StackWorld

pytestmark = pytest.mark.redis


@pytest.fixture
def lived(redis_server, real_redis):
    """A table's whole life: a and b join and are paired, play a match (a wins), it is settled,
    the next match is offered, a leaves before its deal: the table closes, b waits again."""
    w = StackWorld(real_redis, bots=False)
    w.join("a")
    w.join("b")
    w.engine.drain()
    (table,) = w.tables()
    m1 = f"{table}-1"
    w.ready("a")
    w.ready("b")
    w.engine.drain()
    w.play_out(m1)
    w.engine.drain()
    w.settle()
    w.engine.drain()
    w.now += 1_000
    w.leave("a")
    w.engine.drain()
    w.check()
    return redis_server.url, table, w


def test_replay_table_prints_its_life(lived, capsys) -> None:
    url, table, _w = lived
    assert main(["replay", "--table", table, "--redis", url]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"table {table} (room points): a vs b"
    for text in ("a waits in the queue (joined)", "b waits in the queue (joined)", f"a and b paired at table {table}",
                 f"{table}-1: dealt", f"{table}-1: finished", f"{table}-1: settled a +", f"next match {table}-2",
                 f"{table}-2: ended before the deal", "table closed: left; removed a (left); back to the queue: b",
                 "b waits in the queue again: their opponent left"):
        assert text in out, text
    assert f"match {table}-1: finished, a won" in out
    assert lines[-1] == "closed: left"


def test_replay_table_names_a_player_who_goes_by_a_display_name(lived, capsys, real_redis) -> None:
    from engine.store import keys

    url, table, _w = lived
    real_redis.hset(keys.NAMES_KEY, "a", "小明")
    try:
        assert main(["replay", "--table", table, "--redis", url]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[:2] == ["players: a (小明) · b", f"table {table} (room points): a vs b"]
    finally:
        real_redis.delete(keys.NAMES_KEY)


def test_replay_table_json_and_an_unknown_table(lived, capsys) -> None:
    url, table, w = lived
    assert main(["replay", "--table", table, "--redis", url, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["table"], r["room"], r["players"], r["status"], r["close_reason"]) == (table, "points", ["a", "b"],
                                                                                     "closed", "left")
    assert [m["match"] for m in r["matches"]] == [f"{table}-1", f"{table}-2"]
    assert r["matches"][0]["winner"] == "a" and r["problems"] == []
    assert [s["seq"] for s in r["steps"] if s["stream"] == "table"] == list(range(1, r["event_count"] + 1))
    assert main(["replay", "--table", "nope", "--redis", url]) == 1
    assert "no such table" in capsys.readouterr().err


def test_matches_for_a_player_lists_their_tables(lived, capsys) -> None:
    url, table, _w = lived
    assert main(["matches", "--redis", url, "--player", "b", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    tables = [r for r in rows if r.get("kind") == "table"]
    assert [(t["table"], t["status"], t["matches"]) for t in tables] == [(table, "closed", [f"{table}-1", f"{table}-2"])]
    assert f"{table}-1" in {r["match_id"] for r in rows if "match_id" in r}  # the one b played
    assert main(["matches", "--redis", url, "--player", "nobody", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["matches", "--redis", url, "--player", "a"]) == 0
    assert f"table {table}" in capsys.readouterr().out


def test_table_life_doctests() -> None:
    import doctest

    from engine.tools import table_life

    assert doctest.testmod(table_life).failed == 0


def test_archive_takes_a_closed_table_with_its_matches(redis_server, real_redis, tmp_path, capsys) -> None:
    from engine.service.lobby_notes import write_table_info
    from engine.tools.archive import read_table_archive

    w = StackWorld(real_redis, bots=False)
    for p in ("a", "b", "c", "d"):
        w.join(p)
    w.engine.drain()
    first, second = sorted(w.tables())
    for p in ("a", "b"):
        w.ready(p)
    w.engine.drain()
    w.play_out(f"{first}-1")
    w.engine.drain()
    w.leave("a")  # between the finish and the settlement: the settlement closes the table
    w.engine.drain()
    w.settle()
    w.engine.drain()
    assert w.engine.table(first).status == "closed" and w.engine.table(second).status == "seated"
    buckets = w.lobby_store.buckets
    pipe = real_redis.pipeline(transaction=False)  # the read models the lobby's feed follower writes
    for t in (first, second):
        write_table_info(pipe, keys.table_info_key(t, buckets), w.engine.table(t))
    pipe.execute()
    url = redis_server.url
    assert main(["archive", "--older-than", "0", "--to", str(tmp_path), "--redis", url, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["archived"] == [f"{first}-1"] and rep["tables_archived"] == [first]  # the open one stays
    assert sorted(w.lobby_store.table_ids()) == [second]
    # the archived table's read model goes with it; the open one's stays
    assert not real_redis.exists(keys.table_info_key(first, buckets))
    assert real_redis.hget(keys.table_info_key(second, buckets), "status") == b"seated"
    (path,) = tmp_path.glob("table-*.jsonl")
    head, events = read_table_archive(path)
    assert (head["table"], head["matches"], head["close_reason"]) == (first, [f"{first}-1"], "left")
    assert events[0].type == "TableOpened" and events[-1].type == "TableClosed"
    assert main(["replay", "--table", first, "--redis", url]) == 1  # gone from Redis
    assert "--archive DIR" in capsys.readouterr().err  # … and where to look for it
    # read back from the archive, with its match (found by a new user's play of 2026-12-06)
    assert main(["replay", "--table", first, "--archive", str(tmp_path)]) == 0
    life = capsys.readouterr().out
    assert first in life and f"{first}-1" in life and "left" in life
    assert main(["replay", "--table", first, "--archive", str(tmp_path), "--redis", url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["problems"] == [] and [m["match"] for m in report["matches"]] == [f"{first}-1"]
    assert report["matches"][0]["phase"] == "finished"
    # a table's archive given as a match's events says which command reads it
    assert main(["replay", "--events", str(path)]) == 2
    assert "replay --table ID --archive DIR" in capsys.readouterr().err
    assert main(["replay", "--table", "nope", "--archive", str(tmp_path)]) == 1


def test_archive_takes_a_rooms_old_queue_events_and_replay_reads_them_back(lived, real_redis, tmp_path,
                                                                          capsys) -> None:
    """A room's queue keeps every match it paired: ``shuangkou archive`` moves the events
    older than the cut-off (up to the queue's snapshot) to a ``queue-`` file, the live queue
    goes on from the snapshot, and a table's replay reads its queue part back from the file."""
    from engine.lobby import commands as lc
    from engine.lobby.replay import replay_queue
    from engine.service.rooms import RedisRooms
    from engine.tools.archive import read_queue_archive

    url, table, w = lived
    RedisRooms(real_redis).add("points", w.cfg)
    assert main(["replay", "--table", table, "--redis", url]) == 0
    before = capsys.readouterr().out
    version = w.lobby_store.version("queue:points")
    snap = w.lobby_store.load_snapshot("queue:points")
    assert snap is not None and version - 3 < snap.version <= version  # saved every 3 events (tests/lobby_stack.py)
    assert main(["archive", "--older-than", "0", "--to", str(tmp_path), "--redis", url, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    archived = read_queue_archive(tmp_path, "points")
    assert rep["queue_events_archived"] == {"points": len(archived)} and archived
    assert [e.seq for e in archived] == list(range(1, len(archived) + 1)) and archived[-1].seq <= snap.version
    assert w.lobby_store.first_kept("queue:points") == len(archived) + 1
    assert w.lobby_store.version("queue:points") == version
    assert main(["replay", "--table", table, "--archive", str(tmp_path), "--redis", url]) == 0
    assert capsys.readouterr().out == before  # the table's life is whole again, from the file and the store
    # the live queue goes on from its snapshot
    w.crash()
    assert w.engine.submit(lc.Join(command_id="c-again", room="points", player="a")).committed
    assert w.engine.queue("points") == replay_queue("points", archived + w.lobby_store.load("queue:points"))
    # a second run takes what is old by now, in a file of its own: nothing twice, nothing lost
    w.now += 1_000
    for p in ("b", "a"):
        w.leave(p)
    w.engine.drain()
    assert main(["archive", "--older-than", "0", "--to", str(tmp_path), "--redis", url, "--json"]) == 0
    more = json.loads(capsys.readouterr().out)["queue_events_archived"]["points"]
    again = read_queue_archive(tmp_path, "points")
    assert more > 0 and len(list(tmp_path.glob("queue-*.jsonl"))) == 2 and again[:len(archived)] == archived
    assert [e.seq for e in again + w.lobby_store.load("queue:points")] == list(range(1, w.lobby_store.version(
        "queue:points") + 1))


def test_replay_says_when_a_tables_queue_part_was_archived_and_not_given(lived, capsys, tmp_path) -> None:
    from engine.tools.archive import archive_queues

    url, table, w = lived
    assert archive_queues(w.lobby_store, ["points"], tmp_path, 0, w.now + 1)[0]
    assert main(["replay", "--table", table, "--redis", url]) == 0
    out = capsys.readouterr()
    assert "a waits in the queue (joined)" not in out.out
    assert "lacks its events 1-" in out.err and "add --archive DIR" in out.err
    assert main(["replay", "--table", table, "--redis", url, "--archive", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "a waits in the queue (joined)" in out.out and out.err == ""


def test_two_archive_runs_at_once_lose_no_queue_event(lived, tmp_path) -> None:
    """A slower run that read the queue before a faster one trimmed it writes its own,
    shorter file beside the faster one's and trims nothing more: every event is in a file
    or in the store."""
    from engine.tools import archive as archive_mod

    _url, _table, w = lived
    stale = w.lobby_store.load("queue:points")
    early = w.lobby_store.trim_point("queue:points", 10**9) - 3  # where the slower run stopped (an older snapshot)
    assert early > 0

    class Slow:  # what the slower run saw before the faster one ran
        def __getattr__(self, name):
            return getattr(w.lobby_store, name)

        def load(self, aggregate, after=0):
            return [e for e in stale if e.seq > after]

        def trim_point(self, aggregate, through):
            return min(early, through)

    fast = archive_mod.archive_queues(w.lobby_store, ["points"], tmp_path, 0, w.now + 1)[0]
    slow = archive_mod.archive_queues(Slow(), ["points"], tmp_path, 0, w.now + 1)[0]
    assert fast[0][1] > early and slow == []  # the slower run wrote its file, trimmed nothing more
    assert len(list(tmp_path.glob("queue-*.jsonl"))) == 2 and not list(tmp_path.glob("*.tmp"))
    kept = w.lobby_store.load("queue:points")
    archived = archive_mod.read_queue_archive(tmp_path, "points")
    assert [e.seq for e in archived + kept] == list(range(1, w.lobby_store.version("queue:points") + 1))


def test_archive_leaves_a_queue_whose_snapshot_this_build_cannot_read(lived, tmp_path) -> None:
    from engine.store.base import Snapshot
    from engine.tools.archive import archive_queues

    _url, _table, w = lived
    version = w.lobby_store.version("queue:points")
    w.client.delete(keys.lobby_snapshot_key("queue:points"))
    assert w.lobby_store.save_snapshot("queue:points", Snapshot(version, b"\x00 another codec"))
    assert archive_queues(w.lobby_store, ["points"], tmp_path, 0, w.now + 1) == ([], 0)
    assert w.lobby_store.first_kept("queue:points") == 1 and not list(tmp_path.glob("queue-*"))
    w.crash()
    assert w.engine.queue("points").version == version  # the whole stream, folded
