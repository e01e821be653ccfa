"""``decide(state, command, ctx) -> list[Event]``: every rule check of a match.

``decide`` is pure: time and randomness enter only through :class:`Context`
(``now_ms``; for a deal the shuffled ``deck`` and ``lead_index``) and are
recorded in the events, so a replay never needs a clock or a generator.
A refusal raises a typed :class:`engine.match.errors.Rejected` with a reason a
person can read (cards in notation); the state is never touched.

Lifecycle (phase ``new`` → ``seating`` → ``playing`` → ``finished``):

* ``CreateMatch`` → MatchCreated with the full config record (R-11.3).
* ``Sit`` ×2 → PlayerSeated, level and base from the balance (R-11); a third
  player, a duplicate or (wealth) a balance below the lowest level (R-11.1)
  is refused.  ``Leave`` → PlayerRemoved(left) before the deal.
* ``Ready`` ×2 → PlayerReady (a Ready from a player already ready, or after the deal, changes
  nothing: no event, :func:`ready_changes_nothing`); when the second player gets ready and
  ``ctx.deck`` is given, the deal follows in the same decision (HandDealt
  with both hands, the set-aside cards, the lead card picked by
  ``ctx.lead_index`` among the 54 dealt cards and its holder as first
  player, R-1.3, R-1.4).  ``Deal`` deals explicitly, from ``ctx.deck`` or a
  fixed deal (1–27 cards a hand, the rest set aside, the first seat given).
* ``Play``/``Pass`` (R-6); after each, if the next player cannot beat the
  play in front of them, Passed(by="auto") follows at once (R-6.4); a hand
  emptied ends the match: MatchFinished with kou (R-6.3, R-7).
* ``TurnTimeout``/``TrusteeAct``/``ReadyTimeout`` are the system's timer
  commands: each carries the match version it was set for and is refused as
  stale (:class:`StaleCommand`) otherwise (R-13.1–R-13.3).  ``ExtendClock``
  (also the timers') moves the running turn or ready clock later: ClockExtended,
  when the player could not have acted (issue 35 §4).
* ``RequestTrustee``/``CancelTrustee`` (R-13.5), ``Disconnect``/``Reconnect``
  (R-13.4), ``Escape`` (R-12.1).

Decisions where the rules are silent (documented in the tests too):

* A player in trusteeship (any reason) cannot play or pass by hand: they
  cancel it first (when allowed); otherwise the trustee and the player
  could race for the same turn.
* Trusteeship from timeouts that was cancelled keeps the timeout count: the
  next timeout (count ≥ ``timeouts_before_trustee``) starts it again.
* ``Escape`` before the deal is a ``Leave`` (PlayerRemoved(left)), nothing is
  settled; after the finish it is refused (:class:`MatchOver`).
* A match that cannot be dealt ends with ``MatchAbandoned`` (no settlement, no ledger
  entry): when the last seated player leaves (``left``), or when the ready clock runs out
  (``ReadyTimeout``, R-13.2) -- the unready are removed (``not_ready``), or a seat was
  never taken (``seat_empty``).  The ready clock runs from the creation while a seat is
  empty or a seated player is not ready (engine/match/evolve.py).
* ``Disconnect`` before the deal only marks the player; if they are still
  disconnected when the cards are dealt, TrusteeshipStarted(disconnect)
  follows HandDealt in the same decision (R-13.4).
* Trusteeship from a disconnect may be cancelled (``CancelTrustee``) only when
  the room allows reclaiming and the player is connected again; from an
  escape never (R-13.5).
* A timer command is judged by version and the deadline kind only, not by
  ``ctx.now_ms``: timer messages may be late, never early (docs/ARCHITECTURE.md
  "Process managers").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from engine.rules.cards import (
    HAND_SIZE,
    NUM_CARDS,
    CardNotationError,
    deal_from_deck,
    format_ranks,
    missing_in_hand,
    resolve_in_hand,
)
from engine.rules.combo import Combo, beats
from engine.match.commands import (
    CancelTrustee,
    CommandBase,
    CreateMatch,
    Deal,
    Disconnect,
    Escape,
    ExtendClock,
    Leave,
    Pass,
    Play,
    Ready,
    ReadyTimeout,
    Reconnect,
    RequestTrustee,
    Say,
    Sit,
    Sync,
    TrusteeAct,
    TurnTimeout,
    readable_validation_error,
)
from engine.config import ConfigError, RoomConfig
from engine.match.errors import (
    BadCommand,
    CannotPass,
    DoesNotBeat,
    MatchExists,
    MatchOver,
    NotACombination,
    NotAllowed,
    NotInHand,
    NotSeated,
    NotYourTurn,
    Rejected,
    SeatRefused,
    StaleCommand,
    UnknownMatch,
    UnknownRoom,
    WrongPhase,
)
from engine.match import fairness
from engine.match.events import (
    CardsPlayed,
    ClockExtended,
    EventBase,
    HandDealt,
    MatchAbandoned,
    MatchCreated,
    MatchFinished,
    Passed,
    PlayerDisconnected,
    PlayerEscaped,
    PlayerReady,
    PlayerReconnected,
    PlayerRemoved,
    PlayerSeated,
    Reading,
    TrusteeshipEnded,
    TrusteeshipStarted,
    TurnTimedOut,
)
from engine.match.evolve import apply
from engine.match.state import MatchState

DEALT = 2 * HAND_SIZE  # the lead card is one of the 54 dealt cards

_ZH_NUM = "零一二三四五六七八九十"


@dataclass(frozen=True)
class Context:
    """What decide may know of the world: the clock, the server seed of a new match and,
    for a deal in a match without a commitment, the shuffle.

    ``server_seed`` (32 bytes from a CSPRNG, CreateMatch only) makes the match a fair
    one: MatchCreated records its commitment and every deal is computed from it
    (docs/FAIRNESS.md); ``deck``/``lead_index`` are then ignored.  ``deal_on_ready``
    says whether the second Ready deals at once (None: when a ``deck`` is given).
    """

    now_ms: int
    deck: tuple[int, ...] | None = None  # a shuffled deck of the 108 ids
    lead_index: int | None = None  # 0..53 into the 54 dealt cards
    server_seed: bytes | None = field(default=None, repr=False)
    deal_on_ready: bool | None = None
    #: Sit: the player's balance in the room's mode, read from the engine's ledger (R-11;
    #: never from the message); 0 for a player the ledger has never seen
    balance: int = 0
    #: CreateMatch by room name: the registered room's config (None: not registered)
    room: RoomConfig | None = None

    def deals_on_ready(self) -> bool:
        return self.deck is not None if self.deal_on_ready is None else self.deal_on_ready


class _Builder:
    """Collects the events of one decision, applying each so later checks see it."""

    def __init__(self, state: MatchState, command: CommandBase, ctx: Context):
        self.state = state
        self.command = command
        self.ctx = ctx
        self.events: list[EventBase] = []

    def emit(self, cls: type[EventBase], **fields: object) -> EventBase:
        e = cls(match_id=self.command.match_id, seq=self.state.version + 1, ts=self.ctx.now_ms,
                command_id=self.command.command_id, **fields)
        self.events.append(e)
        self.state = apply(self.state, e)
        return e


# ---- public API ---------------------------------------------------------------

def decide(state: MatchState, command: CommandBase, ctx: Context) -> list[EventBase]:
    """The events ``command`` causes in ``state``, or a :class:`Rejected` raised."""
    return decide_and_apply(state, command, ctx)[0]


def _checked_handler(state: MatchState, command: CommandBase) -> Callable[[_Builder, Any], None] | None:
    """The command's handler once the checks every command passes are passed (None: a Sync, or
    a Ready that changes nothing: :func:`ready_changes_nothing`)."""
    if command.match_id != state.match_id:
        raise BadCommand(f"command for match {command.match_id!r} sent to match {state.match_id!r}")
    handler = _HANDLERS.get(type(command))
    if handler is None:
        raise BadCommand(f"unknown command type {type(command).__name__}")
    if state.phase == "new" and not isinstance(command, CreateMatch):
        raise UnknownMatch(f"no match {state.match_id!r}: create it first")
    expected = getattr(command, "expected_version", None)
    if expected is not None and not state.table_version <= expected <= state.version:
        # the player decided on another table: never apply it on this one (hardening §6); events
        # that do not move the table (a ready mark, trusteeship, a disconnect) do not count (issue 26)
        moved = (f"the table moved at version {state.table_version}, after version {expected}"
                 if expected < state.table_version else f"the match is only at version {state.version}")
        raise StaleCommand(f"{moved} that the command expected: look at the current view and decide again")
    if isinstance(command, Sync):  # any phase, a finished match too: it only reads
        return None
    if isinstance(command, Ready) and ready_changes_nothing(state, command.player):
        return None  # idempotent (issue 36): no event, the publisher answers it with an ack
    if state.over and not isinstance(command, CreateMatch):
        # MatchFinished / MatchAbandoned is the last event a match ever gets (settlement
        # and the projection runner rely on it): nothing is decided after it
        if isinstance(command, (TurnTimeout, TrusteeAct, ReadyTimeout, ExtendClock)):
            raise StaleCommand(f"match {state.match_id} is over: the timer has nothing to do")
        _not_over(state)
    if isinstance(command, Say):  # a seated player of a match not over; it appends nothing
        _seated(state, command.player)
        return None
    return handler


def ready_changes_nothing(state: MatchState, player: str) -> bool:
    """A Ready of ``player`` that changes nothing: they are seated and already ready, or the
    cards of the match have been dealt (playing or finished).  It is accepted with no event
    (a reconnecting client may send Ready again on the lobby's ``seated`` note).

    >>> ready_changes_nothing(MatchState(match_id="m", phase="playing"), "a")
    False
    """
    i = state.seat_of(player)
    if i is None:
        return False
    return state.phase in ("playing", "finished") or (state.phase == "seating" and state.seat(i).ready)


def decide_and_apply(state: MatchState, command: CommandBase,
                     ctx: Context) -> tuple[list[EventBase], MatchState]:
    """:func:`decide` and the state after its events: decide applies each event as it
    builds it (later checks see it), so the caller need not fold them a second time
    (the result equals ``replay(events, state)``).  A :class:`Rejected` is raised as by
    :func:`decide`."""
    handler = _checked_handler(state, command)
    if handler is None:  # a Sync (it only reads) or a Ready that changes nothing
        return [], state
    b = _Builder(state, command, ctx)
    handler(b, command)
    return b.events, b.state


def verify_play(state: MatchState, player: str, cards: Sequence[int],
                reading_kind: str | None = None, reading_rank: str | None = None) -> Combo:
    """The reading ``player`` would play ``cards`` as, or a :class:`Rejected` (R-3…R-6)."""
    i = _playing_seat(state, player)
    _own_turn(state, i)
    return _reading_for(state, i, tuple(cards), reading_kind, reading_rank)


def can_play(state: MatchState, player: str, cards: Sequence[int]) -> bool:
    """Would :func:`verify_play` accept this play?"""
    try:
        verify_play(state, player, cards)
    except Rejected:
        return False
    return True


def timeout_notice(count: int, limit: int) -> tuple[str, str]:
    """The R-13.1 notice (Chinese as on the sheet, and English)."""
    lim = _ZH_NUM[limit] if 0 <= limit <= 10 else str(limit)
    zh = f"請注意，你已經超時{count}次了，超時{lim}次，系統將自動託管遊戲"
    times = "time" if count == 1 else "times"
    en = (f"Careful: you have timed out {count} {times}; after {limit} timeouts "
          "the system takes over your game (trusteeship)")
    return zh, en


# ---- shared checks ------------------------------------------------------------------

def _cfg(state: MatchState) -> RoomConfig:
    assert state.config is not None
    return state.config


def _not_over(state: MatchState) -> None:
    if state.phase == "abandoned":
        raise MatchOver(f"match {state.match_id} was abandoned before the deal ({state.abandoned})")
    if state.phase == "finished":
        f = state.finished
        who = f" ({f.winner} won)" if f else ""
        raise MatchOver(f"match {state.match_id} is over{who}")


def _seated(state: MatchState, player: str) -> int:
    i = state.seat_of(player)
    if i is None:
        raise NotSeated(f"{player!r} is not seated in match {state.match_id}")
    return i


def _seat_in_open_match(state: MatchState, player: str) -> int:
    """The player's seat in a match not yet over (any phase after the creation)."""
    _not_over(state)
    return _seated(state, player)


def _playing_seat(state: MatchState, player: str) -> int:
    i = _seat_in_open_match(state, player)
    if state.phase != "playing":
        raise WrongPhase(f"the cards have not been dealt yet (phase {state.phase})")
    return i


def _own_turn(state: MatchState, i: int) -> None:
    seat = state.seat(i)
    if state.turn != i:
        other = state.seats[state.turn] if state.turn is not None else None
        raise NotYourTurn(f"it is {other.player if other else 'nobody'}'s turn, not {seat.player}'s")
    if seat.escaped:
        raise NotAllowed(f"{seat.player} escaped from this match (R-12.1)")
    if seat.trusteed:
        raise NotAllowed(f"{seat.player} is in trusteeship ({seat.trustee}); the system plays "
                         "for them (cancel trusteeship first where allowed, R-13.5)")


def _reading_for(state: MatchState, i: int, cards: tuple[int, ...],
                 kind: str | None, rank: str | None) -> Combo:
    from engine.rules.classify import counts_for, interpretations, interpretations_for_counts

    hand = set(state.seat(i).hand)
    bad = [c for c in cards if not 0 <= c < NUM_CARDS]
    if bad:
        raise NotInHand(f"no card has id {bad[0]}")
    if len(set(cards)) != len(cards):
        raise BadCommand("the same card id is named twice")
    missing = [c for c in cards if c not in hand]
    if missing:
        raise NotInHand(f"{state.seat(i).player} does not hold {format_ranks(missing)}")
    heavenly = state.heavenly
    twos = state.chain_bomb_twos  # the room's setting
    prev = state.to_beat
    if kind is not None or rank is not None:
        text = format_ranks(cards)
        readings = [c for c in interpretations(list(cards), heavenly=heavenly, chain_bomb_twos=twos)
                    if (kind is None or c.kind == kind) and (rank is None or c.rank == rank)]
        named = " ".join(x for x in (kind, rank) if x)
        if not readings:
            raise NotACombination(f"{text} cannot be read as {named} (R-3, R-4)")
        if prev is None:
            return readings[0]
        for r in readings:
            if beats(r, prev.combo, heavenly):
                return r
        raise DoesNotBeat(f"{text} as {readings[0].describe()} does not beat "
                          f"{format_ranks(prev.cards)} ({prev.combo.describe()}) (R-5)")
    every = interpretations_for_counts(counts_for(cards), heavenly, twos)  # best first
    if not every:
        raise NotACombination(f"{format_ranks(cards)} is not a combination (R-3, R-4.5)")
    if prev is None:
        return every[0]
    for combo in every:  # the largest reading that beats the previous play
        if beats(combo, prev.combo, heavenly):
            return combo
    best = every[0]
    raise DoesNotBeat(f"{format_ranks(cards)} ({best.describe()}) does not beat "
                      f"{format_ranks(prev.cards)} ({prev.combo.describe()}): {_why_not(best, prev.combo)}")


def _why_not(a: Combo, b: Combo) -> str:
    if b.is_bomb and not a.is_bomb:
        return "only a bomb beats a bomb (R-5.2)"
    if not a.is_bomb and (a.kind != b.kind or a.size != b.size):
        return "it must be the same kind with the same number of cards, or a bomb (R-5.1, R-5.2)"
    if a.is_bomb:
        return "a bomb must be stronger: more xiang, or fewer cards, or a higher rank (R-5.3–R-5.6)"
    return "it must rank strictly higher (R-5.1, R-5.6)"


# ---- after-play automation ------------------------------------------------------------

def _after_play(b: _Builder, i: int) -> None:
    """R-6.3 finish, else R-6.4 auto-pass of the next player when they cannot beat."""
    from engine.rules.moves import can_beat

    s = b.state
    seat = s.seat(i)
    opp = s.seat(1 - i)
    if not seat.hand:
        n = len(opp.hand)
        b.emit(MatchFinished, winner=seat.player, loser=opp.player,
               cards_left={seat.player: 0, opp.player: n}, kou=_cfg(s).kou.kou_of(n), reason="out",
               server_seed=s.server_seed)  # the reveal (FAIRNESS.md)
        return
    # with two players at most one auto-pass is ever needed: after it the
    # player who just played leads, and a leader always has a play
    while (b.state.phase == "playing" and b.state.to_beat is not None and b.state.turn is not None
           and not can_beat(b.state.seat(b.state.turn).hand, b.state.to_beat.combo, b.state.heavenly,
                            chain_bomb_twos=b.state.chain_bomb_twos)):
        b.emit(Passed, player=b.state.seat(b.state.turn).player, by="auto")


def _play(b: _Builder, i: int, cards: tuple[int, ...], combo: Combo, by: str) -> None:
    b.emit(CardsPlayed, player=b.state.seat(i).player, cards=tuple(cards),
           reading=Reading.of(combo), by=by)
    _after_play(b, i)


def _system_move(b: _Builder, i: int, by: str) -> None:
    """The trustee's choice for seat ``i`` (R-13.3): a play, or a pass when following."""
    from engine.rules.moves import trustee_choice

    s = b.state
    hand = list(s.seat(i).hand)
    prev = s.to_beat.combo if s.to_beat is not None else None
    choice = trustee_choice(hand, prev, s.heavenly, chain_bomb_twos=s.chain_bomb_twos)
    if choice is None:
        b.emit(Passed, player=s.seat(i).player, by=by)
        return
    _play(b, i, tuple(choice.cards), choice.combo, by)


# ---- handlers -------------------------------------------------------------------------

def _create(b: _Builder, c: CreateMatch) -> None:
    if b.state.phase != "new":
        raise MatchExists(f"match {b.state.match_id} already exists")
    if c.room is not None:
        cfg = b.ctx.room
        if cfg is None:
            raise UnknownRoom(f"no room named {c.room!r} is registered (shuangkou room list)")
    else:
        try:
            cfg = RoomConfig.from_record(c.config or {})
        except ValidationError as exc:  # field: message, no pydantic URL
            raise BadCommand(f"bad room config: {readable_validation_error(exc, root='')}") from None
        except (ConfigError, ValueError) as exc:
            raise BadCommand(f"bad room config: {exc}") from None
    seed = b.ctx.server_seed
    if seed is None:  # no seed in the context: a match without fair deals (decide-level tests)
        b.emit(MatchCreated, config=cfg.to_record())
        return
    if len(seed) != fairness.SEED_BYTES:
        raise BadCommand(f"a server seed is {fairness.SEED_BYTES} bytes")
    # a fair match: commit to the seed before anyone sits (docs/FAIRNESS.md)
    b.emit(MatchCreated, config=cfg.to_record(), commitment=fairness.commitment(seed, c.match_id),
           server_seed=seed.hex())


def _seating(state: MatchState, what: str) -> None:
    _not_over(state)
    if state.phase != "seating":
        raise WrongPhase(f"cannot {what} after the deal (phase {state.phase})")


def _sit(b: _Builder, c: Sit) -> None:
    s = b.state
    _seating(s, "sit down")
    if s.seat_of(c.player) is not None:
        raise SeatRefused(f"{c.player} is already seated")
    free = [i for i, x in enumerate(s.seats) if x is None]
    if not free:
        raise SeatRefused(f"both seats are taken ({', '.join(s.players())}); 火拼雙扣 is for 2 players (R-1.2)")
    cfg = _cfg(s)
    balance = b.ctx.balance  # from the engine's ledger, never from the message
    level = cfg.seat_level(balance)
    if level is None:  # a wealth room (points seat every balance: RoomConfig.seat_level)
        low = cfg.levels[0]
        # the balance itself is not quoted: rejections may reach others than the player
        raise SeatRefused(f"{c.player} holds fewer coins than the lowest level of this room "
                          f"needs ({low.need} coins for level {low.level}) (R-11.1)")
    b.emit(PlayerSeated, player=c.player, seat=free[0], balance=balance,
           level=level.level, base=level.base)


def _leave(b: _Builder, c: Leave) -> None:
    s = b.state
    _seat_in_open_match(s, c.player)
    if s.phase != "seating":
        raise WrongPhase(f"{c.player} cannot leave a running match; leaving now is an escape (R-12)")
    b.emit(PlayerRemoved, player=c.player, reason=c.reason)
    _abandon_if_empty(b)


def _abandon_if_empty(b: _Builder) -> None:
    """The last seated player left before the deal: the match ends (MatchAbandoned), it
    can never be dealt (R-13.2 decision: a match nobody sits in is not kept open)."""
    if all(x is None for x in b.state.seats):
        b.emit(MatchAbandoned, reason="left")


def _ready(b: _Builder, c: Ready) -> None:
    s = b.state
    _seat_in_open_match(s, c.player)  # a seated player's Ready after the deal or a second one: no-ops
    seed = None
    if s.commitment is not None:
        seed = c.client_seed if c.client_seed is not None else fairness.default_client_seed(c.player)
    b.emit(PlayerReady, player=c.player, client_seed=seed)
    st = b.state
    if b.ctx.deals_on_ready() and all(x is not None and x.ready for x in st.seats):
        if st.server_seed is not None:
            _deal_fair(b)
        elif b.ctx.deck is not None:
            _deal_from_deck(b, b.ctx.deck, b.ctx.lead_index)


def _deal_fair(b: _Builder) -> None:
    """The deal computed from the committed server seed and both client seeds (FAIRNESS.md)."""
    s = b.state
    assert s.server_seed is not None
    seeds = tuple(fairness.default_client_seed(x.player) if x.client_seed is None else x.client_seed
                  for x in (s.seat(0), s.seat(1)))
    deal = fairness.fair_deal(bytes.fromhex(s.server_seed), seeds, s.match_id)
    b.emit(HandDealt, hands=deal.hands, set_aside=deal.set_aside, lead_card=deal.lead_card,
           first=deal.first, client_seeds=(seeds[0], seeds[1]))
    _after_deal(b)


def _deal_from_deck(b: _Builder, deck: Sequence[int], lead_index: int | None) -> None:
    try:
        h0, h1, rest = deal_from_deck(list(deck))
    except ValueError as exc:
        raise BadCommand(str(exc)) from None
    idx = 0 if lead_index is None else lead_index
    if not 0 <= idx < DEALT:
        raise BadCommand(f"lead_index must be 0..{DEALT - 1}, got {idx}")
    lead = deck[idx]  # one physical card among the 54 dealt
    first = 0 if lead in h0 else 1
    b.emit(HandDealt, hands=(tuple(h0), tuple(h1)), set_aside=tuple(rest), lead_card=lead, first=first)
    _after_deal(b)


def _after_deal(b: _Builder) -> None:
    for seat in b.state.seats:
        if seat is not None and not seat.connected and not seat.trusteed:
            b.emit(TrusteeshipStarted, player=seat.player, reason="disconnect")


def _deal(b: _Builder, c: Deal) -> None:
    s = b.state
    _seating(s, "deal")
    missing = [i for i, x in enumerate(s.seats) if x is None]
    if missing:
        raise WrongPhase("two players must be seated before the deal (R-1.2)")
    unready = [x.player for x in s.seats if x is not None and not x.ready]
    if unready:
        raise WrongPhase(f"not ready yet: {', '.join(unready)}")
    if c.hands is None:
        if s.server_seed is not None:
            _deal_fair(b)
            return
        if b.ctx.deck is None:
            raise BadCommand("a deal needs either fixed hands or a shuffled deck")
        _deal_from_deck(b, b.ctx.deck, b.ctx.lead_index)
        return
    hands = c.hands
    for n, h in enumerate(hands):
        if not 1 <= len(h) <= HAND_SIZE:
            raise BadCommand(f"hand {n} has {len(h)} cards; a fixed deal gives 1–{HAND_SIZE} a hand")
        bad = [x for x in h if not 0 <= x < NUM_CARDS]
        if bad:
            raise BadCommand(f"hand {n}: no card has id {bad[0]}")
        if len(set(h)) != len(h):
            raise BadCommand(f"hand {n} names a card twice")
    both = set(hands[0]) & set(hands[1])
    if both:
        raise BadCommand(f"the hands share cards: {format_ranks(sorted(both))}")
    if c.first is None:
        raise BadCommand("a fixed deal must name the first seat (0 or 1)")
    used = set(hands[0]) | set(hands[1])
    rest = tuple(x for x in range(NUM_CARDS) if x not in used)
    b.emit(HandDealt, hands=(tuple(sorted(hands[0])), tuple(sorted(hands[1]))), set_aside=rest,
           lead_card=None, first=c.first)
    _after_deal(b)


def _play_cmd(b: _Builder, c: Play) -> None:
    s = b.state
    i = _playing_seat(s, c.player)
    _own_turn(s, i)
    if c.cards is not None:
        cards = tuple(c.cards)
    else:
        assert c.text is not None
        try:
            resolved = resolve_in_hand(c.text, s.seat(i).hand)
        except CardNotationError as exc:
            raise BadCommand(str(exc)) from None
        if resolved == []:
            raise BadCommand(f"{c.player}'s play names no cards")
        if resolved is None:
            missing = " ".join(missing_in_hand(c.text, s.seat(i).hand))
            raise NotInHand(f"{c.player} does not hold {missing} (named: {' '.join(c.text.split())})")
        cards = tuple(resolved)
    combo = _reading_for(s, i, cards, c.reading_kind, c.reading_rank)
    _play(b, i, cards, combo, "player")


def _pass(b: _Builder, c: Pass) -> None:
    s = b.state
    i = _playing_seat(s, c.player)
    _own_turn(s, i)
    if s.to_beat is None:
        raise CannotPass(f"{c.player} must play: the leader of a trick cannot pass (R-6.1)")
    b.emit(Passed, player=c.player, by="player")


def _check_version(s: MatchState, version: int, what: str) -> None:
    if version != s.version:
        raise StaleCommand(f"{what} set for version {version}; the match is at {s.version}")


def _turn_timeout(b: _Builder, c: TurnTimeout) -> None:
    s = b.state
    _check_version(s, c.version, "turn timeout")
    if s.phase != "playing" or s.turn is None or s.deadline_kind != "turn":
        raise StaleCommand(f"no turn clock runs (phase {s.phase}, deadline {s.deadline_kind})")
    i = s.turn
    seat = s.seat(i)
    cfg = _cfg(s)
    count = seat.timeouts + 1
    zh, en = timeout_notice(count, cfg.timeouts_before_trustee)
    b.emit(TurnTimedOut, player=seat.player, count=count, notice_zh=zh, notice_en=en)
    if count >= cfg.timeouts_before_trustee and not seat.trusteed:
        b.emit(TrusteeshipStarted, player=seat.player, reason="timeouts")
    _system_move(b, i, "timeout")


def _trustee_act(b: _Builder, c: TrusteeAct) -> None:
    s = b.state
    _check_version(s, c.version, "trustee action")
    if s.phase != "playing" or s.turn is None:
        raise StaleCommand(f"nothing to play (phase {s.phase})")
    seat = s.seat(s.turn)
    if not seat.trusteed:
        raise StaleCommand(f"{seat.player} is not in trusteeship")
    _system_move(b, s.turn, "trustee")


def _ready_timeout(b: _Builder, c: ReadyTimeout) -> None:
    s = b.state
    _check_version(s, c.version, "ready timeout")
    if s.phase != "seating":
        raise StaleCommand(f"no ready clock runs (phase {s.phase})")
    seated = [x for x in s.seats if x is not None]
    unready = [x.player for x in seated if not x.ready]
    if not unready and len(seated) == len(s.seats):
        raise StaleCommand("every seated player is ready")
    for p in unready:
        b.emit(PlayerRemoved, player=p, reason="not_ready")
    if not unready:
        # ready, but no opponent sat down in time (a Sit lost or late): the seat is freed
        # (issue 23 item 8)
        for x in seated:
            b.emit(PlayerRemoved, player=x.player, reason="no_opponent")
    # the ready clock ran out and the match cannot be dealt: it ends without a settlement
    # (issue 22: no match waits for ever, with or without a deadline)
    b.emit(MatchAbandoned, reason="not_ready" if unready else "seat_empty")


def _extend_clock(b: _Builder, c: ExtendClock) -> None:
    s = b.state
    _check_version(s, c.version, "clock extension")
    if s.deadline_kind not in ("turn", "ready"):
        raise StaleCommand(f"no turn or ready clock runs (deadline {s.deadline_kind})")
    kind = "turn" if s.deadline_kind == "turn" else "ready"
    b.emit(ClockExtended, kind=kind, by_ms=c.by_ms, reason=c.reason)  # issue 35 §4


def _request_trustee(b: _Builder, c: RequestTrustee) -> None:
    s = b.state
    i = _playing_seat(s, c.player)
    seat = s.seat(i)
    if seat.trusteed:
        raise NotAllowed(f"{c.player} is already in trusteeship ({seat.trustee})")
    b.emit(TrusteeshipStarted, player=c.player, reason="requested")


def _cancel_trustee(b: _Builder, c: CancelTrustee) -> None:
    s = b.state
    i = _playing_seat(s, c.player)
    seat = s.seat(i)
    if not seat.trusteed:
        raise NotAllowed(f"{c.player} is not in trusteeship")
    if seat.trustee == "escape" or seat.escaped:
        raise NotAllowed(f"{c.player} escaped: trusteeship lasts to the end of the match (R-12.1, R-13.5)")
    if seat.trustee == "disconnect":
        if not _cfg(s).reclaim_after_reconnect:
            raise NotAllowed("this room does not let a disconnected player take control back (R-13.4)")
        if not seat.connected:
            raise NotAllowed(f"{c.player} is disconnected")
    b.emit(TrusteeshipEnded, player=c.player, reason="cancelled")


def _disconnect(b: _Builder, c: Disconnect) -> None:
    s = b.state
    i = _seat_in_open_match(s, c.player)
    seat = s.seat(i)
    if seat.escaped:
        raise NotAllowed(f"{c.player} escaped from this match")
    if not seat.connected:
        raise NotAllowed(f"{c.player} is already disconnected")
    b.emit(PlayerDisconnected, player=c.player)
    if s.phase == "playing" and seat.trustee != "disconnect":
        b.emit(TrusteeshipStarted, player=c.player, reason="disconnect")


def _reconnect(b: _Builder, c: Reconnect) -> None:
    s = b.state
    i = _seat_in_open_match(s, c.player)
    seat = s.seat(i)
    if seat.escaped:
        raise NotAllowed(f"{c.player} escaped from this match and cannot come back (R-12.1)")
    if seat.connected:
        raise NotAllowed(f"{c.player} is connected")
    b.emit(PlayerReconnected, player=c.player)
    if seat.trustee == "disconnect" and _cfg(s).reclaim_after_reconnect:
        b.emit(TrusteeshipEnded, player=c.player, reason="reconnected")  # decision


def _escape(b: _Builder, c: Escape) -> None:
    s = b.state
    i = _seat_in_open_match(s, c.player)
    if s.phase == "seating":
        b.emit(PlayerRemoved, player=c.player, reason="left")  # nothing dealt: a plain leave
        _abandon_if_empty(b)
        return
    seat = s.seat(i)
    if seat.escaped:
        raise NotAllowed(f"{c.player} has already escaped")
    policy = _cfg(s).escape_policy
    b.emit(PlayerEscaped, player=c.player, policy=policy)
    if policy == "trustee":
        b.emit(TrusteeshipStarted, player=c.player, reason="escape")  # to the end
        return
    opp = s.seat(1 - i)
    b.emit(MatchFinished, winner=opp.player, loser=c.player,
           cards_left={opp.player: len(opp.hand), c.player: len(seat.hand)},
           kou="escape", reason="escape", server_seed=s.server_seed)  # forfeit


_HANDLERS: dict[type[CommandBase], Callable[[_Builder, Any], None]] = {
    CreateMatch: _create, Sit: _sit, Leave: _leave, Ready: _ready, Deal: _deal, Play: _play_cmd,
    Pass: _pass, TurnTimeout: _turn_timeout, TrusteeAct: _trustee_act, ReadyTimeout: _ready_timeout,
    ExtendClock: _extend_clock,
    RequestTrustee: _request_trustee, CancelTrustee: _cancel_trustee, Disconnect: _disconnect,
    Reconnect: _reconnect, Escape: _escape, Sync: lambda b, c: None, Say: lambda b, c: None,
}
