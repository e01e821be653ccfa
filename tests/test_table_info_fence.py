"""A table's read model never goes back (engine/store/table_info.lua, LobbyOutbox).

The gateways route a player's Play to the match the table's read model names.  A feed entry
handled late -- by a serve that lost the bucket while a partition held it, its write delivered
at the heal -- used to write the table as it was then, over the later match: every command of
the seated players went to a finished match until the table's next event (the nemesis run's
``late_ends`` on partition_serve, docs/RELIABILITY.md "Findings").
"""

from __future__ import annotations

import pytest

from engine.lobby import events as ev
from engine.lobby.evolve import apply as lobby_apply
from engine.lobby.state import TableState
from engine.service.lobby_notes import LobbyOutbox, table_info_written, write_table_info
from engine.service.publish import Publisher
from engine.store import keys

TABLE = "tfence"


def _states() -> list[tuple[ev.LobbyEvent, TableState]]:
    """A table's first events and its state after each: opened at match 1, seated, the next
    match offered and seated (versions 1-4)."""
    events: list[ev.LobbyEvent] = [
        ev.TableOpened(aggregate=f"table:{TABLE}", seq=1, ts=0, command_id="pm:open", table=TABLE, room="points",
                       players=("ann", "bob"), match=f"{TABLE}-1", ready_ms=10_000, grace_ms=10_000),
        ev.MatchSeated(aggregate=f"table:{TABLE}", seq=2, ts=1, command_id="pm:seat1", match=f"{TABLE}-1"),
        ev.NextMatchOffered(aggregate=f"table:{TABLE}", seq=3, ts=2, command_id="pm:next", match=f"{TABLE}-2"),
        ev.MatchSeated(aggregate=f"table:{TABLE}", seq=4, ts=3, command_id="pm:seat2", match=f"{TABLE}-2"),
    ]
    out, state = [], TableState(table=TABLE)
    for e in events:
        state = lobby_apply(state, e)
        out.append((e, state))
    return out


def _info(client) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in client.hgetall(keys.table_info_key(TABLE)).items()}


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def client(request):
    if request.param == "fakeredis":
        return request.getfixturevalue("fake_redis")
    return request.getfixturevalue("real_redis")


# (the versions written in this order, the version the read model shows after, each reply)
ORDERS = [
    ((1, 2, 3, 4), 4, (None, None, None, None)),  # in order
    ((1, 4, 2), 4, (None, None, 4)),  # a late entry: the later version stays
    ((4, 3, 4), 4, (None, 4, None)),  # the same version again (a re-handled entry): written
    ((2, 1), 2, (None, 2)),
]


@pytest.mark.parametrize("order,shown,replies", ORDERS)
def test_the_read_model_keeps_the_later_version(client, order, shown, replies):
    states = dict((s.version, s) for _e, s in _states())
    got = []
    for v in order:
        pipe = client.pipeline(transaction=False)
        write_table_info(pipe, keys.table_info_key(TABLE), states[v])
        got.append(table_info_written(pipe.execute()[0]))
    info = _info(client)
    assert (int(info["v"]), info["match"]) == (shown, states[shown].match)
    assert tuple(got) == replies


def test_a_read_model_of_an_older_release_without_v_is_written_over(client):
    client.hset(keys.table_info_key(TABLE), mapping={"room": "points", "match": f"{TABLE}-9", "status": "seated"})
    (_e, state), *_ = _states()
    pipe = client.pipeline(transaction=False)
    write_table_info(pipe, keys.table_info_key(TABLE), state)
    assert table_info_written(pipe.execute()[0]) is None
    assert _info(client)["match"] == f"{TABLE}-1"


def test_a_late_feed_entry_does_not_take_the_players_back_to_a_finished_match(client):
    """The outbox as the feed follower runs it: the entry of the second match's seating, then
    a late one of the first's (a zombie follower's): the gateways still route to match 2."""
    outbox = LobbyOutbox(client, Publisher(client, consumer="test"))
    steps = _states()
    for e, state in steps:
        outbox(e, state)
    late_e, late_state = steps[1]  # MatchSeated of match 1, after the table moved on to match 2
    outbox(late_e, late_state)
    info = _info(client)
    assert (info["match"], info["status"], info["v"]) == (f"{TABLE}-2", "seated", "4")


def test_a_reply_of_another_shape_is_an_error():
    with pytest.raises(ValueError):
        table_info_written([b"status", b"what"])
