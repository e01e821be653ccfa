"""The state of one match, as folded from its events (docs/ARCHITECTURE.md "Event sourcing").

:class:`MatchState` is a frozen value: :func:`engine.match.evolve.apply` returns a
new one for every event and never checks anything; :func:`engine.match.decide.decide`
reads it to judge a command.  It holds everything the rules need (R-6 turns,
R-7 cards left, R-8/R-9/R-10 bombs played, R-13 timeouts and trusteeship) and
the *current deadline* (the turn, trustee or ready clock), computed by apply
from event timestamps and the room config, so the timer workers never need a
clock of their own to know when a match must be acted on.

``encode_state``/``decode_state`` are the msgpack codec used for snapshots
(:class:`engine.store.base.Snapshot`).

>>> s = MatchState(match_id="m1")
>>> decode_state(encode_state(s)) == s
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import msgpack

from engine.rules.combo import Combo
from engine.config import RoomConfig
from engine.match.frozen import evolve
from engine.match.deadline import Deadline, DeadlineKind

#: ``abandoned``: ended before the deal (MatchAbandoned, R-13.2); ``finished``: MatchFinished
Phase = Literal["new", "seating", "playing", "finished", "abandoned"]
STATE_CODEC_VERSION = 2  # 2: the plays of the match (``history``)


@dataclass(frozen=True, slots=True)
class Seat:
    """One of the two seats (R-1.2) and everything known about its player."""

    player: str
    balance: int = 0
    level: int = 0
    base: int = 0
    ready: bool = False
    hand: tuple[int, ...] = ()
    timeouts: int = 0
    trustee: str | None = None  # reason (timeouts/requested/disconnect/escape) or None
    connected: bool = True
    escaped: bool = False
    bombs: tuple[Combo, ...] = ()  # every bomb this player played, in order
    plays: int = 0  # CardsPlayed events of this player
    client_seed: str | None = None  # from PlayerReady, in matches with a commitment (FAIRNESS.md)

    @property
    def trusteed(self) -> bool:
        return self.trustee is not None


@dataclass(frozen=True, slots=True)
class LastPlay:
    """The play in front of the next player (None in the state when leading)."""

    seat: int
    combo: Combo
    cards: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PlayRecord:
    """One play of the match, as views and briefs show it (``view.history``, ``brief.trick_plays``):
    the trick it was played in (the state's ``trick`` then), the seat, the cards, and the
    reading's kind, top rank index and xiang."""

    trick: int
    seat: int
    cards: tuple[int, ...]
    kind: str
    top: int
    xiang: int | None


@dataclass(frozen=True, slots=True)
class Finish:
    winner: str
    loser: str
    kou: str
    reason: str
    cards_left: tuple[tuple[str, int], ...]  # sorted (player, n) pairs


@dataclass(frozen=True, slots=True)
class MatchState:
    match_id: str
    version: int = 0
    #: the version of the last event that moved the table (engine.match.evolve.MOVES_TABLE): a
    #: command's ``expected_version`` is stale only when it is older than this (or newer than ``version``)
    table_version: int = 0
    config: RoomConfig | None = None
    phase: Phase = "new"
    seats: tuple[Seat | None, Seat | None] = (None, None)
    turn: int | None = None  # seat whose turn it is (playing phase)
    to_beat: LastPlay | None = None  # None when the player on turn leads
    trick: int = 0  # tricks started so far (a pass ends one, R-6.2)
    trick_plays: int = 0  # plays in the current trick
    set_aside: tuple[int, ...] = ()  # unseen for the whole match
    table: tuple[int, ...] = ()  # every card played so far, in order
    first: int | None = None  # seat that led the first trick
    lead_card: int | None = None
    finished: Finish | None = None
    abandoned: str | None = None  # MatchAbandoned's reason (phase "abandoned")
    deadline_at: int | None = None
    deadline_kind: DeadlineKind | None = None
    turn_started_at: int | None = None  # when the player on turn got it (the turn clock's start)
    last_ts: int = 0
    plays_total: int = field(default=0)
    #: fair deals (docs/FAIRNESS.md): the public commitment and the PRIVATE server seed (hex);
    #: the seed is never put in a view before the finish (projections/views.py)
    commitment: str | None = None
    server_seed: str | None = field(default=None, repr=False)
    client_seeds: tuple[str, str] | None = None  # the seeds the fair deal was computed from
    #: every play of the match in order; the current trick's are the last ``trick_plays``
    history: tuple[PlayRecord, ...] = ()

    # ---- lookups ---------------------------------------------------------
    def seat_of(self, player: str) -> int | None:
        for i, s in enumerate(self.seats):
            if s is not None and s.player == player:
                return i
        return None

    def seat(self, i: int) -> Seat:
        s = self.seats[i]
        assert s is not None, f"seat {i} is empty"
        return s

    def players(self) -> list[str]:
        return [s.player for s in self.seats if s is not None]

    def opponent_seat(self, i: int) -> int:
        return 1 - i

    @property
    def current_player(self) -> str | None:
        if self.phase != "playing" or self.turn is None:
            return None
        s = self.seats[self.turn]
        return s.player if s else None

    @property
    def over(self) -> bool:
        """Finished or abandoned: a terminal event was applied, nothing more happens."""
        return self.phase in ("finished", "abandoned")

    @property
    def leading(self) -> bool:
        return self.to_beat is None

    @property
    def heavenly(self) -> Literal["top", "bottom"]:
        return self.config.heavenly_bomb if self.config else "top"

    @property
    def chain_bomb_twos(self) -> bool:
        """The room's R-2.2 setting: may chain bombs run up to 2?"""
        return self.config.chain_bomb_twos if self.config else True

    def with_seat(self, i: int, seat: Seat | None) -> MatchState:
        seats = list(self.seats)
        seats[i] = seat
        return evolve(self, seats=(seats[0], seats[1]))

    def deadline(self) -> Deadline | None:
        """The moment the system must act if nobody else does (None: no clock runs)."""
        if self.deadline_at is None or self.deadline_kind is None:
            return None
        return Deadline(match_id=self.match_id, version=self.version,
                        at_ms=self.deadline_at, kind=self.deadline_kind)

    def cards_accounted(self) -> int:
        """Hands + table + set aside (108 from the deal on, R-1.1)."""
        return sum(len(s.hand) for s in self.seats if s) + len(self.table) + len(self.set_aside)


# ---- codec --------------------------------------------------------------

def _combo_to(c: Combo) -> list[Any]:
    return [c.kind, c.top, c.size, list(c.counts), c.xiang, c.chain, c.m, c.regular,
            list(c.jokers_as), list(c.bomb_sizes)]


def _combo_from(d: list[Any]) -> Combo:
    return Combo(kind=d[0], top=d[1], size=d[2], counts=tuple(d[3]), xiang=d[4], chain=d[5],
                 m=d[6], regular=d[7], jokers_as=tuple(d[8]), bomb_sizes=tuple(d[9]))


def _seat_to(s: Seat | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"player": s.player, "balance": s.balance, "level": s.level, "base": s.base,
            "ready": s.ready, "hand": list(s.hand), "timeouts": s.timeouts, "trustee": s.trustee,
            "connected": s.connected, "escaped": s.escaped,
            "bombs": [_combo_to(b) for b in s.bombs], "plays": s.plays, "client_seed": s.client_seed}


def _seat_from(d: dict[str, Any] | None) -> Seat | None:
    if d is None:
        return None
    return Seat(player=d["player"], balance=d["balance"], level=d["level"], base=d["base"],
                ready=d["ready"], hand=tuple(d["hand"]), timeouts=d["timeouts"],
                trustee=d["trustee"], connected=d["connected"], escaped=d["escaped"],
                bombs=tuple(_combo_from(b) for b in d["bombs"]), plays=d["plays"],
                client_seed=d.get("client_seed"))


def state_to_dict(s: MatchState) -> dict[str, Any]:
    return {
        "codec": STATE_CODEC_VERSION,
        "match_id": s.match_id, "version": s.version, "table_version": s.table_version,
        "config": s.config.to_record() if s.config else None,
        "phase": s.phase, "seats": [_seat_to(x) for x in s.seats], "turn": s.turn,
        "to_beat": (None if s.to_beat is None else
                    [s.to_beat.seat, _combo_to(s.to_beat.combo), list(s.to_beat.cards)]),
        "trick": s.trick, "trick_plays": s.trick_plays, "set_aside": list(s.set_aside),
        "table": list(s.table), "first": s.first, "lead_card": s.lead_card,
        "finished": (None if s.finished is None else
                     [s.finished.winner, s.finished.loser, s.finished.kou, s.finished.reason,
                      [list(p) for p in s.finished.cards_left]]),
        "abandoned": s.abandoned,
        "deadline_at": s.deadline_at, "deadline_kind": s.deadline_kind,
        "turn_started_at": s.turn_started_at, "last_ts": s.last_ts, "plays_total": s.plays_total,
        "commitment": s.commitment, "server_seed": s.server_seed,
        "client_seeds": list(s.client_seeds) if s.client_seeds is not None else None,
        "history": [[p.trick, p.seat, list(p.cards), p.kind, p.top, p.xiang] for p in s.history],
    }


def state_from_dict(d: dict[str, Any]) -> MatchState:
    if d.get("codec") != STATE_CODEC_VERSION:
        raise ValueError(f"state snapshot codec {d.get('codec')!r} is not supported")
    tb = d["to_beat"]
    fin = d["finished"]
    seats = [_seat_from(x) for x in d["seats"]]
    return MatchState(
        match_id=d["match_id"], version=d["version"],
        # a snapshot from before the table version: every older version counts as stale (as then)
        table_version=d.get("table_version", d["version"]),
        config=RoomConfig.from_match_record(d["config"]) if d["config"] is not None else None,
        phase=d["phase"], seats=(seats[0], seats[1]), turn=d["turn"],
        to_beat=None if tb is None else LastPlay(tb[0], _combo_from(tb[1]), tuple(tb[2])),
        trick=d["trick"], trick_plays=d["trick_plays"], set_aside=tuple(d["set_aside"]),
        table=tuple(d["table"]), first=d["first"], lead_card=d["lead_card"],
        finished=None if fin is None else Finish(fin[0], fin[1], fin[2], fin[3],
                                                 tuple((p, n) for p, n in fin[4])),
        abandoned=d.get("abandoned"),
        deadline_at=d["deadline_at"], deadline_kind=d["deadline_kind"],
        turn_started_at=d.get("turn_started_at"), last_ts=d["last_ts"], plays_total=d["plays_total"],
        commitment=d.get("commitment"), server_seed=d.get("server_seed"),
        client_seeds=None if d.get("client_seeds") is None else (d["client_seeds"][0], d["client_seeds"][1]),
        history=tuple(PlayRecord(p[0], p[1], tuple(p[2]), p[3], p[4], p[5]) for p in d["history"]),
    )


def encode_state(s: MatchState) -> bytes:
    """msgpack bytes of a state (snapshots); :func:`decode_state` reads them back equal."""
    return msgpack.packb(state_to_dict(s), use_bin_type=True)  # type: ignore[no-any-return]


def decode_state(data: bytes) -> MatchState:
    return state_from_dict(msgpack.unpackb(data, raw=False, strict_map_key=False))
