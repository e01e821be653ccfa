"""Private tables' series in the lobby thread of ``serve`` (issue 39; docs/ARCHITECTURE.md
"The lobby in serve"): :class:`SeriesLobby` joins :class:`engine.service.series.SeriesService`
to the live lobby.

* a player's ``CreateTable``, ``JoinTable``, ``CancelTable``, ``RequestEnd``, ``VoteEnd`` from
  a lobby channel (:meth:`SeriesLobby.submit`): the last three name no series, the player's
  series index (:func:`engine.store.keys.player_series_key`) gives it; a refusal is a
  ``rejected`` entry with its code on the player's stream;
* a series' appends, read on its bucket's feed (:meth:`SeriesLobby.follow`): the players'
  messages (engine/service/series_notes.py, entries ``private_table`` / ``series``), the
  player index, the metrics, the table's commands (the friend's seat opens the table
  ``OpenTable(private)``; a series over between hands closes it, ``CloseTable``);
* the table's and the matches' news for the series (:meth:`from_table`: a close while the
  series goes on abandons it; :meth:`from_match`: a deal starts a hand);
* a settlement (:meth:`settled`): the hand's ``SettleHand`` before the table's ``Settle``, which
  closes the table when the series is over; :meth:`summary` the ``series`` field of ``settled``;
* the timers (:meth:`fire_due`) and a reconnect's messages (:meth:`resync`).

Every command it makes has a fixed id (engine/lobby/series_managers.py), so a repeat is a
duplicate.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from engine.lobby import commands as lc
from engine.lobby import series_commands as sc
from engine.lobby import series_events as se
from engine.lobby import series_managers as sm
from engine.lobby.series import SeriesState, apply, replay_series, summary
from engine.lobby.state import TableState
from engine.match.errors import BadCommand, NotSeated, Rejected
from engine.service import series_notes
from engine.service.place_claims import PlaceClaims, series_claim
from engine.service.series import SeriesService
from engine.store import keys

log = logging.getLogger("shuangkou.lobby")

#: the series commands a gateway may put on a lobby channel (``player`` from the token)
SERIES_TYPES = ("CreateTable", "JoinTable", "CancelTable", "RequestEnd", "VoteEnd")


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ("" if v is None else str(v))


class SeriesLobby:
    """The series' part of one replica's lobby thread (the module docstring)."""

    def __init__(self, client: Any, service: SeriesService, engine: Any, publisher: Any, *,
                 ledger: Any = None):
        self.client = client
        self.service = service
        self.engine = engine
        self.publisher = publisher
        self.ledger = ledger
        #: engine.service.place_claims.PlaceClaims (build_lobby), or None: no claims settled here
        self.claims: Any = None

    # -- a player's command ----------------------------------------------------------------
    def submit(self, data: dict[str, Any]) -> None:
        """One player's series command (a lobby channel entry's ``c``, parsed): run it, answer
        a refusal on the player's stream."""
        kind, player, cid = data.get("type"), str(data.get("player") or ""), str(data.get("command_id") or "")
        placed = False
        try:
            placed = self._submit(kind, player, cid, data)
        finally:
            if self.claims is not None and kind in ("CreateTable", "JoinTable"):
                self.claims.settle(player, placed)  # engine/service/place_claims.py

    def _submit(self, kind: Any, player: str, cid: str, data: dict[str, Any]) -> bool:
        """:meth:`submit`'s work; whether the command seated or placed the player anew."""
        try:
            if not cid or keys.player_id_problem(player) is not None:
                raise BadCommand("a series command needs a command_id and a player")
            if kind == "CreateTable":
                out = self.service.create(cid, player, str(data.get("room") or ""), int(data.get("hands") or 0),
                                          bool(data.get("spectators")), bool(data.get("bots")))
            elif kind == "JoinTable":
                out = self.service.join(cid, player, str(data.get("code") or "").upper(),
                                        str(data["room"]) if data.get("room") else None)
            else:
                series = self.series_of(player)
                if series is None:
                    raise NotSeated("you are at no private table")
                body = {k: v for k, v in data.items() if k not in ("series", "table")}
                out = self.service.execute(sc.parse_series_command({**body, "series": series}))
        except Rejected as rej:
            self._refuse(player, cid, rej)
            return False
        except (TypeError, ValueError) as exc:
            self._refuse(player, cid, BadCommand(f"bad {kind}: {exc}"))
            return False
        if out.rejection is not None:
            self._refuse(player, cid, out.rejection)
        elif out.duplicate and kind == "CreateTable" and out.state.status == "open":
            self._write([(player, series_notes.created_message(out.state, cid))])  # a retry: its answer again
        elif out.duplicate or not out.events:
            # accepted with nothing to do (a RequestEnd once agreed), or a retry of a command already
            # decided whose answer cannot be given again (its table moved on): the client waits no more
            self.publisher.write([self.publisher._delivery(keys.outbox_key(player), {
                "kind": "ack", "match": "", "command_id": cid})])
        return out.rejection is None and bool(out.events)

    def series_of(self, player: str) -> str | None:
        return _s(self.client.get(keys.player_series_key(player))) or None

    def _refuse(self, player: str, command_id: str, rej: Rejected) -> None:
        from engine.service.publish import rejection_fields

        if keys.player_id_problem(player) is not None:
            return
        fields = rejection_fields(None, command_id, rej.code, str(rej))
        self.publisher.write([self.publisher._delivery(keys.outbox_key(player), fields)])

    def _write(self, told: Sequence[tuple[str, dict[str, Any]]]) -> None:
        writes = []
        for player, message in told:
            writes.append(self.publisher._delivery(keys.outbox_key(player), {
                "kind": message["kind"], "match": "", "command_id": message.get("command_id") or "",
                "m": json.dumps(message, ensure_ascii=False)}))
        if writes:
            self.publisher.write(writes)

    # -- the series' feed ------------------------------------------------------------------
    def follow(self, series: str, first: int, last: int) -> None:
        """A series' appended events ``first``..``last``: tell them, then what they ask of the
        table (on the engine's lines; the caller drains)."""
        events = self.service.store.load(se.series_aggregate(series))
        state = replay_series(series, [e for e in events if e.seq < first])
        fresh = [e for e in events if first <= e.seq <= last]
        told: list[tuple[str, dict[str, Any]]] = []
        pipe = self.client.pipeline(transaction=False)
        settled_now = any(isinstance(e, se.HandSettled) for e in fresh)
        for e in fresh:
            state = apply(state, e)
            if isinstance(e, se.SeriesFinished) and settled_now:
                pass  # told after that hand's settled message (:meth:`finished_after`)
            else:
                told += series_notes.messages_of(e, state)
            if isinstance(e, se.PlayerJoinedSeries):  # the series starts: both learn its tally (0 hands)
                told += [(p, {"kind": "series", "state": "tally", **summary(state), "command_id": None})
                         for p in state.players if p != state.bot]
            if isinstance(e, se.SeriesCreated):
                pipe.set(keys.player_series_key(e.owner), series)
                PlaceClaims.caught_up(pipe, e.owner, series_claim(series))
            elif isinstance(e, se.PlayerJoinedSeries) and not e.bot:
                pipe.set(keys.player_series_key(e.player), series)
                PlaceClaims.caught_up(pipe, e.player, series_claim(series))
            elif isinstance(e, se.PlayerJoinedSeries):  # a bot's seat, for the process that plays bots
                pipe.xadd(keys.bot_seats_key(state.room), {"bot": e.player, "table": state.table,
                                                           "match": f"{state.table}-1",
                                                           "level": e.bot_level or "normal"},
                          maxlen=1000, approximate=True)
            elif isinstance(e, se.SeriesFinished):
                for p in state.players:
                    if p != state.bot and self.series_of(p) == series:
                        pipe.delete(keys.player_series_key(p))
            for c in sm.to_table(state, e):
                self.engine.send(("table", getattr(c, "table")), c)
            if isinstance(e, se.SeriesFinished) and state.table and len(state.players) == 2:
                self.engine.send(("table", state.table), lc.CloseTable(
                    command_id=f"pm:{e.aggregate}:{e.seq}:close", table=state.table))
        if len(pipe):
            pipe.execute()
        self._write(told)
        try:
            from projections.metrics import observe_series_events

            observe_series_events(fresh, state.room)
        except Exception:  # a metric never stops the lobby
            log.debug("series metrics failed", exc_info=True)

    # -- the table's and the matches' news -----------------------------------------------------
    def state(self, series: str) -> SeriesState:
        return self.service.state(series)

    def from_table(self, table: TableState, events: Sequence[Any]) -> None:
        """A private table's events: a close while its series goes on abandons the series."""
        if not table.private:
            return
        state = self.state(table.table)
        for e in events:
            for c in sm.from_table(state, e):
                self.service.execute(c)

    def from_match(self, table: str, match: str, events: Sequence[Any]) -> None:
        """A private table's match events: its deal starts the series' hand."""
        state = self.state(table)
        if state.version == 0:
            return
        for c in sm.from_match(state, match, events):
            self.service.execute(c)

    def settled(self, table: TableState, settlement: Any) -> bool:
        """Tell the series its hand was settled (SettleHand, before the table's Settle); True
        when the series is over with it (the table closes)."""
        state = self.state(table.table)
        if state.version == 0 or table.match is None:
            return False
        if state.status == "finished":
            return True
        store = getattr(self.engine.matches, "store", None)
        events = store.load(table.match) if store is not None else []
        winner = getattr(settlement, "winner", None)
        command = sm.settle_hand(state, table.match, dict(getattr(settlement, "scores", {}) or {}),
                                 winner if isinstance(winner, str) else None, events)
        out = self.service.execute(command)
        if out.rejection is not None and out.rejection.code != "stale":
            log.warning("series %s: SettleHand of %s refused: %s", state.series, table.match, out.rejection)
        return self.state(table.table).status == "finished"

    def finished_after(self, table: str, match: str) -> list[tuple[str, dict[str, Any]]]:
        """The ``series finished`` messages a hand's settlement caused (its last hand, an
        escape, a vote passed during it): told right after that hand's ``settled``."""
        state = self.state(table)
        if state.status != "finished" or not state.played or state.played[-1].match != match:
            return []
        events = self.service.store.load(se.series_aggregate(table))
        last = events[-1] if events else None
        return series_notes.messages_of(last, state) if isinstance(last, se.SeriesFinished) else []

    def summary(self, table: str) -> dict[str, Any] | None:
        """The ``series`` field of a private table's ``settled`` message."""
        state = self.state(table)
        return series_notes.settled_series(state) if state.version else None

    # -- timers and resync -----------------------------------------------------------------
    def fire_due(self, now_ms: int) -> int:
        """Run the series' due timers (join, vote); how many did something."""
        return sum(1 for out in self.service.fire_due(now_ms) if out.committed)

    def resync(self, player: str) -> list[dict[str, Any]]:
        """What a reconnecting player gets again of their series: the totals, an open vote."""
        series = self.series_of(player)
        return series_notes.resync(self.state(series), player) if series else []
