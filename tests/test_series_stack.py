"""A private table's series on the real stack (issue 39 §1, §9): the series service
(engine/service/series.py) on a real redis-server through the lobby's store and append
script, with a code index; its hands real matches (the real match service, a room config
marked private) settled by the real projection runner into the real ledger, the series told
by its process managers (engine/lobby/series_managers.py); then the tools:
``shuangkou replay --series ID``, ``shuangkou matches --player P``, ``shuangkou archive``."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from engine.lobby import series_commands as sc
from engine.lobby import series_managers as sm
from engine.lobby.series import check_series_stream, replay_series
from engine.lobby.series_events import series_aggregate
from engine.match import commands as mc
from engine.service.series import CODE_ALPHABET, SeriesService, rejection_code
from engine.service.series_notes import outcome_messages, resync, settled_series
from engine.service.service import MatchService
from engine.store import keys
from engine.store.lobby_store import RedisLobbyStore
from engine.store.redis_store import RedisEventStore
from projections.ledger import RedisLedger
from projections.runner import ProjectionRunner, RedisFeed
from shuangkou.cli import main
from tests.lobby_stack import room_config

pytestmark = pytest.mark.redis


class SeriesStack:
    """A series service and a match service on one Redis client; the clock is ``now``."""

    def __init__(self, client: Any):
        self.client = client
        self.now = 1_000_000
        self.cfg = room_config(private_join_seconds=300, end_vote_seconds=30)
        self.rooms = {self.cfg.name: self.cfg}
        self.store = RedisEventStore(client)
        self.lobby = RedisLobbyStore(client)
        self.ledger = RedisLedger(client)
        self.matches = MatchService(self.store, clock=lambda: self.now, rng=random.Random(7), rooms=self.rooms,
                                    balances=self.ledger, deal_on_ready=False)
        self.feed = RedisFeed(client, consumer="series-test", claim_idle_ms=None)
        self.feed.ensure_groups()
        self.projections = ProjectionRunner(self.store, self.ledger, self.feed)
        self.series = SeriesService(self.lobby, clock=lambda: self.now, rooms=self.rooms,
                                    bot_ids=lambda: "bot-1")
        self.told: dict[str, list[dict[str, Any]]] = {}
        self.ids = 0

    def cid(self) -> str:
        self.ids += 1
        return f"c{self.ids}"

    def tell(self, out: Any) -> Any:
        for p, m in outcome_messages(out):
            self.told.setdefault(p, []).append(m)
        return out

    def run(self, command: sc.SeriesCommand) -> Any:
        return self.tell(self.series.execute(command))

    def play_hand(self, sid: str, n: int, winner_first: bool = True, escape: str | None = None) -> str:
        """Hand ``n``: a real match ``<series>-<n>`` created with the room's private config,
        both seated and ready, a one-card deal, one play (or an escape); its deal starts the
        hand, the ledger's settlement settles it."""
        s = self.series.state(sid)
        match = f"{s.table}-{n}"
        run = self.matches.execute
        run(mc.CreateMatch(command_id=f"create:{match}", match_id=match, config=self.cfg.private_record()))
        for p in s.players:
            run(mc.Sit(command_id=f"sit:{match}:{p}", match_id=match, player=p))
        for p in s.players:
            run(mc.Ready(command_id=f"ready:{match}:{p}", match_id=match, player=p))
        out = run(mc.Deal(command_id=f"deal:{match}", match_id=match, hands=((0,), (1,)),
                          first=0 if winner_first else 1))
        for c in sm.from_match(self.series.state(sid), match, out.events):
            self.run(c)
        m = self.matches.load_state(match)
        if escape is not None:
            run(mc.Escape(command_id=f"escape:{match}", match_id=match, player=escape))
        else:
            seat = m.seat(m.turn)
            run(mc.Play(command_id=f"play:{match}", match_id=match, player=seat.player, cards=seat.hand))
        while self.projections.run_once():
            pass
        settlement = self.ledger.settlement(match)
        assert settlement is not None
        self.run(sm.settle_hand(self.series.state(sid), match, settlement.scores, settlement.winner,
                                self.store.load(match)))
        return match


@pytest.fixture
def stack(redis_server, real_redis) -> SeriesStack:
    return SeriesStack(real_redis)


@pytest.fixture
def played(stack: SeriesStack) -> tuple[SeriesStack, str]:
    """a opens a 4-hand table, b joins by its code; hand 1 (a wins); b asks to end and a
    refuses; hand 2 is dealt, a asks to end during it and b agrees: the series is dissolved
    at hand 2's settlement."""
    w = stack
    created = w.tell(w.series.create("create-1", "a", "points", 4))
    assert created.committed
    sid, code = created.state.series, created.state.code
    assert w.tell(w.series.join(w.cid(), "b", code.lower())).committed
    w.play_hand(sid, 1)
    assert w.run(sc.RequestEnd(command_id=w.cid(), series=sid, player="b")).committed
    assert w.run(sc.VoteEnd(command_id=w.cid(), series=sid, player="a", agree=False)).committed
    s = w.series.state(sid)
    match = f"{s.table}-2"
    w.matches.execute(mc.CreateMatch(command_id="x", match_id=match, config=w.cfg.private_record()))
    for p in s.players:
        w.matches.execute(mc.Sit(command_id=f"s{p}", match_id=match, player=p))
        w.matches.execute(mc.Ready(command_id=f"r{p}", match_id=match, player=p))
    dealt = w.matches.execute(mc.Deal(command_id="d2", match_id=match, hands=((0,), (1,)), first=1))
    for c in sm.from_match(w.series.state(sid), match, dealt.events):
        assert w.run(c).committed
    assert w.run(sc.RequestEnd(command_id=w.cid(), series=sid, player="a")).committed
    assert w.run(sc.VoteEnd(command_id=w.cid(), series=sid, player="b", agree=True)).committed
    assert w.series.state(sid).status == "playing"  # the running hand is played out first
    m = w.matches.load_state(match)
    seat = m.seat(m.turn)
    w.matches.execute(mc.Play(command_id="p2", match_id=match, player=seat.player, cards=seat.hand))
    while w.projections.run_once():
        pass
    st = w.ledger.settlement(match)
    assert st is not None
    assert w.run(sm.settle_hand(w.series.state(sid), match, st.scores, st.winner, w.store.load(match))).committed
    return w, sid


def test_a_dissolved_series_is_stored_settled_and_told(played: tuple[SeriesStack, str]) -> None:
    w, sid = played
    s = w.series.state(sid)
    events = w.lobby.load(series_aggregate(sid))
    assert replay_series(sid, events) == s and check_series_stream(events) == []
    assert (s.status, s.reason, len(s.played)) == ("finished", "dissolved", 2)
    ledger = {}
    for h in s.played:
        st = w.ledger.settlement(h.match)
        assert st is not None
        for p, x in st.scores.items():
            ledger[p] = ledger.get(p, 0) + x
    assert s.final is not None and s.final.totals == ledger  # the totals are the ledger's settlements
    assert settled_series(s) == {"series_id": sid, "hand": 2, "hands": 4, "totals": ledger}
    # the players were told: the vote, its outcome, the standings
    states = [m["state"] for m in w.told["b"]]
    assert states == ["vote", "vote_refused", "vote", "vote_passed", "finished"]
    assert w.told["a"][0]["kind"] == "private_table" and w.told["a"][0]["link"] == f"/t/{s.code}"
    fin = w.told["a"][-1]
    assert fin["reason"] == "dissolved" and fin["standings"]["totals"] == ledger
    assert resync(s, "a")[0]["state"] == "finished"
    # keys under the series' bucket tag and the code's: never {lobby}
    b = keys.bucket_of(sid)
    assert w.client.exists(f"sk:{{b{b}}}:s:{sid}:events")
    assert w.client.get(keys.code_key(s.code)) == sid.encode()
    assert not [k for k in w.client.keys("*") if b"{lobby}" in k]
    # the hands are private: no ladder rates them
    from projections.ratings import rated_match

    assert rated_match(w.store.load(s.played[0].match)) == "private"


def test_replay_series_prints_it_hand_by_hand_with_its_standings(played: tuple[SeriesStack, str], redis_server,
                                                                  capsys) -> None:
    w, sid = played
    url = redis_server.url
    assert main(["replay", "--series", sid, "--redis", url]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    s = w.series.state(sid)
    assert lines[0] == f"series {sid} (room points, 4 hands, table {s.code}): a vs b"
    for text in (f"a opened table {s.code} in room points for 4 hands", "b joined with the code",
                 f"hand 1 of 4 dealt: {sid}-1", "hand 1 settled: ", "b asked to end the series (vote 1",
                 "a refused", f"hand 2 of 4 dealt: {sid}-2", "a asked to end the series (vote 2",
                 "b agreed (the series ends after the running hand)", "hand 2 settled: ",
                 "series finished: dissolved", f"hand 1 {sid}-1: finished (out, ", f"hand 2 {sid}-2: finished",
                 "standings: totals a ", "hands won: a 1, b 1", "biggest bomb: none"):
        assert text in out, text
    assert lines[-1] == "finished: dissolved"
    assert main(["replay", "--series", sid, "--redis", url, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["series"], r["status"], r["reason"], r["players"], r["problems"]) == (sid, "finished", "dissolved",
                                                                                  ["a", "b"], [])
    assert r["standings"] == s.final.to_json()  # type: ignore[union-attr]
    assert [h["match"] for h in r["hands"]] == [f"{sid}-1", f"{sid}-2"]
    assert [x["match"] for x in r["standings"]["per_hand"]] == [f"{sid}-1", f"{sid}-2"]
    assert main(["replay", "--series", "s-none", "--redis", url]) == 1
    assert "no such series" in capsys.readouterr().err
    assert main(["replay", "--series", sid, "--table", "t1", "--redis", url]) == 2


def test_matches_lists_the_players_series_and_archive_takes_it_whole(played: tuple[SeriesStack, str],
                                                                     redis_server, capsys, tmp_path) -> None:
    from engine.tools.archive import read_series_archive

    w, sid = played
    url = redis_server.url
    s = w.series.state(sid)
    assert main(["matches", "--player", "b", "--redis", url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    (row,) = [r for r in rows if r.get("kind") == "series"]
    assert (row["series"], row["players"], row["hands"], row["hands_played"], row["reason"]) == (
        sid, ["a", "b"], 4, 2, "dissolved")
    assert row["totals"] == s.totals() and row["matches"] == [f"{sid}-1", f"{sid}-2"]
    assert main(["matches", "--player", "b", "--redis", url]) == 0
    assert f"series {sid}" in capsys.readouterr().out
    assert main(["matches", "--player", "z", "--redis", url, "--json"]) == 0
    assert [r for r in json.loads(capsys.readouterr().out) if r.get("kind") == "series"] == []

    assert main(["archive", "--older-than", "0", "--to", str(tmp_path), "--redis", url, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert sorted(rep["archived"]) == [f"{sid}-1", f"{sid}-2"] and rep["series_archived"] == [sid]
    (path,) = tmp_path.glob("series-*.jsonl")
    head, events = read_series_archive(path)
    assert (head["series"], head["matches"], head["reason"]) == (sid, [f"{sid}-1", f"{sid}-2"], "dissolved")
    assert head["standings"] == s.final.to_json()  # type: ignore[union-attr]
    assert events[0].type == "SeriesCreated" and events[-1].type == "SeriesFinished"  # type: ignore[attr-defined]
    assert list(w.lobby.series_ids()) == [] and w.lobby.series_of_code(s.code) is None
    assert main(["replay", "--series", sid, "--redis", url]) == 1  # gone from Redis
    capsys.readouterr()
    assert main(["replay", "--series", sid, "--archive", str(tmp_path), "--json"]) == 0  # read from the archive
    report = json.loads(capsys.readouterr().out)
    assert report["problems"] == [] and report["series"] == sid
    assert main(["replay", "--events", str(path)]) == 2
    assert "replay --series ID --archive DIR" in capsys.readouterr().err


def test_the_service_refuses_by_code_and_a_retried_create_is_one_table(stack: SeriesStack) -> None:
    w = stack
    first = w.series.create("create-x", "a", "points", 8, spectators=True)
    again = w.series.create("create-x", "a", "points", 8, spectators=True)  # the gateway retried
    assert first.committed and again.duplicate and again.state.series == first.state.series
    code = first.state.code
    assert len(code) == 6 and set(code) <= set(CODE_ALPHABET)
    assert w.lobby.series_of_code(code) == first.state.series
    assert len([k for k in w.client.keys("sk:*:code:*")]) == 1  # the retry's code was freed
    assert rejection_code(w.series.join(w.cid(), "b", "ZZZZZ2" if code != "ZZZZZ2" else "ZZZZZ3")) == "unknown_table"
    assert rejection_code(w.series.join(w.cid(), "b", "short")) == "unknown_table"
    assert w.series.join(w.cid(), "b", code).committed
    assert rejection_code(w.series.join(w.cid(), "c", code)) == "table_full"
    assert rejection_code(w.series.create(w.cid(), "a", "nowhere", 4)) == "unknown_room"
    assert [k for k in w.client.keys("sk:*:code:*")] == [keys.code_key(code).encode()]  # refused: freed


def test_an_unclaimed_table_expires_on_its_timer_or_gets_a_bot(stack: SeriesStack) -> None:
    w = stack
    lone = w.series.create("c-lone", "a", "points", 4).state
    botted = w.series.create("c-bot", "d", "points", 4, bots=True).state
    timer = w.series.timer(lone.series)
    assert timer is not None and timer.command_id == f"timer:{lone.series}:join"
    assert rejection_code(w.series.execute(timer)) == "stale"  # early: refused
    w.now += 300_000
    assert w.series.execute(timer).committed
    assert w.series.state(lone.series).reason == "not_joined"
    assert rejection_code(w.series.join(w.cid(), "b", lone.code)) == "table_expired"
    bot_timer = w.series.timer(botted.series)
    assert bot_timer is not None and w.series.execute(bot_timer).committed
    s = w.series.state(botted.series)
    assert (s.status, s.players, s.bot) == ("playing", ("d", "bot-1"), "bot-1")
    w.play_hand(s.series, 1, escape="d")
    s = w.series.state(botted.series)
    assert (s.reason, len(s.played), dict(s.played[0].scores)["d"] < 0) == ("escaped", 1, True)


@pytest.fixture(scope="module")
def cluster_client():
    from engine.store.connect import connect
    from tests.cluster_support import require_redis_binaries, start_cluster

    require_redis_binaries()
    c = start_cluster(masters=3, replicas=0)
    client = connect(c.url)
    yield client
    client.close()
    c.stop()


def test_series_and_their_codes_on_a_redis_cluster(cluster_client) -> None:
    """Every append touches one slot (the series' bucket), the code index another: both work
    on a Cluster, over series spread on the masters."""
    cluster_client.flushall()
    store = RedisLobbyStore(cluster_client)
    clock = {"now": 1_000_000}
    svc = SeriesService(store, clock=lambda: clock["now"], rooms={"points": room_config()})
    made = [svc.create(f"c{i}", f"o{i}", "points", 4) for i in range(8)]
    assert all(m.committed for m in made)
    assert len({keys.bucket_of(m.state.series) for m in made}) > 1  # spread over buckets (and slots)
    for i, m in enumerate(made):
        assert svc.join(f"j{i}", f"f{i}", m.state.code).committed
        assert svc.execute(sc.RequestEnd(command_id=f"r{i}", series=m.state.series, player=f"f{i}")).committed
        assert svc.execute(sc.VoteEnd(command_id=f"v{i}", series=m.state.series, player=f"o{i}",
                                      agree=True)).committed
    assert sorted(store.series_ids()) == sorted(m.state.series for m in made)
    first = made[0].state
    assert svc.state(first.series).reason == "dissolved"
    store.delete_series(first.series, first.code)
    assert store.series_of_code(first.code) is None and first.series not in set(store.series_ids())
    assert rejection_code(svc.join("again", "z", first.code)) == "unknown_table"


def test_the_series_timers_are_in_the_buckets_lobby_deadline_index(stack: SeriesStack) -> None:
    w = stack
    s = w.series.create("c-t", "a", "points", 4).state
    zkey, hkey = keys.series_keys_of_bucket(keys.bucket_of(s.series))
    assert zkey == keys.series_keys(s.series)[3]
    assert w.client.zscore(zkey, f"series:{s.series}") == s.join_deadline
    assert w.client.hget(hkey, f"series:{s.series}") == f"1|join|{s.join_deadline}".encode()
    (due,) = w.lobby.due(s.join_deadline)
    assert (due.aggregate, due.kind, due.version) == (f"series:{s.series}", "join", 1)
    assert w.lobby.due(s.join_deadline - 1) == []
    w.now = s.join_deadline
    (out,) = w.series.fire_due(w.now)
    assert out.state.reason == "not_joined" and w.client.zscore(zkey, f"series:{s.series}") is None
