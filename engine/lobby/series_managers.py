"""The series' process managers: pure translations of its table's and its matches' events,
and of the ledger's settlements, into series commands, each with a fixed command id (the
source's aggregate or match, the event's seq, a tag), so a second run is the store's
duplicate (engine/lobby/managers.py does the same for the queue and the table).

* :func:`from_match`: a hand's HandDealt → StartHand (``pm:<match>:<seq>:hand``).
* :func:`settle_hand`: the ledger's settlement of a hand, with the hand's events (its
  biggest bombs, an escape) → SettleHand (``pm:<match>:series``).
* :func:`to_table`: the second seat taken (PlayerJoinedSeries) → the table's OpenTable
  (``pm:series:<id>:<seq>:open``).
* :func:`from_table`: the series' table closed (TableClosed) while the series goes on →
  AbandonSeries (``pm:table:<id>:<seq>:series``).
* :func:`biggest_bombs`: each player's biggest bomb of a hand (xiang), from its CardsPlayed
  events: the settlement records only each player's *effective* xiang (R-8.3), which may
  come from several bombs together (R-9, R-10), not the biggest single bomb.

A hand's match is created with the room's config marked private
(:meth:`engine.config.RoomConfig.private_record`): no ladder rates it.

>>> from engine.match.events import HandDealt
>>> s = SeriesState(series="s1", status="playing", table="s1", hands=4, players=("a", "b"))
>>> e = HandDealt(match_id="s1-1", seq=6, ts=0, command_id="d", hands=((0,), (1,)), set_aside=(),
...               lead_card=None, first=0)
>>> [(c.type, c.command_id, c.match) for c in from_match(s, "s1-1", [e])]
[('StartHand', 'pm:s1-1:6:hand', 's1-1')]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from engine.lobby import commands as lc
from engine.lobby import events as ev
from engine.lobby import series_commands as sc
from engine.lobby import series_events as se
from engine.lobby.series import SeriesState
from engine.match.events import CardsPlayed, EventBase, HandDealt, MatchFinished, PlayerEscaped


def is_hand_of(state: SeriesState, match: str) -> bool:
    """Whether ``match`` is a match of the series' table (``<table>-<n>``)."""
    table, sep, n = match.rpartition("-")
    return bool(sep) and table == state.table and n.isdigit()


def from_match(state: SeriesState, match: str, events: Iterable[EventBase]) -> list[sc.SeriesCommand]:
    """The series commands a hand's events cause: its deal starts the hand."""
    if not is_hand_of(state, match):
        return []
    return [sc.StartHand(command_id=f"pm:{match}:{e.seq}:hand", series=state.series, match=match)
            for e in events if isinstance(e, HandDealt)]


def biggest_bombs(events: Iterable[EventBase]) -> dict[str, int]:
    """Each player's biggest bomb in a hand, by xiang (players who played none are absent).

    >>> biggest_bombs([])
    {}
    """
    out: dict[str, int] = {}
    for e in events:
        if isinstance(e, CardsPlayed):
            c = e.reading.combo()
            if c.is_bomb and c.xiang:
                out[e.player] = max(out.get(e.player, 0), int(c.xiang))
    return out


def escaper_of(events: Iterable[EventBase]) -> str | None:
    """Who escaped in a hand (R-12): the first PlayerEscaped, or the loser of a match that
    finished by an escape."""
    for e in events:
        if isinstance(e, PlayerEscaped):
            return e.player
        if isinstance(e, MatchFinished) and e.reason == "escape":
            return e.loser
    return None


def settle_hand(state: SeriesState, match: str, scores: Mapping[str, int], winner: str | None,
                events: Iterable[EventBase]) -> sc.SettleHand:
    """The SettleHand of a hand the ledger settled (``scores``, ``winner``: the settlement's),
    with the hand's biggest bombs and its escaper from its events."""
    evs = list(events)
    return sc.SettleHand(command_id=f"pm:{match}:series", series=state.series, match=match, scores=dict(scores),
                         winner=winner, bombs=biggest_bombs(evs), escaper=escaper_of(evs))


def to_table(state: SeriesState, e: ev.LobbyEvent) -> list[lc.LobbyCommand]:
    """The table commands a series event causes (``state``: the series after the event): once
    the second seat is taken, the series' table opens (OpenTable, ``pm:series:<id>:<seq>:open``)
    for its two players, its first match ``<table>-1`` (a bot's seat as the queue's BotSeated)."""
    if isinstance(e, se.PlayerJoinedSeries) and len(state.players) == 2:
        return [lc.OpenTable(command_id=f"pm:{e.aggregate}:{e.seq}:open", table=state.table, room=state.room,
                             players=(state.players[0], state.players[1]), match=ev.match_of(state.table, 1),
                             bot=e.player if e.bot else None, bot_level=e.bot_level if e.bot else None,
                             private=True)]
    return []


def from_table(state: SeriesState, e: ev.LobbyEvent) -> list[sc.SeriesCommand]:
    """The series commands an event of its table causes: a close while the series goes on
    abandons it (a finished series' table closing is its own doing)."""
    if isinstance(e, ev.TableClosed) and state.status in ("open", "playing") \
            and e.aggregate == ev.table_aggregate(state.table):
        return [sc.AbandonSeries(command_id=f"pm:{e.aggregate}:{e.seq}:series", series=state.series)]
    return []
