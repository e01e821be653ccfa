"""Private tables' series in the live lobby of a serve replica (issue 39;
engine/service/series_lobby.py) on a real redis-server: CreateTable, JoinTable by code, the
hands with their ``settled.series`` totals, the final standings, the end by vote, the
refusals, the timers, a reconnect's resync."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.match import commands as mc
from engine.store import keys
from tests.test_lobby_worker import Stack, on_the_wire

pytestmark = pytest.mark.redis


class SeriesStack(Stack):
    def cmd(self, kind: str, player: str, cid: str, **fields: Any) -> None:
        c = {"type": kind, "command_id": cid, "player": player, **fields}
        bucket = keys.room_bucket(fields.get("room") or player)
        self.client.xadd(keys.lobby_inbox_key(bucket), {"c": json.dumps(c)})

    def told(self, player: str) -> list[dict[str, Any]]:
        out = []
        start = f"({self.seen[player]}" if player in self.seen else "-"
        for entry_id, f in self.client.xrange(keys.outbox_key(player), min=start):
            self.seen[player] = entry_id.decode()
            kind = f[b"kind"].decode()
            if kind in ("lobby", "settled", "private_table", "series"):
                out.append(on_the_wire(json.loads(f[b"m"])))
            elif kind == "ack":
                out.append({"kind": "ack", "command_id": f[b"command_id"].decode()})
            elif kind == "rejected":
                out.append({"kind": "rejected", **{k.decode(): v.decode() for k, v in f.items() if k != b"kind"}})
        return out

    def settle_rounds(self) -> None:
        for _ in range(6):  # the table hears the finish; the projections settle; the table hears that
            self.worker._retry_at = 0
            self.run()

    def play_hand(self, match: str, players: tuple[str, str], winner_seat: int = 0) -> None:
        for p in players:
            self.ready(p, match)
        self.matches.execute(mc.Deal(command_id=f"deal:{match}", match_id=match, hands=((0,), (1,)),
                                     first=winner_seat))
        self.run()
        m = self.matches.load_state(match)
        s = m.seat(m.turn)
        assert self.matches.execute(mc.Play(command_id=f"p:{match}", match_id=match, player=s.player,
                                            cards=s.hand)).accepted
        self.settle_rounds()


@pytest.fixture
def stack(real_redis) -> SeriesStack:
    return SeriesStack(real_redis)


def _open(stack: SeriesStack, hands: int = 4) -> dict[str, Any]:
    stack.cmd("CreateTable", "ann", "c1", room="points", hands=hands, spectators=False, bots=False)
    stack.run()
    created = stack.told("ann")[-1]
    assert created["kind"] == "private_table" and created["state"] == "created"
    return created


def _seated(stack: SeriesStack, created: dict[str, Any]) -> str:
    stack.cmd("JoinTable", "bob", "j1", code=created["code"])
    stack.run()
    bob = stack.told("bob")
    ann = stack.told("ann")
    assert [m["state"] for m in bob if m["kind"] == "lobby"] == ["seated"]
    assert [m["state"] for m in ann if m["kind"] == "lobby"] == ["seated"]
    match = bob[-1]["match"]
    assert match == f"{created['series_id']}-1" and ann[-1]["match"] == match
    return match


def test_a_table_is_created_with_a_code_and_a_link(stack: SeriesStack) -> None:
    created = _open(stack)
    assert len(created["code"]) == 6 and created["link"] == f"/t/{created['code']}"
    assert created["hands"] == 4 and created["command_id"] == "c1"
    assert stack.client.get(keys.player_series_key("ann")).decode() == created["series_id"]
    assert stack.client.hget(keys.queue_info_key("points"), "waiting") in (None, b"0")  # never in the queue


def test_a_friend_joins_by_code_and_the_hands_carry_the_running_totals(stack: SeriesStack) -> None:
    created = _open(stack)
    match = _seated(stack, created)
    sid = created["series_id"]
    assert stack.matches.load_state(match).config.private  # no ladder rates it
    totals: dict[str, int] = {"ann": 0, "bob": 0}
    for n in range(1, 5):
        match = f"{sid}-{n}"
        stack.play_hand(match, ("ann", "bob"), winner_seat=n % 2)
        ann = stack.told("ann")
        stack.told("bob")
        settled = next(m for m in ann if m["kind"] == "settled")
        for p, v in settled["scores"].items():
            totals[p] += v
        assert settled["series"] == {"series_id": sid, "hand": n, "hands": 4, "totals": totals}
        if n < 4:
            assert [m["state"] for m in ann if m["kind"] == "lobby"] == ["seated"]
    finished = [m for m in ann if m["kind"] == "series"]
    assert [(m["state"], m["reason"]) for m in finished] == [("finished", "completed")]
    assert [m["kind"] for m in ann] == ["settled", "series", "lobby"]  # the last hand's result, then the end
    standings = finished[0]["standings"]
    assert standings["totals"] == totals and len(standings["per_hand"]) == 4
    assert [(m["state"], m["reason"]) for m in ann if m["kind"] == "lobby"] == [("removed", "series_over")]
    assert stack.place("ann") == {} and stack.place("bob") == {}
    assert stack.client.get(keys.player_series_key("ann")) is None
    assert stack.matches.load_state(f"{sid}-5").version == 0  # no fifth hand


def test_a_vote_between_hands_that_passes_dissolves_the_series_and_closes_the_table(stack: SeriesStack) -> None:
    created = _open(stack)
    match = _seated(stack, created)
    stack.play_hand(match, ("ann", "bob"))
    stack.told("ann"), stack.told("bob")
    stack.cmd("RequestEnd", "ann", "r1")
    stack.run()
    vote = stack.told("bob")[-1]
    assert vote["kind"] == "series" and vote["state"] == "vote" and vote["by"] == "ann"
    assert stack.told("ann")[-1]["command_id"] == "r1"
    stack.cmd("VoteEnd", "bob", "v1", agree=True)
    stack.run()
    bob = stack.told("bob")
    assert [(m["kind"], m["state"]) for m in bob] == [("series", "vote_passed"), ("series", "finished"),
                                                       ("lobby", "removed")]
    assert bob[1]["reason"] == "dissolved" and bob[2]["reason"] == "series_over"
    assert stack.place("bob") == {}


def test_a_reconnect_gets_the_totals_and_the_open_vote(stack: SeriesStack) -> None:
    created = _open(stack)
    match = _seated(stack, created)
    stack.play_hand(match, ("ann", "bob"))
    stack.cmd("RequestEnd", "bob", "r1")
    stack.run()
    again = stack.worker.series.resync("ann")
    assert [m["state"] for m in again] == ["tally", "vote"]
    assert again[0]["hand"] == 1 and again[1]["by"] == "bob"


@pytest.mark.parametrize("case, code", [
    ("wrong code", "unknown_table"),
    ("third player", "table_full"),
    ("cancelled", "table_cancelled"),
    ("expired", "table_expired"),
])
def test_a_join_is_refused_with_its_own_code(stack: SeriesStack, case: str, code: str) -> None:
    created = _open(stack)
    join_code = created["code"]
    if case == "wrong code":
        join_code = "ZZZZZZ" if join_code != "ZZZZZZ" else "YYYYYY"
    elif case == "third player":
        _seated(stack, created)
    elif case == "cancelled":
        stack.cmd("CancelTable", "ann", "x1")
        stack.run()
        assert [(m["state"], m["reason"]) for m in stack.told("ann")] == [("finished", "cancelled")]
    elif case == "expired":
        stack.clock.now += 601_000
        stack.worker._timers_at = stack.worker._series_at = stack.worker._graces_at = 0
        stack.run()
        assert [(m["state"], m["reason"]) for m in stack.told("ann")] == [("finished", "not_joined")]
    stack.cmd("JoinTable", "cat", "j9", code=join_code)
    stack.run()
    refused = stack.told("cat")[-1]
    assert refused["kind"] == "rejected" and refused["code"] == code and refused["command_id"] == "j9"
    assert join_code not in refused.get("reason", "")


def test_a_series_command_from_nobody_at_a_table_is_refused(stack: SeriesStack) -> None:
    stack.cmd("RequestEnd", "zed", "r1")
    stack.cmd("CreateTable", "zed", "c1", room="points", hands=5)
    stack.run()
    assert [(m["kind"], m["code"]) for m in stack.told("zed")] == [("rejected", "not_seated"),
                                                                    ("rejected", "bad_command")]


def test_a_leave_before_the_deal_closes_the_private_table_and_abandons_the_series(stack: SeriesStack) -> None:
    created = _open(stack)
    _seated(stack, created)
    stack.send("Leave", "bob", "l1")  # on the room's channel, as the gateway sends a Leave
    stack.run()
    bob, ann = stack.told("bob"), stack.told("ann")
    assert ("lobby", "removed", "left") in [(m["kind"], m.get("state"), m.get("reason")) for m in bob]
    assert ("lobby", "removed", "opponent_left") in [(m["kind"], m.get("state"), m.get("reason")) for m in ann]
    for told in (ann, bob):
        assert [(m["state"], m["reason"]) for m in told if m["kind"] == "series"] == [("finished", "abandoned")]
    assert stack.place("ann") == {} and stack.place("bob") == {}
    assert stack.client.get(keys.player_series_key("bob")) is None


def test_an_escape_ends_the_hand_with_its_settlement_and_the_series_escaped(stack: SeriesStack) -> None:
    created = _open(stack)
    match = _seated(stack, created)
    for p in ("ann", "bob"):
        stack.ready(p, match)
    stack.matches.execute(mc.Deal(command_id=f"deal:{match}", match_id=match, hands=((0, 2), (1, 3)), first=0))
    stack.run()
    assert stack.matches.execute(mc.Escape(command_id="esc", match_id=match, player="bob")).accepted
    stack.settle_rounds()
    ann, bob = stack.told("ann"), stack.told("bob")
    settled = next(m for m in ann if m["kind"] == "settled")
    assert settled["series"]["hand"] == 1 and settled["series"]["totals"]["bob"] < 0  # the escaper pays
    finished = [m for m in ann if m["kind"] == "series"]
    assert [(m["state"], m["reason"]) for m in finished] == [("finished", "escaped")]
    assert [m["kind"] for m in ann][:2] == ["settled", "series"]
    assert ("removed", "escaped") in [(m["state"], m["reason"]) for m in bob if m["kind"] == "lobby"]
    assert ("removed", "series_over") in [(m["state"], m["reason"]) for m in ann if m["kind"] == "lobby"]
    assert stack.matches.load_state(f"{created['series_id']}-2").version == 0


def test_with_bots_a_bot_takes_the_empty_seat_when_the_join_time_runs_out(stack: SeriesStack) -> None:
    stack.cmd("CreateTable", "ann", "c1", room="points", hands=4, spectators=False, bots=True)
    stack.run()
    created = stack.told("ann")[-1]
    stack.clock.now += 601_000
    stack.worker._timers_at = stack.worker._series_at = stack.worker._graces_at = 0
    stack.run()
    seated = [m for m in stack.told("ann") if m["kind"] == "lobby"]
    assert [m["state"] for m in seated] == ["seated"] and seated[0]["bot_level"] is not None
    assert seated[0]["match"] == f"{created['series_id']}-1"
    (_stream, entries), = stack.client.xread({keys.bot_seats_key("points"): "0"})
    bot = entries[0][1][b"bot"].decode()
    assert keys.is_bot_id(bot) and entries[0][1][b"match"].decode() == seated[0]["match"]


def test_a_vote_passed_during_a_hand_ends_the_series_once_that_hand_is_settled(stack: SeriesStack) -> None:
    created = _open(stack)
    match = _seated(stack, created)
    for p in ("ann", "bob"):
        stack.ready(p, match)
    stack.matches.execute(mc.Deal(command_id=f"deal:{match}", match_id=match, hands=((0,), (1,)), first=0))
    stack.run()
    stack.cmd("RequestEnd", "bob", "r1")
    stack.cmd("VoteEnd", "ann", "v1", agree=True)
    stack.run()
    ann = stack.told("ann")
    assert [m["state"] for m in ann if m["kind"] == "series"] == ["vote", "vote_passed"]  # the hand goes on
    stack.told("bob")
    stack.cmd("RequestEnd", "ann", "r2")  # agreed already: accepted, nothing changes, answered
    stack.run()
    assert stack.told("ann") == [{"kind": "ack", "command_id": "r2"}] and stack.told("bob") == []
    m = stack.matches.load_state(match)
    s = m.seat(m.turn)
    assert stack.matches.execute(mc.Play(command_id="p", match_id=match, player=s.player, cards=s.hand)).accepted
    stack.settle_rounds()
    ann = stack.told("ann")
    assert [m["kind"] for m in ann] == ["settled", "series", "lobby"]
    assert ann[1]["state"] == "finished" and ann[1]["reason"] == "dissolved"
    assert len(ann[1]["standings"]["per_hand"]) == 1 and ann[2]["reason"] == "series_over"


def test_a_player_at_a_private_table_is_refused_a_public_join(stack: SeriesStack) -> None:
    """One place per player: an owner still waiting for the friend gets ``already_placed``; a
    player seated at a private table is told where they sit, as any already-placed Join."""
    created = _open(stack)
    stack.send("Join", "ann", "pj1")
    stack.run()
    refused = stack.told("ann")
    assert [(m["kind"], m.get("code"), m.get("command_id")) for m in refused] == [("rejected", "already_placed", "pj1")]
    assert created["code"] not in refused[0].get("reason", "")
    assert stack.place("ann") == {}
    assert stack.client.hget(keys.queue_info_key("points"), "waiting") in (None, b"0")
    match = _seated(stack, created)
    stack.send("Join", "bob", "pj2")
    stack.run()
    told = stack.told("bob")
    assert [(m["kind"], m["state"], m["reason"], m["match"], m["command_id"]) for m in told] == \
        [("lobby", "seated", "already_seated", match, "pj2")]
    assert stack.client.hget(keys.queue_info_key("points"), "waiting") in (None, b"0")


@pytest.mark.parametrize("kind", ["CreateTable", "JoinTable"])
def test_a_player_in_a_public_queue_or_another_series_cannot_take_a_private_seat(stack: SeriesStack,
                                                                                  kind: str) -> None:
    created = _open(stack)
    stack.send("Join", "cat", "q1")
    stack.run()
    assert [m["state"] for m in stack.told("cat")] == ["queued"]
    fields = {"room": "points", "hands": 4} if kind == "CreateTable" else {"code": created["code"]}
    stack.cmd(kind, "cat", "x1", **fields)
    stack.run()
    assert [(m["kind"], m.get("code")) for m in stack.told("cat")] == [("rejected", "already_placed")]
    assert stack.client.get(keys.player_series_key("cat")) is None
    stack.cmd(kind, "ann", "x2", **fields)  # the owner, already in a series: a second is refused
    stack.run()
    told = stack.told("ann")
    if kind == "CreateTable":
        assert [(m["kind"], m.get("code")) for m in told] == [("rejected", "already_placed")]
    else:
        assert told == [{"kind": "ack", "command_id": "x2"}]  # her own table's code: she sits there already
    assert stack.client.get(keys.player_series_key("ann")).decode() == created["series_id"]


def test_the_live_path_counts_tables_finishes_by_reason_and_votes_by_outcome(stack: SeriesStack) -> None:
    from projections.metrics import REGISTRY

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(f"shuangkou_{name}_total", {"config": "points", **labels}) or 0.0

    probes = [("private_tables_created", {}), ("private_tables_finished", {"reason": "dissolved"}),
              ("private_tables_finished", {"reason": "cancelled"}), ("series_votes", {"outcome": "refused"}),
              ("series_votes", {"outcome": "passed"}), ("series_votes", {"outcome": "timed_out"})]
    before = [value(n, **lb) for n, lb in probes]
    created = _open(stack)
    match = _seated(stack, created)
    stack.play_hand(match, ("ann", "bob"))
    for cid, agree in (("r1", False), ("r2", True)):
        stack.cmd("RequestEnd", "ann", cid)
        stack.run()
        stack.cmd("VoteEnd", "bob", f"v{cid}", agree=agree)
        stack.run()
    assert ("finished", "dissolved") in [(m["state"], m.get("reason")) for m in stack.told("bob")
                                         if m["kind"] == "series"]
    stack.cmd("CreateTable", "cat", "c9", room="points", hands=4)
    stack.run()
    stack.cmd("CancelTable", "cat", "x9")
    stack.run()
    after = [value(n, **lb) for n, lb in probes]
    assert [a - b for a, b in zip(after, before)] == [2, 1, 1, 1, 1, 0]


def test_commands_handled_together_still_give_a_player_one_place(stack: SeriesStack) -> None:
    """One place per player when the commands reach the lobby in one read, before the read
    models say where the first put them (engine/service/place_claims.py): a Join and a
    CreateTable, then two CreateTables: the first places the player, the next is refused
    ``already_placed``.  A refused command leaves no claim behind."""
    stack.send("Join", "dan", "b1")
    stack.cmd("CreateTable", "dan", "b2", room="points", hands=4, spectators=False, bots=True)
    stack.run()
    told = stack.told("dan")
    assert sorted((m["kind"], m.get("state") or "", m.get("code") or "") for m in told) == \
        [("lobby", "queued", ""), ("rejected", "", "already_placed")], told
    assert stack.client.get(keys.player_series_key("dan")) is None and stack.place("dan")["state"] == "queued"
    for cid in ("c1", "c2"):
        stack.cmd("CreateTable", "eve", cid, room="points", hands=4, spectators=False, bots=True)
    stack.run()
    told = stack.told("eve")
    assert sorted((m["kind"], m.get("state") or m.get("code")) for m in told) == \
        [("private_table", "created"), ("rejected", "already_placed")], told
    assert stack.client.get(keys.place_claim_key("eve")) is None  # the read model took over
    stack.cmd("JoinTable", "fay", "j1", code="ZZZZZZ")  # no such table: refused, nothing claimed
    stack.run()
    assert [m.get("code") for m in stack.told("fay")] == ["unknown_table"]
    assert stack.client.get(keys.place_claim_key("fay")) is None


def test_two_rooms_joined_together_seat_the_player_in_one(real_redis) -> None:
    """Join of two rooms in one read (or by two lobby threads): the second is refused
    ``already_placed`` while the first's read model is not written yet."""
    from tests.lobby_stack import room_config

    stack = SeriesStack(real_redis)
    stack.rooms.cfgs["wealth"] = room_config("wealth")
    stack.send("Join", "gus", "w1", room="points")
    stack.send("Join", "gus", "w2", room="wealth")
    stack.run()
    told = stack.told("gus")
    assert sorted((m["kind"], m.get("room") or "", m.get("code") or "") for m in told) == \
        [("lobby", "points", ""), ("rejected", "", "already_placed")], told
    assert stack.client.hget(keys.queue_info_key("wealth"), "waiting") in (None, b"0")
    stack.send("Leave", "gus", "w3", room="points")  # left: free to join elsewhere at once
    stack.run()
    stack.send("Join", "gus", "w4", room="wealth")
    stack.run()
    assert [(m["kind"], m.get("state"), m.get("room")) for m in stack.told("gus")][-1] == \
        ("lobby", "queued", "wealth")


def test_a_join_table_with_a_token_for_another_room_is_refused(stack: SeriesStack) -> None:
    """A JoinTable carrying the token's room (gateway/lobby.py ``send_series``) joins only a
    table of that room: ``not_allowed``, and the player is placed nowhere."""
    created = _open(stack)
    stack.cmd("JoinTable", "bob", "j1", code=created["code"], room="wealth")
    stack.run()
    assert [(m["kind"], m.get("code")) for m in stack.told("bob")] == [("rejected", "not_allowed")]
    assert stack.client.get(keys.player_series_key("bob")) is None
    assert stack.client.get(keys.place_claim_key("bob")) is None
    stack.cmd("JoinTable", "bob", "j2", code=created["code"], room="points")
    stack.run()
    assert [m["state"] for m in stack.told("bob") if m["kind"] == "lobby"] == ["seated"]


def test_a_create_table_sent_again_is_answered_open_or_not(stack: SeriesStack) -> None:
    """A CreateTable sent again with its command id (a client that lost the answer) gets the
    table's answer again while it is open, and an ``ack`` once the table has ended (cancelled
    here): never silence, which left the client waiting (the security review of 2026-12-06)."""
    created = _open(stack)
    stack.cmd("CreateTable", "ann", "c1", room="points", hands=4, spectators=False, bots=False)
    stack.run()
    again = stack.told("ann")
    assert [(m["kind"], m.get("code"), m["command_id"]) for m in again] == [("private_table", created["code"], "c1")]
    stack.cmd("CancelTable", "ann", "x1")
    stack.run()
    assert [(m["state"], m["reason"]) for m in stack.told("ann")] == [("finished", "cancelled")]
    stack.cmd("CreateTable", "ann", "c1", room="points", hands=4, spectators=False, bots=False)
    stack.run()
    assert stack.told("ann") == [{"kind": "ack", "command_id": "c1"}]
