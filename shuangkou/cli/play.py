"""``shuangkou play``: you against a bot, in the terminal.

Type cards in notation (``3 3``, ``10H 10S``, ``4 4 4 4 BJ``), ``pass`` (``p``),
``hint`` (the smallest legal play), ``auto``, ``trustee`` / ``cancel``, ``help``,
or ``quit`` (leaving a running match is an escape, R-12: ``quit`` first says
what escaping costs under this room's config and asks you to confirm).

The screen follows the match as it happens: the turn clock runs as in a real
room (R-13.1: when it runs out the system plays for you, after the configured
number of timeouts you are put in trusteeship, R-13.3), and the bot plays on
its own clock (``--bot-seconds``), whether or not you are typing.  A line you
type is never dropped: if it is not your turn yet it is kept and tried when
your turn comes; if the match moved on while you typed, it is tried against
the new table and the screen says so.

How it works: one thread reads standard input and puts each line on an event
queue; the timer workers put a wake-up on the same queue each time they commit
(``EmbeddedTimers(publish=…)``); the main loop takes the next item (or wakes
when the bot's clock is due) and brings the screen up to date.  Everything the
loop does is in :class:`PlaySession`, which tests drive with the embedded
fake clock (``workers.clock.FakeClock``): no sleeping, no timing.

Works with piped input and ends cleanly at end of input:

    printf '3\\npass\\nquit\\nyes\\n' | shuangkou play --seed 1
"""

from __future__ import annotations

import argparse
import math
import queue
import random
import re
import sys
import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.tools.levels import POLICIES

if TYPE_CHECKING:
    from rich.text import Text

YOU = "you"
BOT = "bot"
MAX_TURN_SECONDS = 86_400.0  # a day: anything longer is surely a typo
WARN_SECONDS = 5.0           # "5 s left" once per turn, when the clock is long enough to need it

HELP = """\
commands:
  <cards>       play cards in notation, e.g.  3   |  5 5  |  10H 10S  |  3 4 5 6 7  |  4 4 4 4 BJ
                ranks 3 4 5 6 7 8 9 10 J Q K A 2 (T = 10), jokers SJ BJ, optional suit S H C D
  pass, p       pass (only when following: a pass ends the trick)
  hint          show the smallest legal play (what trusteeship would play)
  auto          play that hint now (or pass when nothing beats)
  trustee       let the system play for you (take control back with 'cancel')
  cancel        take control back from trusteeship
  help          this text
  quit, q       leave the match: an escape (R-12); you are told its price and asked first
A line typed while the bot is to play is kept and tried when your turn comes."""

_PLAY_WORDS = ("pass", "p", "auto")


# ---------------------------------------------------------------- arguments

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="points", help="room config: points, wealth or a TOML path")
    parser.add_argument("--seed", type=int, help="seed for the deal (default: unpredictable)")
    parser.add_argument("--turn-seconds", metavar="SECONDS",
                        help="override the room's turn clock (seconds above 0)")
    parser.add_argument("--bot", default="trustee", choices=POLICIES,
                        help="the opponent: a level (easy, normal, hard; docs/BOTS.md) or a policy "
                             "(trustee, greedy, random; default: trusteeship, R-13.3)")
    parser.add_argument("--bot-seconds", metavar="SECONDS",
                        help="how long the bot thinks before it plays (default 1 on a terminal, "
                             "0 with piped input; never more than half the turn clock)")


def _seconds(option: str, text: str | None, *, allow_zero: bool) -> float | None:
    """A seconds option checked by hand so a bad value is one line (exit 2), never a traceback."""
    from shuangkou.cli import CliError

    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    low_ok = value >= 0 if allow_zero else value > 0
    if not (math.isfinite(value) and low_ok and value <= MAX_TURN_SECONDS):
        bound = "0 or more" if allow_zero else "above 0"
        raise CliError(f"{option} must be a number of seconds {bound} and at most "
                       f"{MAX_TURN_SECONDS:g}, got {text!r}")
    return value


# ---------------------------------------------------------------- words

def who(player: str) -> str:
    """``you`` / ``the bot``."""
    return "you" if player == YOU else "the bot"


def says(player: str, verb: str, third: str | None = None) -> str:
    """Subject and verb that agree: ``says(YOU, "win")`` → ``you win``, for the bot ``the bot wins``.

    >>> says(YOU, "win"), says(BOT, "win"), says(BOT, "pass", "passes"), says(YOU, "are", "is")
    ('you win', 'the bot wins', 'the bot passes', 'you are')
    """
    return f"{who(player)} {verb if player == YOU else (third or verb + 's')}"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _personal(reason: str) -> str:
    """An engine reason about player ``you`` with the verbs agreeing ("you does" → "you do")."""
    for wrong, right in (("you does ", "you do "), ("you is ", "you are "), ("you has ", "you have "),
                         ("you's ", "your ")):
        reason = re.sub(rf"\b{wrong}", right, reason)
    return reason


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


_KOU_WORDS = {"flat": "a flat kou (平扣)", "single": "a single kou (單扣)", "double": "a double kou (雙扣)"}


def settlement_sentences(s: Any, unit: str) -> list[str]:
    """The settlement as sentences, every term of the formula spelt out (R-7, R-8, R-12).

    ``s`` is a :class:`projections.settlement.Settlement`; ``unit`` ``points`` or ``coins``.
    """
    b = s.breakdown
    X = b["X"]
    w, l = s.winner, s.loser
    levels = b["X_from"]["levels"]
    out = [f"{_cap(says(w, 'win'))}."]
    out.append(f"Base score X = {X}: the base of the lower level of the two players ("
               + "; ".join(f"{who(p)}: level {v['level']}, base {v['base']}" for p, v in levels.items())
               + ") (R-8.2).")
    xi = b["xiang"]

    def xiang_text(p: str) -> str:
        x = xi[p]
        return "no bomb" if not x["xiang"] else f"effective xiang {x['xiang']}: {x['source']}"

    if s.kou == "escape":
        e = b["escape"]
        esc, opp = e["escaper"], e["opponent"]
        out.append(f"{_cap(who(esc))} escaped: the match was forfeited ({e['rule']}).")
        out.append(f"Penalty {e['penalty_formula']}.")
        if "contribution_formula" in e:
            out.append(f"{_cap(who(opp))}'s contribution {e['contribution_formula']} "
                       f"({xiang_text(opp)}); the escaper's own contribution counts 0.")
            out.append(f"Doubling term {e['doubling_formula']}.")
        out.append(f"So {says(esc, 'owe')} {e['formula']} {unit}.")
        cap = b.get("cap")
        if cap and cap.get("applied"):
            out.append(f"R-11.2: {who(esc)} held only {cap['balance']} {unit}, so {says(esc, 'pay')} {cap['paid']}.")
        out.append(f"{_cap(who(opp))} receives {e['received_formula']} {unit}"
                   + (f"; {s.burned} go to no one (R-12.3)." if s.burned else "."))
    else:
        left = s.cards_left.get(l, 0)
        out.append(f"{_cap(who(l))} {'hold' if l == YOU else 'holds'} {_plural(left, 'card')}: "
                   f"{_KOU_WORDS.get(s.kou, s.kou)}, so the kou multiplier a = {b['a']} (R-7).")
        if xi[w]["xiang"]:
            out.append(f"Doubling b = {b['b']}: {who(w)} won with {xiang_text(w)} (R-8.4).")
        else:
            out.append(f"Doubling b = 1: {who(w)} played no bomb (R-8.4: only the winner's bombs double).")
        out.append(f"Win term X·a·b = {X}·{b['a']}·{b['b']} = {b['win_term']}, "
                   f"from {who(l)} to {who(w)} (R-8.6).")
        cw, cl = b["c"][w], b["c"][l]
        contrib = b["contribution"][w]
        out.append(f"Contribution (R-8.5): c = {cw} for {who(w)} ({xiang_text(w)}), c = {cl} for {who(l)} "
                   f"({xiang_text(l)}); X·(c_{who(w).replace('the ', '')} − c_{who(l).replace('the ', '')}) "
                   f"= {X}·({cw} − {cl}) = {contrib}"
                   + (f", to {who(w)}." if contrib > 0 else (f", to {who(l)}." if contrib < 0 else ".")))
        if b.get("escaped_to_trustee"):
            out.append("An escape under the trustee policy is settled like any match (R-12.1).")
        cap = b.get("cap")
        if cap and cap.get("applied"):
            payer = cap["payer"]
            out.append(f"R-11.2: {who(payer)} held only {cap['balance']} {unit}, so "
                       f"{says(payer, 'pay')} {cap['paid']} instead of {cap['owed']}.")
    for p, n in s.scores.items():
        out.append(f"{_cap(who(p))}: {n:+d} {unit}.")
    return out


# ---------------------------------------------------------------- the session

class PlaySession:
    """One match in the terminal: the state of the screen and what each input does.

    Inputs arrive through :meth:`handle_line` / :meth:`handle_eof`; :meth:`pump`
    brings the screen up to date, lets the bot play when its clock is due and
    tries a kept line when your turn comes.  :meth:`next_wake_ms` says when
    :meth:`pump` must run again even if nothing arrives.  With a
    ``workers.clock.FakeClock``, tests move time with ``session.timers.advance``.
    """

    def __init__(self, config: Any, *, seed: int, console: Any, bot_policy: str = "trustee",
                 bot_seconds: float = 1.0, clock: Any = None, echo: bool = False,
                 wake: Any = None, server_seeds: Any = None):
        from engine.tools.bot import Bot
        from workers.clock import SystemClock
        from workers.embedded import EmbeddedTimers

        self.console = console
        self.config = config
        self.seed = seed
        self.echo = echo
        self.clock = clock if clock is not None else SystemClock()
        # the bot never thinks longer than half its turn clock: it must not time out
        self.bot_ms = int(min(bot_seconds, config.turn_seconds / 2) * 1000)
        self._wake = wake  # called (from a worker thread) after each timer commit
        from engine.service.shuffle import seeded_server_seeds

        # the seed replays the same fair deal (docs/FAIRNESS.md) unless the caller passes a
        # secret server seed source (the command line does when no --seed is given)
        self.timers = EmbeddedTimers("memory", clock=self.clock, rng=random.Random(seed),
                                     publish=self._on_timer_commit,
                                     server_seeds=server_seeds if server_seeds is not None else seeded_server_seeds(seed))
        self.service = self.timers.service
        self.bot = Bot(bot_policy, random.Random(seed + 1))
        self.match_id = f"play-{seed}"
        self.k = 0
        self.seen = 0                                  # events already shown
        self.rendered: tuple[int, bool] | None = None  # (version, your turn) last drawn
        self.prompt_open = False                       # a prompt waits at the end of the screen
        self.bot_turn: tuple[int, int] | None = None   # (version, since ms) of the bot's current turn
        self.warned: int | None = None                 # version at which "5 s left" was said
        self.pending: deque[str] = deque()             # lines kept for your turn
        self.moved_on: list[str] = []                  # what happened to you since your last line
        self.confirming_escape = False
        self.escaped = False
        self.done = False
        self.finished = False

    # -- plumbing -----------------------------------------------------------------------
    def _on_timer_commit(self, command: Any, outcome: Any) -> None:
        if self._wake is not None:
            self._wake()

    def close(self) -> None:
        self.timers.stop()

    def cid(self) -> str:
        self.k += 1
        return f"{self.match_id}:{self.k}"

    def now_ms(self) -> int:
        return self.timers.now_ms()

    def state(self) -> Any:
        return self.service.load_state(self.match_id)

    def execute(self, cmd: Any) -> Any:
        return self.service.execute(cmd)

    def say(self, text: str | Text, **kw: Any) -> None:
        """Print one line, first closing an open prompt so nothing lands after ``your play>``."""
        if self.prompt_open:
            self.console.print()
            self.prompt_open = False
        self.console.print(text, **kw)

    def events(self) -> list[Any]:
        return list(self.timers.store.load(self.match_id))

    # -- start ----------------------------------------------------------------------------
    def start(self) -> None:
        from engine.match.commands import CreateMatch, Ready, Sit

        mid = self.match_id
        levels = self.config.levels
        bal = levels[min(2, len(levels) - 1)].need
        from engine.service.service import FixedBalances

        self.service.balances = FixedBalances({YOU: bal, BOT: bal})  # the local game's ledger
        self.say(f"[bold]火拼雙扣[/bold] — you against the bot ({self.config.name} room, "
                 f"{self.config.turn_seconds:g} s a turn, seed {self.seed}). Type 'help' for commands.")
        for cmd in (CreateMatch(command_id=self.cid(), match_id=mid, config=self.config.to_record()),
                    Sit(command_id=self.cid(), match_id=mid, player=YOU),
                    Sit(command_id=self.cid(), match_id=mid, player=BOT),
                    Ready(command_id=self.cid(), match_id=mid, player=YOU),
                    Ready(command_id=self.cid(), match_id=mid, player=BOT)):
            out = self.execute(cmd)
            if out.rejection is not None:
                raise RuntimeError(f"could not start the match: {out.rejection}")

    # -- the loop's step ------------------------------------------------------------------
    def pump(self) -> None:
        """Show what happened, let the bot play if its clock is due, try a kept line; redraw."""
        for _ in range(1000):  # bounded: each pass either acts or stops
            st = self.state()
            self._show_new_events()
            if st.phase == "finished":
                self._finish()
                return
            if self._bot_due(st):
                self._bot_play(st)
                continue
            if self.pending and self._your_turn(st):
                line = self.pending.popleft()
                self.say(f"[dim]Your turn: trying the line you typed earlier, {line!r}.[/dim]")
                self._act(line, st)
                continue
            break
        self._maybe_warn(st)
        self._render(st)

    def next_wake_ms(self) -> int | None:
        """When :meth:`pump` must run even if no input or timer arrives (None: not before one)."""
        if self.done:
            return None
        st = self.state()
        if self._bot_moves(st):
            since = self.bot_turn[1] if self.bot_turn and self.bot_turn[0] == st.version else self.now_ms()
            return since + self.bot_ms
        d = st.deadline()
        if (d is not None and self._your_turn(st) and self.warned != st.version
                and self.config.turn_seconds > 2 * WARN_SECONDS):
            return d.at_ms - int(WARN_SECONDS * 1000)
        return None

    # -- whose turn ---------------------------------------------------------------------
    def _your_turn(self, st: Any) -> bool:
        return st.phase == "playing" and st.current_player == YOU and not st.seat(st.turn).trusteed

    def _bot_moves(self, st: Any) -> bool:
        return st.phase == "playing" and st.current_player == BOT and not st.seat(st.turn).trusteed

    def _bot_due(self, st: Any) -> bool:
        if not self._bot_moves(st):
            return False
        if self.bot_turn is None or self.bot_turn[0] != st.version:
            self.bot_turn = (st.version, self.now_ms())
        return self.now_ms() >= self.bot_turn[1] + self.bot_ms

    def _bot_play(self, st: Any) -> None:
        from engine.match.commands import Pass, Play
        from engine.tools.bot import choose_for

        play = choose_for(self.bot, st, BOT)  # the bot sees its own view only (docs/BOTS.md)
        if play is None:
            cmd: Any = Pass(command_id=self.cid(), match_id=self.match_id, player=BOT)
        else:
            cmd = Play(command_id=self.cid(), match_id=self.match_id, player=BOT, cards=play.cards)
        out = self.execute(cmd)
        if out.rejection is not None and out.rejection.code != "not_your_turn":  # a timer moved first
            self.say(f"[red]the bot's move was refused: {out.rejection}[/red]")
        self.bot_turn = None

    # -- input ----------------------------------------------------------------------------
    def handle_eof(self) -> None:
        st = self.state()
        if st.phase == "finished":
            self.done = True
            return
        if self.escaped:  # the system plays for you to the end (escape policy trustee)
            self.say("[dim]end of input: the system plays your cards to the end of the match.[/dim]")
            return
        self.say("[dim]end of input: leaving the terminal (the match is not finished).[/dim]")
        self.done = True

    def handle_line(self, raw: str) -> None:
        """One line the person typed (Enter pressed)."""
        line = raw.strip()
        if self.prompt_open and self.echo:  # piped input: show it after the prompt
            self.console.print(line, highlight=False, markup=False)
            self.prompt_open = False
        elif self.echo:
            self.say(f"> {line}", highlight=False, markup=False)
        self.prompt_open = False
        word = line.lower()
        st = self.state()
        if self.confirming_escape:
            self.confirming_escape = False
            if word in ("y", "yes"):
                self._escape()
            else:
                self.say("You stay in the match.")
            self.rendered = None  # show the table again
            return
        if not word:
            return
        if word in ("help", "?", "h"):
            self.say(HELP, highlight=False, markup=False)
            return
        if st.phase == "finished":
            self.say(f"The match is over: {line!r} was not applied.")
            return
        if word in ("quit", "q", "exit"):
            self._ask_escape(st)
            return
        if word == "hint":
            self._hint(st)
            return
        if word in ("trustee", "cancel"):
            self._act(line, st)
            return
        if self.escaped:
            self.say(f"You escaped: the system plays your cards until the end, so {line!r} was not sent.")
            return
        me = st.seat(st.seat_of(YOU))
        if me.trusteed:
            self.say(f"You are in trusteeship: the system plays for you, so {line!r} was not sent. "
                     "Type 'cancel' to take control back first.")
            return
        if not self._your_turn(st):
            self.pending.append(line)
            self.say(f"It is the bot's turn: your line {line!r} is kept and tried as soon as it is your turn.")
            return
        self._act(line, st)

    # -- doing things -------------------------------------------------------------------
    def _hint(self, st: Any) -> None:
        from engine.rules.cards import format_ranks
        from engine.tools.bot import hint

        if not self._your_turn(st):
            self.say("hint: it is not your turn.")
            return
        h = hint(st, YOU)
        self.say("hint: " + ("pass (nothing beats)" if h is None else
                             f"{format_ranks(h.cards)} — {h.combo.describe()}"))

    def _act(self, line: str, st: Any) -> None:
        """Send the command a line stands for, against the match as it is now."""
        from engine.match.commands import CancelTrustee, Pass, Play, RequestTrustee
        from engine.rules.cards import CardNotationError, format_ranks, parse_tokens
        from engine.tools.bot import hint

        word = line.lower()
        if self.moved_on and word not in ("trustee", "cancel"):
            what = "; ".join(self.moved_on)
            self.say(f"[yellow]While you typed, the match moved on ({what}); {line!r} is tried "
                     f"against the table as it is now.[/yellow]")
        self.moved_on = []
        mid = self.match_id
        cmd: Any
        if word == "trustee":
            cmd = RequestTrustee(command_id=self.cid(), match_id=mid, player=YOU)
        elif word == "cancel":
            cmd = CancelTrustee(command_id=self.cid(), match_id=mid, player=YOU)
        elif word in ("pass", "p"):
            cmd = Pass(command_id=self.cid(), match_id=mid, player=YOU)
        elif word == "auto":
            h = hint(st, YOU)
            if h is None:
                cmd = Pass(command_id=self.cid(), match_id=mid, player=YOU)
            else:
                self.say(f"auto: {format_ranks(h.cards)}")
                cmd = Play(command_id=self.cid(), match_id=mid, player=YOU, cards=h.cards)
        else:
            try:
                parse_tokens(line)
            except CardNotationError as exc:
                self.say(f"[red]{exc}[/red]  (type 'help')", highlight=False)
                return
            cmd = Play(command_id=self.cid(), match_id=mid, player=YOU, text=line)
        out = self.execute(cmd)
        if out.rejection is not None:
            self._refused(line, out.rejection, st)

    def _refused(self, line: str, rejection: Any, st: Any) -> None:
        from engine.rules.cards import format_cards, missing_in_hand, parse_tokens, rank_of, sort_cards

        if rejection.code == "not_in_hand":
            hand = st.seat(st.seat_of(YOU)).hand
            try:
                missing = missing_in_hand(line, hand)
                ranks = {r for r, _ in parse_tokens(line)}
            except ValueError:
                missing, ranks = [], set()
            if missing:
                held = [c for c in hand if rank_of(c) in ranks]
                have = format_cards(sort_cards(held)) if held else "none of them"  # suits: which you hold
                self.say(f"[red]Not accepted: you do not hold {' '.join(missing)} "
                         f"(you named {' '.join(line.split())}; of those ranks you hold: {have}).[/red]",
                         highlight=False)
                return
        self.say(f"[red]Not accepted: {_personal(str(rejection))}[/red]", highlight=False)

    def _ask_escape(self, st: Any) -> None:
        if self.escaped:
            self.say("You have already escaped: the system plays your cards until the end.")
            return
        for line in self.escape_price(st):
            self.say(line, highlight=False, markup=False)
        self.say("Escape? Type 'yes' (or 'y') to escape, anything else to stay.")
        self.confirming_escape = True
        self.prompt_open = False
        self.console.print("escape? ", end="")
        self.prompt_open = True

    def escape_price(self, st: Any) -> list[str]:
        """What escaping now costs under this room's config (R-12), in sentences."""
        from engine.match.events import MatchFinished, PlayerEscaped
        from projections.settlement import settle

        cfg = self.config
        unit = "coins" if cfg.mode == "wealth" else "points"
        if st.phase != "playing":
            return ["Leaving now, before the cards are dealt, costs nothing."]
        events = self.events()
        env = {"match_id": self.match_id, "ts": self.now_ms(), "command_id": "what-if"}
        cards = {p: len(st.seat(st.seat_of(p)).hand) for p in (YOU, BOT)}
        if cfg.escape_policy == "forfeit":
            what_if = [*events,
                       PlayerEscaped(**env, seq=st.version + 1, player=YOU, policy="forfeit"),
                       MatchFinished(**env, seq=st.version + 2, winner=BOT, loser=YOU, cards_left=cards,
                                     kou="escape", reason="escape")]
            s = settle(what_if)
            assert s is not None
            e = s.breakdown["escape"]
            terms = [f"the penalty {e['penalty_formula']}"]
            if "contribution_formula" in e:
                terms += [f"the bot's contribution {e['contribution_formula']}",
                          f"the doubling term {e['doubling_formula']}"]
            out = [f"This room's escape policy is forfeit ({e['rule']}): escaping ends the match now "
                   f"and you pay {-s.scores[YOU]} {unit}: " + ", plus ".join(terms) + f"; in all {e['formula']}."]
            if s.breakdown.get("cap") and s.breakdown["cap"].get("applied"):
                out.append(f"R-11.2: you hold only {s.breakdown['cap']['balance']} {unit}, so you pay that.")
            out.append(f"The bot receives {e['received_formula']} {unit}"
                       + (f"; {s.burned} go to no one." if s.burned else "."))
            return out
        # trustee policy: the system plays for you to the end; normal settlement
        n = cards[YOU]
        kou = cfg.kou.kou_of(n)
        what_if = [*events, MatchFinished(**env, seq=st.version + 1, winner=BOT, loser=YOU,
                                          cards_left={BOT: 0, YOU: n}, kou=kou, reason="out")]
        s = settle(what_if)
        assert s is not None
        b = s.breakdown
        return [f"This room's escape policy is trustee (R-12.1): escaping hands your cards to the system "
                f"until the end of the match, you cannot take them back, and the match is settled as usual "
                f"(R-8.6). For example, if the bot went out now while you hold {_plural(n, 'card')}, you "
                f"would pay {-s.scores[YOU]} {unit} (X·a·b = {b['win_formula'].split('= ', 1)[1]} plus "
                f"contribution {b['contribution_formula']})."]

    def _escape(self) -> None:
        from engine.match.commands import Escape

        out = self.execute(Escape(command_id=self.cid(), match_id=self.match_id, player=YOU))
        if out.rejection is not None:
            self.say(f"[red]Not accepted: {_personal(str(out.rejection))}[/red]")
            return
        self.escaped = True
        if self.config.escape_policy == "trustee":
            self.say("You escaped; the system plays your cards until the end of the match.")

    # -- the screen ---------------------------------------------------------------------
    def _show_new_events(self) -> None:
        from engine.match.events import (
            CardsPlayed, HandDealt, MatchFinished, Passed, PlayerEscaped, TrusteeshipEnded,
            TrusteeshipStarted, TurnTimedOut,
        )
        from engine.rules.cards import format_ranks

        for e in self.timers.store.load(self.match_id, after=self.seen):
            self.seen = e.seq
            p = getattr(e, "player", None)
            tag = "[cyan]you[/cyan]" if p == YOU else "[magenta]the bot[/magenta]"
            if isinstance(e, HandDealt):
                first = YOU if e.first == 0 else BOT
                lead = (f" ({says(first, 'hold')} the lead card {format_ranks([e.lead_card])})"
                        if e.lead_card is not None else "")
                self.say(f"Cards dealt: 27 each. {_cap(says(first, 'lead'))} the first trick{lead}.")
            elif isinstance(e, CardsPlayed):
                by = "" if e.by == "player" else f" [dim]({e.by})[/dim]"
                verb = "play" if p == YOU else "plays"
                self.say(f"  {tag} {verb} [bold]{format_ranks(e.cards)}[/bold] — "
                         f"{e.reading.combo().describe()}{by}")
                if p == YOU and e.by != "player":
                    self.moved_on.append(f"the system played {format_ranks(e.cards)} for you ({e.by})")
            elif isinstance(e, Passed):
                verb = "pass" if p == YOU else "passes"
                by = "" if e.by == "player" else f" [dim]({e.by}{': cannot beat' if e.by == 'auto' else ''})[/dim]"
                self.say(f"  {tag} {verb}{by}")
                if p == YOU and e.by not in ("player", "auto"):
                    self.moved_on.append(f"the system passed for you ({e.by})")
            elif isinstance(e, TurnTimedOut):
                whose = "your" if p == YOU else "the bot's"
                self.say(f"  [yellow]{whose} clock ran out ({e.count} of "
                         f"{self.config.timeouts_before_trustee}): {e.notice_zh}[/yellow]")
                self.say(f"  [yellow]{e.notice_en}[/yellow]")
                if p == YOU:
                    self.moved_on.append("your clock ran out")
            elif isinstance(e, TrusteeshipStarted):
                self.say(f"  [yellow]{tag} {'are' if p == YOU else 'is'} now in trusteeship ({e.reason})[/yellow]")
            elif isinstance(e, TrusteeshipEnded):
                self.say(f"  {tag} {'take' if p == YOU else 'takes'} control back ({e.reason})")
            elif isinstance(e, PlayerEscaped):
                self.say(f"  [red]{tag} escaped (escape policy {e.policy})[/red]")
            elif isinstance(e, MatchFinished):
                left = ", ".join(f"{who(q)} {n}" for q, n in e.cards_left.items())
                why = f"{says(e.winner, 'go', 'goes')} out" if e.reason == "out" else f"{who(e.loser)} escaped"
                self.say(f"[bold]{_cap(says(e.winner, 'win'))}[/bold] ({why}; cards left: {left}).")

    def _maybe_warn(self, st: Any) -> None:
        d = st.deadline()
        if (d is None or not self._your_turn(st) or self.warned == st.version
                or self.config.turn_seconds <= 2 * WARN_SECONDS):
            return
        left = (d.at_ms - self.now_ms()) / 1000
        if left <= WARN_SECONDS:
            self.warned = st.version
            self.say(f"[yellow]{left:.0f} s left on your clock.[/yellow]")
            prompt = "escape? " if self.confirming_escape else f"[{max(0.0, left):.0f}s] your play> "
            self.console.print(prompt, end="", markup=False)
            self.prompt_open = True

    def _render(self, st: Any) -> None:
        if self.done or st.phase != "playing":
            return
        if self.confirming_escape:
            if not self.prompt_open:
                self.console.print("escape? ", end="")
                self.prompt_open = True
            return
        key = (st.version, self._your_turn(st))
        if self.rendered == key:  # nothing new on the table: at most the prompt again
            if self._your_turn(st) and not self.prompt_open:
                self._prompt(st)
            return
        self.rendered = key
        self._table(st)
        me = st.seat(st.seat_of(YOU))
        if me.trusteed:
            why = "you escaped" if me.trustee == "escape" else me.trustee
            more = "" if me.trustee == "escape" else " Type 'cancel' to take control back."
            self.say(f"[yellow]You are in trusteeship ({why}): the system plays for you.{more}[/yellow]")
            return
        if not self._your_turn(st):
            self.say("[dim]The bot is to play…[/dim]")
            return
        self._prompt(st)

    def _prompt(self, st: Any) -> None:
        d = st.deadline()
        clock = f"[{max(0.0, (d.at_ms - self.now_ms()) / 1000):.0f}s] " if d is not None else ""
        self.console.print(f"{clock}your play> ", end="", markup=False)
        self.prompt_open = True

    def _table(self, st: Any) -> None:
        from rich.text import Text

        from engine.rules.cards import card_label, format_ranks, rank_of, sort_cards

        you = st.seat(st.seat_of(YOU))
        bot = st.seat(st.seat_of(BOT))
        hand = sort_cards(you.hand)
        text = Text("Your hand (%d): " % len(hand))
        prev_rank = None
        for c in hand:
            r = rank_of(c)
            if prev_rank is not None:
                text.append("  " if r != prev_rank else " ")
            style = "bold red" if r >= 13 else ("bold" if r >= 11 else "")
            text.append(card_label(c), style=style)
            prev_rank = r
        self.say(text)
        line = f"The bot holds [bold]{len(bot.hand)}[/bold] cards"
        if bot.trusteed:
            line += " (trusteeship)"
        if st.to_beat is not None:
            owner = who(st.seats[st.to_beat.seat].player)
            line += (f".  To beat ({owner}): [bold]{format_ranks(st.to_beat.cards)}[/bold]"
                     f" — {st.to_beat.combo.describe()}")
        elif st.current_player == YOU:
            line += ".  You lead: play any combination."
        else:
            line += "."
        self.say(line)

    def _finish(self) -> None:
        from projections.settlement import settle

        if self.done:
            return
        self.done = self.finished = True
        s = settle(self.events())
        if s is None:  # pragma: no cover - a finished match always settles
            self.say("The match has not finished: no settlement.")
            return
        unit = "coins" if s.mode == "wealth" else "points"
        self.say(f"[bold]Settlement[/bold] ({self.config.name} room, {unit}):")
        for line in settlement_sentences(s, unit):
            self.say("  " + line, highlight=False, markup=False)


# ---------------------------------------------------------------- the real-time loop

def _reader(inbox: queue.Queue[tuple[str, str | None]], stream: Any) -> None:
    """Read lines from ``stream`` into the inbox; ``("eof", None)`` at the end."""
    try:
        for line in iter(stream.readline, ""):
            inbox.put(("line", line))
    except (OSError, ValueError):  # closed under us
        pass
    inbox.put(("eof", None))


def run_loop(session: PlaySession, inbox: queue.Queue[tuple[str, str | None]]) -> None:
    """Take inputs and timer wake-ups from the inbox until the session is done."""
    session.pump()
    eof = False
    while not session.done:
        wake = session.next_wake_ms()
        timeout = 0.5 if wake is None else max(0.0, min(0.5, (wake - session.now_ms()) / 1000))
        try:
            kind, line = inbox.get(timeout=timeout)
        except queue.Empty:
            kind, line = "tick", None
        if kind == "line" and line is not None and not eof:
            session.handle_line(line)
        elif kind == "eof" and not eof:
            eof = True
            session.handle_eof()
        session.pump()


def run(args: argparse.Namespace, stdin: Any = None, argv_console: Any = None) -> int:
    from rich.console import Console

    from shuangkou.cli import CliError
    from engine.config import ConfigError, load_config

    stream = stdin if stdin is not None else sys.stdin
    turn = _seconds("--turn-seconds", args.turn_seconds, allow_zero=False)
    bot_s = _seconds("--bot-seconds", getattr(args, "bot_seconds", None), allow_zero=True)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    if turn is not None:
        config = config.model_copy(update={"turn_seconds": turn})
    tty = bool(getattr(stream, "isatty", lambda: False)())
    if bot_s is None:
        bot_s = 1.0 if tty else 0.0
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    console = argv_console or Console(highlight=False)
    inbox: queue.Queue[tuple[str, str | None]] = queue.Queue()
    from engine.service.shuffle import secure_server_seed

    session = PlaySession(config, seed=seed, console=console, bot_policy=args.bot, bot_seconds=bot_s,
                          echo=not tty, wake=lambda: inbox.put(("timer", None)),
                          server_seeds=None if args.seed is not None else secure_server_seed)
    try:
        session.start()
        threading.Thread(target=_reader, args=(inbox, stream), name="play-stdin", daemon=True).start()
        run_loop(session, inbox)
        return 0
    finally:
        session.close()


__all__: Sequence[str] = ["PlaySession", "run", "run_loop", "says", "settlement_sentences", "who"]
