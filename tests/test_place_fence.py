"""A player's place never goes back (engine/store/place.lua, LobbyOutbox).

A room's queue and a table write a player's ``place`` from two feeds with no order between
them.  A feed entry handled again late -- by a follower that lost its bucket, or a write a
partition delayed -- used to write the place as it was then: a player who had left a table
was put back at it (and a Join of another room refused ``already_placed``), a seated one shown
queued or nowhere (docs/RELIABILITY.md "Findings").  Each place write now goes through
place.lua, which keeps each queue's and table's last seq and the tables that closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import fakeredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.lobby import events as ev
from engine.lobby.evolve import apply as lobby_apply
from engine.lobby.state import TableState
from engine.service.lobby_notes import PLACE_FENCE_TTL_MS, PLACE_FIELDS, LobbyOutbox, place_written, write_place
from engine.service.publish import Publisher
from engine.store import keys


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def client(request):
    if request.param == "fakeredis":
        return request.getfixturevalue("fake_redis")
    return request.getfixturevalue("real_redis")


@dataclass
class History:
    """One player's lobby events as the lobby makes them, each with the table's state after it
    (None for a queue's event): ``ann`` and an opponent through queues and tables."""

    steps: list[tuple[ev.LobbyEvent, TableState | None]] = field(default_factory=list)
    seqs: dict[str, int] = field(default_factory=dict)
    tables: dict[str, TableState] = field(default_factory=dict)
    n: int = 0

    def _next(self, aggregate: str) -> int:
        self.seqs[aggregate] = self.seqs.get(aggregate, 0) + 1
        return self.seqs[aggregate]

    def queue(self, kind: type[ev.LobbyEvent], room: str, **fields) -> None:
        agg = ev.queue_aggregate(room)
        seq = self._next(agg)
        self.steps.append((kind(aggregate=agg, seq=seq, ts=seq, command_id=f"c{len(self.steps)}", **fields), None))

    def table(self, kind: type[ev.LobbyEvent], tid: str, **fields) -> None:
        agg = f"table:{tid}"
        seq = self._next(agg)
        e = kind(aggregate=agg, seq=seq, ts=seq, command_id=f"c{len(self.steps)}", **fields)
        state = lobby_apply(self.tables.get(tid, TableState(table=tid)), e)
        self.tables[tid] = state
        self.steps.append((e, state))

    def new_table(self) -> str:
        self.n += 1
        return f"t{self.n}"


#: how a stint at a table ends for ann: removed with it, back in line, or leaving with it
ENDS = ("removed", "requeued", "left_with_table")


@st.composite
def histories(draw) -> History:
    """Stints of ann's: queued and left, or queued, paired, a match or more, and an end."""
    h = History()
    queued_in: str | None = None
    for _ in range(draw(st.integers(1, 4))):
        room = queued_in or draw(st.sampled_from(["points", "wealth"]))
        if queued_in is None:
            h.queue(ev.PlayerQueued, room, player="ann", since=0)
        queued_in = None
        if draw(st.booleans()):
            h.queue(ev.PlayerLeftQueue, room, player="ann", reason="left")
            continue
        t, other = h.new_table(), f"opp{h.n}"
        h.queue(ev.TablePaired, room, table=t, players=("ann", other), match=ev.match_of(t, 1))
        h.table(ev.TableOpened, t, table=t, room=room, players=("ann", other), match=ev.match_of(t, 1),
                ready_ms=10_000, grace_ms=10_000)
        h.table(ev.MatchSeated, t, match=ev.match_of(t, 1))
        for n in range(2, 2 + draw(st.integers(0, 2))):
            h.table(ev.NextMatchOffered, t, match=ev.match_of(t, n))
            h.table(ev.MatchSeated, t, match=ev.match_of(t, n))
        end = draw(st.sampled_from(ENDS))
        removed = (("ann", "left"), (other, "no_opponent")) if end == "removed" else ((other, "left"),)
        h.table(ev.TableClosed, t, reason="left", removed=removed, stayed=() if end == "removed" else ("ann",),
                dealt=True)
        h.queue(ev.TableReleased, room, table=t)
        if end == "requeued":
            h.queue(ev.PlayerQueued, room, player="ann", since=0, reason="opponent_left")
            queued_in = room
        elif end == "left_with_table":
            h.queue(ev.LeftWithTable, room, player="ann", table=t, reason="left")
    return h


def _place(client, player: str = "ann") -> dict[str, str]:
    raw = {k.decode(): v.decode() for k, v in client.hgetall(keys.place_key(player)).items()}
    return {k: v for k, v in raw.items() if k in PLACE_FIELDS}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(h=histories(), data=st.data())
def test_an_entry_handled_again_later_never_moves_a_player(client, h, data):
    """The events in order, each written once, and entries handled again at any later point:
    after every write ann's place is the one the events in order give."""
    client.flushdb()
    outbox = LobbyOutbox(client, Publisher(client, consumer="test"))
    deliveries: list[int] = []
    for i in range(len(h.steps)):
        deliveries.append(i)
        deliveries += data.draw(st.lists(st.integers(0, i), max_size=2), label=f"again after {i}")
    ref = fakeredis.FakeRedis(server=fakeredis.FakeServer())  # the events in order, each once
    in_order = LobbyOutbox(ref, Publisher(ref, consumer="ref"))
    expected = []
    for e, table in h.steps:
        in_order(e, table)
        expected.append(_place(ref))
    done = -1
    for i in deliveries:
        e, table = h.steps[i]
        outbox(e, table)
        done = max(done, i)
        assert _place(client) == expected[done], (type(e).__name__, e.aggregate, e.seq)


def _write(client, e: ev.LobbyEvent, fields: dict[str, str] | None, player: str = "ann") -> str:
    pipe = client.pipeline(transaction=False)
    write_place(pipe, player, e, fields)
    return place_written(pipe.execute()[0])


def _q(kind, room: str, seq: int, **f) -> ev.LobbyEvent:
    return kind(aggregate=ev.queue_aggregate(room), seq=seq, ts=seq, command_id=f"q{seq}", **f)


def _t(kind, table: str, seq: int, **f) -> ev.LobbyEvent:
    return kind(aggregate=f"table:{table}", seq=seq, ts=seq, command_id=f"t{seq}", **f)


AT_T1 = {"state": "table", "room": "points", "table": "t1", "match": "t1-1"}
AT_T1_2 = {"state": "table", "room": "points", "table": "t1", "match": "t1-2"}
QUEUED = {"state": "queued", "room": "points", "table": "", "match": ""}
QUEUED_W = {"state": "queued", "room": "wealth", "table": "", "match": ""}
PAIRED = _q(ev.TablePaired, "points", 2, table="t1", players=("ann", "bob"), match="t1-1")
SEATED_2 = _t(ev.NextMatchOffered, "t1", 3, match="t1-2")
CLOSED = _t(ev.TableClosed, "t1", 9, reason="left", removed=(("ann", "left"),), stayed=(), dealt=True)
LEFT_Q = _q(ev.PlayerLeftQueue, "points", 2, player="ann", reason="left")
WITH_TABLE = _q(ev.LeftWithTable, "points", 4, player="ann", table="t1", reason="left")

# (the writes in order: event and the fields it writes, None to clear; each write's reply; the place after)
ORDERS = [
    pytest.param([(PAIRED, AT_T1), (SEATED_2, AT_T1_2), (PAIRED, AT_T1)], ["written", "written", "stale"],
                 AT_T1_2, id="the queue's pairing again after the table's next match"),
    pytest.param([(PAIRED, AT_T1), (CLOSED, None), (PAIRED, AT_T1)], ["written", "written", "stale"],
                 {}, id="the pairing again after the table closed"),
    pytest.param([(SEATED_2, AT_T1_2), (CLOSED, None), (SEATED_2, AT_T1_2)], ["written", "written", "stale"],
                 {}, id="a table's event again after it closed"),
    pytest.param([(_q(ev.PlayerQueued, "points", 1, player="ann", since=0), QUEUED), (LEFT_Q, None),
                  (_q(ev.PlayerQueued, "wealth", 1, player="ann", since=0), QUEUED_W), (LEFT_Q, None)],
                 ["written", "written", "written", "elsewhere"], QUEUED_W,
                 id="leaving a queue again after joining another room's"),
    pytest.param([(PAIRED, AT_T1), (WITH_TABLE, None), (_q(ev.PlayerQueued, "wealth", 1, player="ann", since=0),
                  QUEUED_W), (WITH_TABLE, None)], ["written", "written", "written", "elsewhere"], QUEUED_W,
                 id="leaving with a table again after joining another room"),
    pytest.param([(_q(ev.PlayerQueued, "points", 1, player="ann", since=0), QUEUED), (PAIRED, AT_T1),
                  (_q(ev.PlayerQueued, "points", 1, player="ann", since=0), QUEUED)], ["written", "written", "stale"],
                 AT_T1, id="the Join's queueing again after the pairing"),
    pytest.param([(PAIRED, AT_T1), (SEATED_2, AT_T1_2), (SEATED_2, AT_T1_2)], ["written", "written", "written"],
                 AT_T1_2, id="the same event again at once: written, the same"),
]


@pytest.mark.parametrize("writes,replies,after", ORDERS)
def test_the_place_keeps_where_the_player_went(client, writes, replies, after):
    assert [_write(client, e, f) for e, f in writes] == replies
    assert _place(client) == after


def test_a_player_nowhere_has_no_state_and_the_fence_stays(client):
    """A clear leaves the place's fields empty, the fence kept: the engine's and the gateways'
    readers ask ``state``, never whether the hash exists."""
    _write(client, PAIRED, AT_T1)
    _write(client, CLOSED, None)
    raw = {k.decode(): v.decode() for k, v in client.hgetall(keys.place_key("ann")).items()}
    assert "state" not in raw and raw["closed"] == "t1" and raw["v:queue:points"] == "2"
    # nowhere, the hash expires after the fence's day (a bot's id is new at each table); seated, never
    assert 0 < client.pttl(keys.place_key("ann")) <= PLACE_FENCE_TTL_MS
    _write(client, _q(ev.PlayerQueued, "points", 3, player="ann", since=0), QUEUED)
    assert client.pttl(keys.place_key("ann")) == -1


def test_the_closed_tables_kept_are_the_last_sixty_four(client):
    """A table's seq fence goes at its close (a player's place would grow by a field a table);
    its id stays among the last 64 closed, so a late seating of one is refused while it is
    (the security review of 2026-12-06 put a player back at a table closed 17 tables before,
    when 16 were kept)."""
    for n in range(1, 67):
        _write(client, _t(ev.MatchSeated, f"t{n}", 2, match=f"t{n}-1"),
               {"state": "table", "room": "points", "table": f"t{n}", "match": f"t{n}-1"})
        _write(client, _t(ev.TableClosed, f"t{n}", 5, reason="left", removed=(("ann", "left"),), stayed=(),
                          dealt=True), None)
    closed = client.hget(keys.place_key("ann"), "closed").decode().split()
    assert closed == [f"t{n}" for n in range(3, 67)]
    late = _t(ev.MatchSeated, "t3", 2, match="t3-1")
    assert _write(client, late, {"state": "table", "room": "points", "table": "t3", "match": "t3-1"}) == "stale"
    assert _place(client) == {}


def test_a_reply_of_another_shape_is_an_error():
    with pytest.raises(ValueError):
        place_written([b"status", b"what"])

