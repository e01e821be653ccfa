"""decide(): every command in every phase, table-driven, citing the rules (R-x.y).

The driver :class:`M` plays a match straight through decide + apply (no store):
each ``do`` returns the events, each ``no`` returns the rejection and checks
that decide left the state alone.
"""

from __future__ import annotations

import pytest

from engine.rules.cards import parse_cards
from engine.service.shuffle import seeded_random, shuffled_deck
from engine.match.commands import (
    CancelTrustee,
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
    Sit,
    TrusteeAct,
    TurnTimeout,
)
from engine.config import RoomConfig, load_config
from engine.match.decide import Context, can_play, decide, timeout_notice, verify_play
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
    WrongPhase,
)
from engine.match.evolve import apply
from engine.match.replay import check_stream
from engine.match.state import MatchState

T0 = 1_000_000


def cfg(mode: str = "points", **changes: object) -> RoomConfig:
    rec = load_config(mode).to_record()
    rec.update(changes)
    return RoomConfig.from_record(rec)


class M:
    def __init__(self, config: RoomConfig | None = None, seat: bool = True, balances=(0, 0)):
        self.config = config or cfg()
        self.state = MatchState(match_id="m")
        self.history: list = []  # every event decide produced, in order
        self.now = T0
        self.n = 0
        self.do(CreateMatch, config=self.config.to_record())
        if seat:
            self.do(Sit, player="a", balance=balances[0])
            self.do(Sit, player="b", balance=balances[1])

    def cmd(self, cls, **kw):
        self.n += 1
        return cls(command_id=f"c{self.n}", match_id="m", **kw)

    def do(self, cls, ctx: Context | None = None, balance: int | None = None, **kw):
        """``balance``: a Sit's ledger balance, which reaches decide through the context (R-11)."""
        self.now += 1000
        if balance is not None:
            ctx = Context(now_ms=self.now, balance=balance)
        c = self.cmd(cls, **kw)
        events = decide(self.state, c, ctx or Context(now_ms=self.now))
        for i, e in enumerate(events):  # envelope of every event
            assert e.seq == self.state.version + 1 + i
            assert e.ts == (ctx.now_ms if ctx else self.now)
            assert e.command_id == c.command_id and e.match_id == "m"
        for e in events:
            self.state = apply(self.state, e)
        self.history.extend(events)
        return events

    def no(self, cls, balance: int = 0, **kw) -> Rejected:
        before = self.state
        with pytest.raises(Rejected) as info:
            decide(self.state, self.cmd(cls, **kw), Context(now_ms=self.now, balance=balance))
        assert self.state is before
        return info.value

    def deal(self, a: str, b: str, first: int = 0):
        self.do(Ready, player="a")
        self.do(Ready, player="b")
        ids = parse_cards(a.split() + b.split())
        na = len(a.split())
        return self.do(Deal, hands=(tuple(ids[:na]), tuple(ids[na:])), first=first)


def types(events) -> list[str]:
    return [e.type for e in events]


def dealt(a: str, b: str, first: int = 0, **config: object) -> M:
    m = M(cfg(**config) if config else None)
    m.deal(a, b, first)
    return m


# ---- lifecycle --------------------------------------------------------------------

def test_create_records_the_full_config_and_refuses_twice() -> None:
    m = M(seat=False)
    assert m.state.phase == "seating" and m.state.config == m.config
    e = m.no(CreateMatch, config=m.config.to_record())
    assert isinstance(e, MatchExists)


def test_commands_before_create_are_unknown_match() -> None:
    s = MatchState(match_id="m")
    for c in (Sit(command_id="x", match_id="m", player="a"), Ready(command_id="x", match_id="m", player="a"),
              TurnTimeout(command_id="x", match_id="m", version=0)):
        with pytest.raises(UnknownMatch):
            decide(s, c, Context(now_ms=1))


def test_bad_config_record_is_bad_command() -> None:
    with pytest.raises(BadCommand):
        decide(MatchState(match_id="m"), CreateMatch(command_id="x", match_id="m", config={"mode": "x"}),
               Context(now_ms=1))


@pytest.mark.parametrize("mode, balance, level, base", [
    ("points", 0, 0, 5), ("points", 100, 2, 10), ("points", 2_000_000, 16, 800),
    ("points", -30, 0, 5),  # below 0 points: the lowest level
    ("wealth", 100, 1, 5), ("wealth", 1000, 2, 10), ("wealth", 60_000_000, 11, 4000),
])
def test_sit_takes_level_and_base_from_balance(mode, balance, level, base) -> None:
    m = M(cfg(mode), seat=False)
    (e,) = m.do(Sit, player="a", balance=balance)
    assert (e.type, e.seat, e.level, e.base) == ("PlayerSeated", 0, level, base)


@pytest.mark.parametrize("setup, player, balance, needle", [
    ("full", "c", 0, "both seats are taken"),
    ("full", "a", 0, "already seated"),
    ("wealth", "a", 99, "R-11.1"),                  # below the lowest wealth level
])
def test_sit_refusals(setup, player, balance, needle) -> None:
    m = M(cfg("wealth") if setup == "wealth" else None, seat=setup == "full")
    e = m.no(Sit, player=player, balance=balance)
    assert isinstance(e, SeatRefused) and needle in str(e)


def test_ready_twice_and_unseated() -> None:  # a second Ready changes nothing (issue 36)
    m = M()
    m.do(Ready, player="a")
    assert m.do(Ready, player="a") == []
    assert isinstance(m.no(Ready, player="z"), NotSeated)


@pytest.mark.parametrize("phase", ["playing", "finished"])
def test_a_ready_after_the_deal_changes_nothing(phase) -> None:  # issue 36: a reconnect's Ready
    m = _in_phase(phase)
    before = m.state
    assert m.do(Ready, player="a") == [] and m.state == before
    assert isinstance(m.no(Ready, player="z"), (NotSeated, MatchOver))  # never for one not seated


def test_second_ready_deals_from_the_context_deck() -> None:
    m = M()
    deck = tuple(shuffled_deck(seeded_random(5)))
    assert types(m.do(Ready, player="a", ctx=Context(now_ms=5, deck=deck, lead_index=40))) == ["PlayerReady"]
    events = m.do(Ready, player="b", ctx=Context(now_ms=6, deck=deck, lead_index=40))
    assert types(events) == ["PlayerReady", "HandDealt"]
    d = events[1]
    assert [len(h) for h in d.hands] == [27, 27] and len(d.set_aside) == 54
    assert d.lead_card == deck[40] and d.lead_card in d.hands[d.first]
    assert m.state.phase == "playing" and m.state.turn == d.first and m.state.cards_accounted() == 108
    dl = m.state.deadline()
    assert dl.kind == "turn" and dl.at_ms == 6 + 15_000 and dl.version == m.state.version


def test_second_ready_without_deck_only_readies() -> None:
    m = M()
    m.do(Ready, player="a")
    assert types(m.do(Ready, player="b")) == ["PlayerReady"]
    assert m.state.phase == "seating"


def test_fixed_deal() -> None:
    m = dealt("3 4 5", "6 7", first=1)
    assert m.state.turn == 1 and m.state.lead_card is None
    assert len(m.state.set_aside) == 103 and m.state.cards_accounted() == 108


@pytest.mark.parametrize("hands, first, needle", [
    (((0, 1), (1, 2)), 0, "share cards"),
    (((), (1, 2)), 0, "1–27"),
    ((tuple(range(28)), (50,)), 0, "1–27"),
    (((0, 200), (1,)), 0, "no card has id 200"),
    (((0, 0), (1,)), 0, "twice"),
    (((0,), (1,)), None, "first seat"),
])
def test_fixed_deal_refusals(hands, first, needle) -> None:
    m = M()
    m.do(Ready, player="a")
    m.do(Ready, player="b")
    e = m.no(Deal, hands=hands, first=first)
    assert isinstance(e, BadCommand) and needle in str(e)


def test_deal_needs_two_ready_players_and_happens_once() -> None:
    m = M()
    m.do(Ready, player="a")
    assert isinstance(m.no(Deal, hands=((0,), (1,)), first=0), WrongPhase)
    m.do(Ready, player="b")
    assert isinstance(m.no(Deal), BadCommand)  # no fixed hands and no deck
    m.do(Deal, hands=((0,), (1,)), first=0)
    assert isinstance(m.no(Deal, hands=((2,), (3,)), first=0), WrongPhase)


def test_leave_before_the_deal_only() -> None:
    m = M()
    assert [(e.type, e.reason) for e in m.do(Leave, player="a")] == [("PlayerRemoved", "left")]
    # the lobby's Leave for who stays at a table that closed before the deal: they did not leave
    assert [(e.type, e.reason) for e in M().do(Leave, player="b", reason="table_closed")][0] == (
        "PlayerRemoved", "table_closed")
    assert m.state.seats[0] is None
    m.do(Sit, player="c")  # the free seat is taken again
    assert m.state.seat(0).player == "c"
    m2 = dealt("3", "4")
    assert isinstance(m2.no(Leave, player="a"), WrongPhase)


def test_ready_timeout_removes_unready_players() -> None:
    m = M()
    m.do(Ready, player="a")
    assert m.state.deadline().kind == "ready"
    assert isinstance(m.no(ReadyTimeout, version=m.state.version - 1), StaleCommand)
    events = m.do(ReadyTimeout, version=m.state.version)
    assert [(e.type, getattr(e, "player", None), e.reason) for e in events] == [
        ("PlayerRemoved", "b", "not_ready"), ("MatchAbandoned", None, "not_ready")]
    # the match can never be dealt: it ends (no settlement), nothing runs or is decided after it
    assert m.state.phase == "abandoned" and m.state.over and m.state.deadline() is None
    assert isinstance(m.no(ReadyTimeout, version=m.state.version), StaleCommand)
    assert isinstance(m.no(Sit, player="c"), MatchOver)
    assert isinstance(m.no(Ready, player="a"), MatchOver)


# ---- abandoned before the deal (R-13.2 decision) ----------------------------------------
@pytest.mark.parametrize("seats, leaves, removed, reason", [
    ((), (), [], "seat_empty"),                      # created, nobody ever sat: the clock runs from the creation
    (("a",), (), ["a"], "seat_empty"),               # ready, the second seat never taken: a is freed (no_opponent)
    (("a", "b"), ("a",), ["b"], "seat_empty"),       # one left, the other stays ready and alone
])
def test_a_match_that_cannot_be_dealt_is_abandoned_by_its_ready_clock(seats, leaves, removed, reason) -> None:
    m = M(seat=False)
    created_at = m.now
    ready_ms = int(m.config.ready_seconds * 1000)
    assert m.state.deadline().kind == "ready" and m.state.deadline().at_ms == created_at + ready_ms
    for p in seats:
        m.do(Sit, player=p)
        m.do(Ready, player=p)
    for p in leaves:
        m.do(Leave, player=p)
    assert m.state.phase == "seating" and m.state.deadline().kind == "ready"
    events = m.do(ReadyTimeout, version=m.state.version)
    assert [(e.type, getattr(e, "player", None), e.reason) for e in events] == [
        *(("PlayerRemoved", p, "no_opponent") for p in removed), ("MatchAbandoned", None, reason)]
    assert m.state.phase == "abandoned" and m.state.abandoned == reason and m.state.deadline() is None
    assert check_stream(m.history) == []


@pytest.mark.parametrize("how", [Leave, Escape])
def test_the_last_seated_player_leaving_abandons_the_match_at_once(how) -> None:
    m = M()
    assert [e.type for e in m.do(Leave, player="a")] == ["PlayerRemoved"]
    events = m.do(how, player="b")
    assert [(e.type, e.reason) for e in events] == [("PlayerRemoved", "left"), ("MatchAbandoned", "left")]
    assert m.state.over and m.state.deadline() is None
    assert isinstance(m.no(Sit, player="a"), MatchOver)
    assert check_stream(m.history) == []


def test_an_abandoned_match_after_the_deal_is_a_stream_problem() -> None:
    from engine.match.events import MatchAbandoned

    m = M()
    m.do(Ready, player="a")
    m.do(Ready, player="b", ctx=Context(now_ms=m.now + 1000, deck=shuffled_deck(seeded_random(1)), lead_index=0))
    assert m.state.phase == "playing"
    bad = MatchAbandoned(match_id="m", seq=m.state.version + 1, ts=m.now, command_id="x", reason="left")
    assert any("abandoned in phase playing" in p for p in check_stream([*m.history, bad]))


def test_ready_clock_restarts_when_a_player_sits() -> None:
    m = M(seat=False)
    m.do(Sit, player="a")
    at1 = m.state.deadline().at_ms
    m.do(Sit, player="b")
    assert m.state.deadline().at_ms == at1 + 1000


# ---- play -------------------------------------------------------------------------

@pytest.mark.parametrize("player, kw, exc, needle", [
    ("b", {"text": "9"}, NotYourTurn, "a's turn"),
    ("a", {"text": "A"}, NotInHand, "does not hold A"),
    ("a", {"text": "3 3 3 3 4"}, NotInHand, "does not hold 3 3 (named: 3 3 3 3 4)"),  # names the missing
    ("a", {"text": "5H 5"}, NotInHand, "does not hold 5H (named"),   # D-2: the hand's only 5 is 5S
    ("a", {"cards": (107,)}, NotInHand, "does not hold BJ"),
    ("a", {"text": "3 4"}, NotACombination, "3 4 is not a combination"),
    ("a", {"text": "3 3 4 4 SJ"}, NotACombination, "not a combination"),
    ("z", {"text": "3"}, NotSeated, "not seated"),
    ("a", {"text": "3 3", "reading_kind": "straight"}, NotACombination, "cannot be read as straight"),
    ("a", {"text": " , "}, BadCommand, "a's play names no cards"),
])
def test_play_refusals_when_leading(player, kw, exc, needle) -> None:
    m = dealt("3 3 4 4 5 SJ", "9 10 J")
    e = m.no(Play, player=player, **kw)
    assert type(e) is exc and needle in str(e), str(e)


def test_a_card_named_twice_is_a_bad_command_even_unvalidated() -> None:
    """The model refuses it (tests/test_bad_command_reasons.py); decide does too."""
    m = dealt("3 3 4 4 5 SJ", "9 10 J")
    play = Play.model_construct(command_id="x", match_id="m", player="a", cards=(0, 0), text=None,
                                expected_version=None, reading_kind=None, reading_rank=None)
    with pytest.raises(BadCommand, match="named twice"):
        decide(m.state, play, Context(now_ms=m.now))


@pytest.mark.parametrize("prev, play, needle", [
    ("8", "6", "must rank strictly higher (R-5.1, R-5.6)"),
    ("8", "6 6", "same kind with the same number of cards"),
    ("5 5 5 5", "K", "only a bomb beats a bomb (R-5.2)"),
    ("5 5 5 5", "4 4 4 4", "a bomb must be stronger"),
])
def test_does_not_beat_names_both_plays(prev, play, needle) -> None:
    m = dealt(prev + " 3", play + " 2 2 9 9 9 9 9")  # b could beat with 99999: no auto-pass
    m.do(Play, player="a", text=prev)
    e = m.no(Play, player="b", text=play)
    assert isinstance(e, DoesNotBeat) and needle in str(e) and prev in str(e), str(e)


def test_play_before_the_deal_and_after_the_finish() -> None:
    m = M()
    assert isinstance(m.no(Play, player="a", text="3"), WrongPhase)
    m = dealt("3", "4 4")
    m.do(Play, player="a", text="3")
    assert isinstance(m.no(Play, player="b", text="4 4"), MatchOver)
    assert isinstance(m.no(Pass, player="b"), MatchOver)


def test_pass_while_leading_is_refused() -> None:
    m = dealt("3 9", "4 5")
    e = m.no(Pass, player="a")
    assert isinstance(e, CannotPass) and "R-6.1" in str(e)


def test_a_pass_ends_the_trick() -> None:
    m = dealt("3 9", "4 5")
    m.do(Play, player="a", text="3")
    events = m.do(Pass, player="b")
    assert [(e.type, e.by) for e in events] == [("Passed", "player")]
    assert m.state.turn == 0 and m.state.to_beat is None and m.state.trick == 2


def test_reading_chosen_beats_and_may_be_named() -> None:
    m = dealt("5 6 7 8 BJ 3", "4 5 6 7 8 2")
    (played, *_) = m.do(Play, player="a", text="5 6 7 8 BJ")
    assert played.reading.kind == "straight" and played.reading.combo().rank == "9"
    m = dealt("5 6 7 8 BJ 3", "4 5 6 7 8 2")
    (played, *_) = m.do(Play, player="a", text="5 6 7 8 BJ", reading_kind="straight", reading_rank="8")
    assert played.reading.combo().rank == "8"


def test_following_takes_the_reading_that_beats() -> None:
    m = dealt("4 5 6 7 8 3", "5 6 7 8 BJ 2")
    m.do(Play, player="a", text="4 5 6 7 8")
    (played, *_) = m.do(Play, player="b", text="5 6 7 8 BJ")
    assert played.reading.combo().rank == "9"


def test_play_by_ids() -> None:
    m = dealt("3 3 9", "4")
    ids = tuple(m.state.seat(0).hand[:2])
    (e, *_) = m.do(Play, player="a", cards=ids)
    assert e.cards == ids and e.reading.kind == "pair"


# ---- auto-pass (R-6.4) ------------------------------------------------------------------

def test_auto_pass_when_the_next_player_cannot_beat() -> None:
    m = dealt("2 2 3", "A A K")
    events = m.do(Play, player="a", text="2 2")
    assert [(e.type, e.player, e.by) for e in events] == [("CardsPlayed", "a", "player"), ("Passed", "b", "auto")]
    assert m.state.turn == 0 and m.state.to_beat is None  # a leads again


def test_no_auto_pass_when_a_bomb_can_beat() -> None:
    m = dealt("2 2 3", "4 4 4 BJ")
    assert types(m.do(Play, player="a", text="2 2")) == ["CardsPlayed"]


def test_auto_pass_chain_over_several_plays() -> None:
    m = dealt("2 2 A A K", "3 4 6 8")
    seq = []
    for text in ("2 2", "A A", "K"):
        seq += [(e.type, getattr(e, "by", None)) for e in m.do(Play, player="a", text=text)]
    assert seq == [("CardsPlayed", "player"), ("Passed", "auto"),
                   ("CardsPlayed", "player"), ("Passed", "auto"),
                   ("CardsPlayed", "player"), ("MatchFinished", None)]
    assert m.state.phase == "finished" and m.state.finished.kou == "flat"


# ---- the room's chain_bomb_twos reaches the rules (R-2.2) -------------------------------------

@pytest.mark.parametrize("twos", [True, False])
def test_chain_bomb_twos_decides_plays_auto_pass_and_trustee(twos: bool) -> None:
    hand = "K K K K A A A A 2 2 2 2 3"
    m = dealt("Q Q Q Q Q Q 4 6", hand, **{"chain_bomb_twos": twos})
    events = m.do(Play, player="a", text="Q Q Q Q Q Q")
    # K-A-2 is the only play that beats six Qs: with the flag off b is auto-passed
    assert types(events) == (["CardsPlayed"] if twos else ["CardsPlayed", "Passed"])
    if not twos:
        m.do(Play, player="a", text="4")
        assert isinstance(m.no(Play, player="b", text="K K K K A A A A 2 2 2 2"), NotACombination)
        return
    played = m.do(Play, player="b", text="K K K K A A A A 2 2 2 2")[0]
    assert played.reading.kind == "chain_bomb" and played.reading.top == 12


@pytest.mark.parametrize("twos", [True, False])
def test_trustee_plays_a_chain_to_2_only_when_the_room_allows(twos: bool) -> None:
    m = dealt("Q Q Q Q Q Q 4", "K K K K A A A A 2 2 2 2 3 5", **{"chain_bomb_twos": twos})
    m.do(RequestTrustee, player="b")
    events = m.do(Play, player="a", text="Q Q Q Q Q Q")
    if not twos:
        assert types(events) == ["CardsPlayed", "Passed"]      # auto-pass: nothing beats
        return
    ev = m.do(TrusteeAct, version=m.state.version)
    assert [(e.type, getattr(e, "by", None)) for e in ev] == [("CardsPlayed", "trustee"), ("Passed", "auto")]
    assert ev[0].reading.combo().describe() == "7-xiang regular 3-chain bomb to 2"


# ---- finish and kou (R-6.3, R-7) ---------------------------------------------------------

@pytest.mark.parametrize("left, kou", [(1, "flat"), (6, "flat"), (7, "single"), (11, "single"),
                                       (12, "double"), (27, "double")])
def test_finish_and_kou(left, kou) -> None:
    b_hand = " ".join((["4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A", "2"] * 3)[:left])
    m = dealt("3", b_hand)
    events = m.do(Play, player="a", text="3")
    assert types(events) == ["CardsPlayed", "MatchFinished"]
    f = events[-1]
    assert (f.winner, f.loser, f.cards_left, f.kou, f.reason) == ("a", "b", {"a": 0, "b": left}, kou, "out")
    assert m.state.phase == "finished" and m.state.deadline() is None


# ---- timeouts and trusteeship (R-13) -----------------------------------------------------

def test_timeout_notice_text() -> None:
    zh, en = timeout_notice(2, 3)
    assert zh == "請注意，你已經超時2次了，超時三次，系統將自動託管遊戲"
    assert "2 times" in en and "after 3" in en


def test_three_timeouts_start_trusteeship() -> None:
    m = dealt("3 5 7 9 J K", "4 6 8 10 Q A 2")
    e1 = m.do(TurnTimeout, version=m.state.version)
    assert [(e.type, getattr(e, "by", None)) for e in e1] == [("TurnTimedOut", None), ("CardsPlayed", "timeout")]
    assert e1[0].count == 1 and e1[1].cards == tuple(parse_cards("3"))  # leading: the lowest single
    m.do(Play, player="b", text="6")
    e2 = m.do(TurnTimeout, version=m.state.version)
    assert e2[0].count == 2 and e2[1].reading.combo().rank == "7"  # following: the smallest that beats
    m.do(Play, player="b", text="8")
    e3 = m.do(TurnTimeout, version=m.state.version)
    assert types(e3) == ["TurnTimedOut", "TrusteeshipStarted", "CardsPlayed"]
    assert e3[0].count == 3 and e3[1].reason == "timeouts" and "超時三次" in e3[0].notice_zh
    assert m.state.seat(0).trustee == "timeouts"
    m.do(Play, player="b", text="10")
    # a's turn under trusteeship: the trustee clock runs, a turn timeout is stale
    d = m.state.deadline()
    assert d.kind == "trustee" and d.at_ms == m.now + 500
    assert isinstance(m.no(TurnTimeout, version=m.state.version), StaleCommand)
    assert isinstance(m.no(Play, player="a", text="K"), NotAllowed)
    assert isinstance(m.no(TrusteeAct, version=m.state.version - 1), StaleCommand)
    ev = m.do(TrusteeAct, version=m.state.version)
    assert ev[0].type == "CardsPlayed" and ev[0].by == "trustee" and ev[0].reading.combo().rank == "J"
    # trusteeship from timeouts may be cancelled; the count stays
    m.do(Play, player="b", text="Q")
    m.do(CancelTrustee, player="a")
    assert m.state.seat(0).trustee is None and m.state.deadline().kind == "turn"
    ev = m.do(TurnTimeout, version=m.state.version)
    assert ev[0].count == 4 and ev[1].type == "TrusteeshipStarted"


def test_timeouts_before_trustee_is_configurable() -> None:
    m = dealt("3 5 7", "4 6 8", timeouts_before_trustee=1)
    ev = m.do(TurnTimeout, version=m.state.version)
    assert types(ev)[:2] == ["TurnTimedOut", "TrusteeshipStarted"]
    assert "超時一次" in ev[0].notice_zh


@pytest.mark.parametrize("phase", ["seating", "finished"])
def test_stale_turn_timeouts(phase) -> None:
    m = M()
    if phase == "finished":
        m.deal("3", "4")
        m.do(Play, player="a", text="3")
    assert isinstance(m.no(TurnTimeout, version=m.state.version), StaleCommand)
    assert isinstance(m.no(TrusteeAct, version=m.state.version), StaleCommand)


def test_trustee_act_for_a_player_not_in_trusteeship_is_stale() -> None:
    m = dealt("3 5", "4 6")
    assert isinstance(m.no(TrusteeAct, version=m.state.version), StaleCommand)


def test_a_player_who_cannot_beat_is_auto_passed_before_any_clock() -> None:
    m = dealt("2 3", "4 5", timeouts_before_trustee=1)
    m.do(RequestTrustee, player="b")
    ev = m.do(Play, player="a", text="2")
    assert [(e.type, e.player, getattr(e, "by", None)) for e in ev] == [
        ("CardsPlayed", "a", "player"), ("Passed", "b", "auto")]  # no timer, no trustee move
    assert m.state.turn == 0 and m.state.to_beat is None and m.state.trick == 2
    assert m.state.deadline().kind == "turn" and m.state.seat(1).timeouts == 0


@pytest.mark.parametrize("how, by", [("timeout", "timeout"), ("trustee", "trustee")])
def test_system_move_passes_when_nothing_beats(how, by) -> None:  # R-13.3 "if nothing beats, it passes"
    """decide never leaves such a turn open (R-6.4), so build the state by applying a play by hand."""
    from engine.rules.classify import classify
    from engine.match.events import CardsPlayed, Reading

    m = dealt("2 3", "4 5")
    if how == "trustee":
        m.do(RequestTrustee, player="b")
    two = m.state.seat(0).hand[-1]
    e = CardsPlayed(match_id="m", seq=m.state.version + 1, ts=m.now, command_id="by-hand", player="a",
                    cards=(two,), reading=Reading.of(classify([two])), by="player")
    m.state = apply(m.state, e)
    assert m.state.turn == 1 and m.state.to_beat is not None
    ev = m.do(TurnTimeout if how == "timeout" else TrusteeAct, version=m.state.version)
    assert [(x.type, getattr(x, "by", None)) for x in ev][-1] == ("Passed", by)
    assert m.state.turn == 0 and m.state.to_beat is None  # a leads the next trick


def test_request_and_cancel_trusteeship() -> None:
    m = dealt("3 5 7", "4 6 8")
    assert isinstance(m.no(RequestTrustee, player="z"), NotSeated)
    ev = m.do(RequestTrustee, player="b")
    assert [(e.type, e.reason) for e in ev] == [("TrusteeshipStarted", "requested")]
    assert isinstance(m.no(RequestTrustee, player="b"), NotAllowed)
    m.do(CancelTrustee, player="b")
    assert isinstance(m.no(CancelTrustee, player="b"), NotAllowed)
    m0 = M()
    assert isinstance(m0.no(RequestTrustee, player="a"), WrongPhase)


def test_trusteeship_round_trip_does_not_restart_the_turn_clock() -> None:
    m = dealt("3 5 7", "4 6 8", turn_seconds=15, trustee_delay_seconds=0.5)
    turn = m.state.deadline()
    assert turn.kind == "turn" and turn.at_ms == m.now + 15_000
    m.do(RequestTrustee, player="a")
    assert (m.state.deadline().kind, m.state.deadline().at_ms) == ("trustee", m.now + 500)
    m.do(CancelTrustee, player="a")
    back = m.state.deadline()
    assert (back.kind, back.at_ms) == ("turn", turn.at_ms)  # where it was, not now + 15 s
    m.do(Disconnect, player="b")  # the opponent's trouble gives a no time either
    assert m.state.deadline().at_ms == turn.at_ms
    m.do(Play, player="a", text="3")
    # the turn moved to b, who is in trusteeship since the disconnect
    assert (m.state.deadline().kind, m.state.deadline().at_ms) == ("trustee", m.now + 500)


@pytest.mark.parametrize("reclaim", [False, True])
def test_disconnect_and_reconnect(reclaim) -> None:
    m = dealt("3 5 7", "4 6 8", reclaim_after_reconnect=reclaim)
    ev = m.do(Disconnect, player="b")
    assert [(e.type, getattr(e, "reason", None)) for e in ev] == [
        ("PlayerDisconnected", None), ("TrusteeshipStarted", "disconnect")]
    assert isinstance(m.no(Disconnect, player="b"), NotAllowed)
    assert isinstance(m.no(CancelTrustee, player="b"), NotAllowed)  # still disconnected / not allowed
    ev = m.do(Reconnect, player="b")
    if reclaim:
        assert [(e.type, getattr(e, "reason", None)) for e in ev] == [
            ("PlayerReconnected", None), ("TrusteeshipEnded", "reconnected")]
        assert m.state.seat(1).trustee is None
    else:
        assert types(ev) == ["PlayerReconnected"]
        assert m.state.seat(1).trustee == "disconnect"
        e = m.no(CancelTrustee, player="b")
        assert isinstance(e, NotAllowed) and "R-13.4" in str(e)
    assert isinstance(m.no(Reconnect, player="b"), NotAllowed)


def test_disconnect_before_the_deal_becomes_trusteeship_at_the_deal() -> None:
    m = M()
    assert types(m.do(Disconnect, player="b")) == ["PlayerDisconnected"]
    m.do(Ready, player="a")
    m.do(Ready, player="b")
    ev = m.do(Deal, hands=((0,), (1,)), first=0)
    assert [(e.type, getattr(e, "reason", None)) for e in ev] == [
        ("HandDealt", None), ("TrusteeshipStarted", "disconnect")]


def test_escape_forfeit() -> None:
    m = dealt("3 5 7", "4 6 8 9")
    ev = m.do(Escape, player="b")
    assert types(ev) == ["PlayerEscaped", "MatchFinished"]
    assert ev[0].policy == "forfeit"
    f = ev[1]
    assert (f.winner, f.loser, f.kou, f.reason, f.cards_left) == ("a", "b", "escape", "escape", {"a": 3, "b": 4})
    assert isinstance(m.no(Escape, player="a"), MatchOver)


def test_escape_trustee_policy() -> None:
    m = dealt("3 5 7", "4 6 8 9", escape_policy="trustee")
    ev = m.do(Escape, player="a")
    assert [(e.type, getattr(e, "reason", getattr(e, "policy", None))) for e in ev] == [
        ("PlayerEscaped", "trustee"), ("TrusteeshipStarted", "escape")]
    assert m.state.deadline().kind == "trustee"
    assert isinstance(m.no(CancelTrustee, player="a"), NotAllowed)
    assert isinstance(m.no(Escape, player="a"), NotAllowed)
    assert isinstance(m.no(Reconnect, player="a"), NotAllowed)
    ev = m.do(TrusteeAct, version=m.state.version)
    assert ev[0].by == "trustee"


def test_escape_before_the_deal_is_a_leave() -> None:
    m = M()
    assert [(e.type, e.reason) for e in m.do(Escape, player="a")] == [("PlayerRemoved", "left")]


# ---- verify_play / can_play -----------------------------------------------------------------

def test_verify_and_can_play() -> None:
    m = dealt("3 3 4", "5 5")
    a_pair = tuple(m.state.seat(0).hand[:2])
    assert verify_play(m.state, "a", a_pair).kind == "pair"
    assert can_play(m.state, "a", a_pair)
    assert not can_play(m.state, "b", tuple(m.state.seat(1).hand))  # not b's turn
    assert not can_play(m.state, "a", (m.state.seat(0).hand[0], m.state.seat(0).hand[2]))
    with pytest.raises(NotACombination):
        verify_play(m.state, "a", (m.state.seat(0).hand[0], m.state.seat(0).hand[2]))


def test_command_for_another_match_is_refused() -> None:
    m = M()
    with pytest.raises(BadCommand):
        decide(m.state, Ready(command_id="x", match_id="other", player="a"), Context(now_ms=1))


# ---- every command in the phases where it does not fit -----------------------------------

def _in_phase(phase: str) -> M:
    m = M()
    if phase in ("playing", "finished"):
        m.deal("3 9", "4")
    if phase == "finished":
        m.do(Escape, player="b")
    return m


@pytest.mark.parametrize("phase, cls, kw, exc", [
    ("playing", Sit, {"player": "c"}, WrongPhase),
    ("playing", Leave, {"player": "a"}, WrongPhase),
    ("playing", Deal, {"hands": ((5,), (6,)), "first": 0}, WrongPhase),
    ("playing", ReadyTimeout, {"version": None}, StaleCommand),
    ("seating", Pass, {"player": "a"}, WrongPhase),
    ("seating", RequestTrustee, {"player": "a"}, WrongPhase),
    ("seating", CancelTrustee, {"player": "a"}, WrongPhase),
    ("seating", TurnTimeout, {"version": None}, StaleCommand),
    ("seating", TrusteeAct, {"version": None}, StaleCommand),
    ("finished", Sit, {"player": "c"}, MatchOver),
    ("finished", Play, {"player": "a", "text": "3"}, MatchOver),
    ("finished", Pass, {"player": "a"}, MatchOver),
    ("finished", RequestTrustee, {"player": "a"}, MatchOver),
    ("finished", Disconnect, {"player": "a"}, MatchOver),
    ("finished", Reconnect, {"player": "a"}, MatchOver),
    ("finished", Escape, {"player": "a"}, MatchOver),
    ("finished", Leave, {"player": "a"}, MatchOver),
    ("finished", TurnTimeout, {"version": None}, StaleCommand),
    ("finished", ReadyTimeout, {"version": None}, StaleCommand),
])
def test_commands_out_of_phase(phase, cls, kw, exc) -> None:
    m = _in_phase(phase)
    assert m.state.phase == phase
    kw = {k: (m.state.version if v is None and k == "version" else v) for k, v in kw.items()}
    e = m.no(cls, **kw)
    assert type(e) is exc, repr(e)
    assert str(e)  # a readable reason


def test_a_match_recorded_before_chain_bomb_twos_keeps_chains_to_a() -> None:  # D-4
    from engine.match.events import MatchCreated

    record = {k: v for k, v in load_config("points").to_record().items() if k != "chain_bomb_twos"}
    old = apply(MatchState(match_id="m"), MatchCreated(match_id="m", seq=1, ts=T0, command_id="c",
                                                       config=record))
    assert old.chain_bomb_twos is False
    # a new match whose command omits the key takes the default (true), and records it
    events = decide(MatchState(match_id="n"), CreateMatch(command_id="c", match_id="n", config=record),
                    Context(now_ms=T0))
    assert events[0].config["chain_bomb_twos"] is True


@pytest.mark.parametrize("twos", [True, False])
def test_check_stream_reads_plays_under_the_recorded_chain_bomb_twos(twos: bool) -> None:
    """An audit re-reads each play with the match's own setting: a K-A-2 chain is a
    reading only where the room allowed it."""
    from engine.match.events import CardsPlayed, Reading
    from engine.match.replay import check_stream
    from engine.rules.classify import classify

    m = dealt("K K K K A A A A 2 2 2 2 3", "4 5 6", **{"chain_bomb_twos": twos})
    cards = tuple(c for c in m.state.seat(0).hand if c % 54 // 4 != 0)  # all but the 3
    play = CardsPlayed(match_id="m", seq=m.state.version + 1, ts=T0, command_id="x", player="a",
                       cards=cards, reading=Reading.of(classify("K K K K A A A A 2 2 2 2")), by="player")
    problems = check_stream([*m.history, play])
    assert (problems == []) is twos, problems
    if not twos:
        assert any("is not a reading of" in p for p in problems)


# ---- refusals no other table reaches ------------------------------------------------------------

def _escaped_a() -> M:
    """a escaped under the trustee policy (R-12.1): the match goes on, a's seat is the system's."""
    m = dealt("3 4 5", "9 10 J", escape_policy="trustee")
    m.do(Escape, player="a")
    return m


def _trustee_a() -> M:
    """a asked for the trustee on their turn (R-13.5): the trustee's delay runs, no turn clock."""
    m = dealt("3 4 5", "9 10 J")
    m.do(RequestTrustee, player="a")
    return m


def _both_ready() -> M:
    m = M()
    m.do(Ready, player="a")
    m.do(Ready, player="b")
    return m


@pytest.mark.parametrize("case, make, cls, kw, exc, needle", [
    ("an escaped player plays (R-12.1)", _escaped_a, Play, {"player": "a", "text": "3"}, NotAllowed, "escaped"),
    ("an escaped player disconnects", _escaped_a, Disconnect, {"player": "a"}, NotAllowed, "escaped"),
    ("a ready timeout when both are ready", _both_ready, ReadyTimeout, {}, StaleCommand,
     "every seated player is ready"),
    ("a deal with an empty seat (R-1.2)", lambda: M(seat=False), Deal, {"hands": ((0,), (1,)), "first": 0},
     WrongPhase, "two players must be seated"),
    ("a clock extension while the trustee's delay runs", _trustee_a, ExtendClock,
     {"by_ms": 1000, "reason": "undelivered"}, StaleCommand, "no turn or ready clock runs (deadline trustee)"),
])
def test_the_rarer_refusals(case, make, cls, kw, exc, needle) -> None:
    m = make()
    if cls in (ReadyTimeout, ExtendClock):
        kw = {"version": m.state.version, **kw}
    e = m.no(cls, **kw)
    assert type(e) is exc and needle in str(e), (case, str(e))
