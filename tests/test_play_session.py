"""The terminal game's session (shuangkou.cli.play.PlaySession) on the embedded fake clock.

Time moves only when a test moves it (``workers.clock.FakeClock``): the bot's
own clock, the turn clock (R-13.1), trusteeship (R-13.3, R-13.5) and escapes
(R-12) are checked without sleeping or timing anything.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from shuangkou.cli.play import BOT, YOU, PlaySession, says, settlement_sentences
from engine.config import load_config
from engine.match.events import (
    CardsPlayed,
    MatchCreated,
    MatchFinished,
    Passed,
    PlayerSeated,
    Reading,
    TrusteeshipEnded,
    TurnTimedOut,
)
from engine.rules.cards import rank_of
from engine.rules.classify import classify
from projections.settlement import settle
from workers.clock import FakeClock

YOU_LEAD, BOT_LEADS = 3, 2  # seeds of the fair deal (checked in each test: who leads is part of the setup)


@pytest.fixture
def make():
    sessions: list[PlaySession] = []

    def _make(seed: int, config: str = "points", bot_seconds: float = 1.0, **changes):
        cfg = load_config(config).model_copy(update=changes)
        buf = io.StringIO()
        console = Console(file=buf, width=400, highlight=False, color_system=None)
        s = PlaySession(cfg, seed=seed, console=console, bot_seconds=bot_seconds, clock=FakeClock())
        sessions.append(s)
        s.start()
        s.pump()
        s.out = buf  # type: ignore[attr-defined]
        return s

    yield _make
    for s in sessions:
        s.close()


def drive(s: PlaySession, seconds: float) -> None:
    """Move the fake clock ``seconds`` on, stopping at every bot wake-up and timer on the way."""
    end = s.now_ms() + int(seconds * 1000)
    for _ in range(10_000):
        if s.done:
            return
        stops = [end]
        wake = s.next_wake_ms()
        if wake is not None:
            stops.append(wake)
        timer = s.timers.next_at()
        if timer is not None:
            stops.append(timer)
        target = max(min(stops), s.now_ms())
        s.timers.advance((target - s.now_ms()) / 1000)
        s.pump()
        if s.now_ms() >= end:
            return


def events(s: PlaySession, cls=None) -> list:
    return [e for e in s.events() if cls is None or isinstance(e, cls)]


def text(s: PlaySession) -> str:
    return s.out.getvalue()  # type: ignore[attr-defined]


def test_the_bot_plays_on_its_own_clock_and_never_times_out(make) -> None:
    s = make(BOT_LEADS)
    assert s.state().current_player == BOT
    assert not events(s, CardsPlayed)                     # the bot is still thinking
    assert s.next_wake_ms() == s.now_ms() + 1000          # …for its own 1 s
    drive(s, 1)
    assert [e.player for e in events(s, CardsPlayed)] == [BOT]
    assert s.state().current_player == YOU
    drive(s, 120)  # nobody types: your clock runs out three times, then trusteeship plays
    timeouts = events(s, TurnTimedOut)
    assert [e.player for e in timeouts][:3] == [YOU, YOU, YOU]
    assert all(e.player == YOU for e in timeouts), "the bot's turn must never time out"
    assert "the bot's clock ran out" not in text(s)
    assert sum(e.player == BOT for e in events(s, CardsPlayed)) >= 3


def test_a_line_typed_during_the_bots_turn_is_kept_for_your_turn(make) -> None:
    s = make(BOT_LEADS)
    s.handle_line("auto")
    assert "your line 'auto' is kept and tried as soon as it is your turn" in text(s)
    assert not events(s, CardsPlayed)
    drive(s, 1)  # the bot plays; then the kept line is tried against its play
    acts = [(type(e).__name__, e.player, e.by) for e in events(s) if isinstance(e, (CardsPlayed, Passed))]
    assert acts[0][:2] == ("CardsPlayed", BOT)
    assert acts[1][1:] == (YOU, "player")
    assert "trying the line you typed earlier, 'auto'" in text(s)


def test_a_line_after_the_match_moved_on_is_tried_against_the_new_table(make) -> None:
    s = make(YOU_LEAD)
    assert s.state().current_player == YOU
    drive(s, 15)  # your clock runs out: the system plays for you, the bot answers on its clock
    drive(s, 1)
    assert [e.player for e in events(s, TurnTimedOut)] == [YOU]
    if s.state().current_player != YOU:
        drive(s, 1)
    s.handle_line("auto")
    out = text(s)
    assert "While you typed, the match moved on (your clock ran out; the system played" in out
    assert "is tried against the table as it is now" in out
    assert events(s)[-1].player in (YOU, BOT) and "Not accepted" not in out
    last_you = [e for e in events(s) if isinstance(e, (CardsPlayed, Passed)) and e.player == YOU][-1]
    assert last_you.by == "player"


@pytest.mark.parametrize("trustee_moves_first", [False, True])
def test_cancel_after_trustee_takes_control_back_first_try(make, trustee_moves_first: bool) -> None:
    s = make(YOU_LEAD)
    s.handle_line("trustee")
    s.pump()
    if trustee_moves_first:  # the trustee plays for you before 'cancel' arrives
        drive(s, s.config.trustee_delay_seconds)
        assert any(e.player == YOU and e.by == "trustee" for e in events(s, CardsPlayed))
    s.handle_line("cancel")
    s.pump()
    assert [e.reason for e in events(s, TrusteeshipEnded)] == ["cancelled"]
    assert "Not accepted" not in text(s)
    assert not s.state().seat(0).trusteed
    played = len(events(s, CardsPlayed))
    drive(s, 5)  # no trustee plays after the cancel
    assert not any(e.player == YOU and e.by == "trustee" for e in events(s, CardsPlayed)[played:])


def test_quit_states_the_price_asks_and_only_then_escapes(make) -> None:
    s = make(YOU_LEAD)
    s.handle_line("quit")
    out = text(s)
    assert "escape policy is forfeit (R-12.2: points forfeit)" in out
    assert "you pay 120 points" in out and "12·X = 12·10 = 120" in out
    assert "Type 'yes' (or 'y') to escape" in out
    assert s.state().phase == "playing"
    s.handle_line("no")
    s.pump()
    assert "You stay in the match." in text(s) and s.state().phase == "playing"
    s.handle_line("quit")
    s.handle_line("yes")
    s.pump()
    assert s.state().phase == "finished" and s.done
    result = settle(s.events())
    assert result.kou == "escape" and result.scores[YOU] == -120   # the price it stated
    assert "You escaped: the match was forfeited" in text(s)


def test_quit_in_a_wealth_room_after_bombs_prices_each_term(make) -> None:
    s = make(YOU_LEAD, "wealth")
    s.handle_line("quit")
    out = text(s)
    assert "escape policy is forfeit (R-12.3: wealth, escaped before any card was played)" in out
    assert "The bot receives floor(" in out and "go to no one" in out
    stated = int(out.split("you pay ")[1].split(" coins")[0])
    s.handle_line("yes")
    s.pump()
    assert settle(s.events()).scores[YOU] == -stated


def test_quit_under_the_trustee_policy_explains_and_plays_on(make) -> None:
    s = make(YOU_LEAD, escape_policy="trustee")
    s.handle_line("quit")
    assert "escape policy is trustee (R-12.1)" in text(s) and "you cannot take them back" in text(s)
    s.handle_line("yes")
    s.pump()
    assert s.escaped and s.state().phase == "playing"
    s.handle_line("3")
    assert "You escaped: the system plays your cards until the end" in text(s)
    s.handle_eof()
    assert not s.done                       # piped input may end: the match still plays out
    drive(s, 600)
    assert s.finished and settle(s.events()) is not None


def test_a_refusal_names_the_cards_you_do_not_hold(make) -> None:
    s = make(YOU_LEAD)
    twos = sum(1 for c in s.state().seat(0).hand if rank_of(c) == 12)
    s.handle_line("2 2 2 2 2 2 2 2")
    out = text(s)
    assert f"Not accepted: you do not hold {' '.join(['2'] * (8 - twos))} (you named 2 2 2 2 2 2 2 2; " in out
    assert "does not hold" not in out and "you does" not in out


def test_settlement_reads_as_sentences_with_every_term(make) -> None:
    s = make(YOU_LEAD, bot_seconds=0)
    for _ in range(200):
        if s.done:
            break
        if s.state().current_player == YOU:
            s.handle_line("auto")
        drive(s, 1)
    assert s.finished
    out = text(s)
    result = settle(s.events())
    settlement = out.split("Settlement (points room, points):")[1]
    assert f"{says(result.winner, 'win').capitalize()}." in settlement
    for needle in ("Base score X = ", "so the kou multiplier a = ", "Win term X·a·b = ",
                   "Contribution (R-8.5)", f"You: {result.scores[YOU]:+d} points."):
        assert needle in settlement, needle
    assert "{" not in settlement and "you wins" not in out.lower() and "bot win " not in out


def test_settlement_sentences_grammar() -> None:
    cfg = load_config("points")
    env = iter(range(1, 100))
    e = lambda: {"match_id": "m", "seq": next(env), "ts": 1, "command_id": "c"}  # noqa: E731
    evs = [MatchCreated(**e(), config=cfg.to_record()),
           PlayerSeated(**e(), player=YOU, seat=0, balance=150, level=2, base=10),
           PlayerSeated(**e(), player=BOT, seat=1, balance=150, level=2, base=10),
           CardsPlayed(**e(), player=BOT, cards=(), reading=Reading.of(classify("7 7 7 7 7 7 7"))),
           MatchFinished(**e(), winner=BOT, loser=YOU, cards_left={BOT: 0, YOU: 12}, kou="double", reason="out")]
    lines = settlement_sentences(settle(evs), "points")
    assert lines[0] == "The bot wins."
    assert "You hold 12 cards: a double kou (雙扣), so the kou multiplier a = 4 (R-7)." in lines
    assert "Doubling b = 8: the bot won with effective xiang 7: played 7 7 7 7 7 7 7 (7-xiang) (R-8.4)." in lines
    assert "Win term X·a·b = 10·4·8 = 320, from you to the bot (R-8.6)." in lines
    assert any("X·(c_bot − c_you) = 10·(4 − 0) = 40, to the bot." in x for x in lines)
    assert lines[-2:] == ["The bot: +360 points.", "You: -360 points."]
    joined = " ".join(lines)
    assert "{" not in joined and "you wins" not in joined and "you holds" not in joined
    assert says(YOU, "win") == "you win" and says(BOT, "win") == "the bot wins"


def test_a_refusal_of_a_suited_card_shows_the_suits_you_hold(make) -> None:
    """Naming one held card twice (``3H 3H`` with one 3H): the refusal lists the held cards of
    those ranks with their suits, so the player sees which one they lack."""
    from engine.rules.cards import card_label, format_cards, sort_cards

    s = make(YOU_LEAD)
    hand = s.state().seat(0).hand
    card = hand[0]
    label = card_label(card, True)
    same = [c for c in hand if card_label(c, True) == label]
    s.handle_line(" ".join([label] * (len(same) + 1)))
    held = format_cards(sort_cards(c for c in hand if rank_of(c) == rank_of(card)))
    assert f"you do not hold {label} (" in text(s) and f"of those ranks you hold: {held})" in text(s)
