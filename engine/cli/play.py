"""``shuangkou play``: you against the trusteeship bot, in the terminal.

Type cards in notation (``3 3``, ``10H 10S``, ``4 4 4 4 BJ``), ``pass`` (``p``),
``hint`` (the smallest legal play), ``help``, or ``quit`` (leaving a running
match is an escape, R-12: the room's escape policy applies).  The turn clock
runs as in a real room: when it runs out the engine's TurnTimeout path plays
for you (R-13.1) and after the configured number of timeouts you are put in
trusteeship (R-13.3).  Works with piped input and ends cleanly at end of input:

    echo -e "3\\npass\\nquit" | shuangkou play --seed 1
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

YOU = "you"
BOT = "bot"

HELP = """\
commands:
  <cards>       play cards in notation, e.g.  3   |  5 5  |  10H 10S  |  3 4 5 6 7  |  4 4 4 4 BJ
                ranks 3 4 5 6 7 8 9 10 J Q K A 2 (T = 10), jokers SJ BJ, optional suit S H C D
  pass, p       pass (only when following: a pass ends the trick)
  hint          show the smallest legal play (what trusteeship would play)
  auto          play that hint now (or pass when nothing beats)
  trustee       let the system play for you (cancel with 'cancel')
  help          this text
  quit, q       leave the match (an escape: the room's escape policy applies)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="points", help="room config: points, wealth or a TOML path")
    parser.add_argument("--seed", type=int, help="seed for the deal (default: unpredictable)")
    parser.add_argument("--turn-seconds", type=float, help="override the room's turn clock (seconds)")
    parser.add_argument("--bot", default="trustee", choices=("trustee", "greedy", "random"),
                        help="the opponent's policy (default: trusteeship, R-13.3)")


class _Game:
    def __init__(self, args: argparse.Namespace, console: Any):
        import random

        from engine.tools.bot import Bot
        from engine.config import load_config
        from workers.clock import SystemClock
        from workers.embedded import EmbeddedTimers

        self.console = console
        self.config = load_config(args.config)
        if args.turn_seconds is not None:
            self.config = self.config.model_copy(update={"turn_seconds": float(args.turn_seconds)})
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
        self.seed = seed
        self.clock = SystemClock()
        from engine.service.shuffle import secure_server_seed, seeded_server_seeds

        # --seed replays the same deal (a reproducible server seed); otherwise it is secret
        seeds = seeded_server_seeds(seed) if args.seed is not None else secure_server_seed
        self.timers = EmbeddedTimers("memory", clock=self.clock, rng=random.Random(seed), server_seeds=seeds)
        self.service = self.timers.service
        self.bot = Bot(args.bot, random.Random(seed + 1))
        self.match_id = f"play-{seed}"
        self.k = 0
        self.seen = 0  # events already shown

    def close(self) -> None:
        self.timers.stop()

    # -- commands ---------------------------------------------------------------------
    def cid(self) -> str:
        self.k += 1
        return f"{self.match_id}:{self.k}"

    def execute(self, cmd: Any) -> Any:
        out = self.service.execute(cmd)
        return out

    def state(self) -> Any:
        return self.service.load_state(self.match_id)

    def start(self) -> Any:
        from engine.match.commands import CreateMatch, Ready, Sit

        mid = self.match_id
        levels = self.config.levels
        bal = levels[min(2, len(levels) - 1)].need
        for cmd in (CreateMatch(command_id=self.cid(), match_id=mid, config=self.config.to_record()),
                    Sit(command_id=self.cid(), match_id=mid, player=YOU, balance=bal),
                    Sit(command_id=self.cid(), match_id=mid, player=BOT, balance=bal),
                    Ready(command_id=self.cid(), match_id=mid, player=YOU),
                    Ready(command_id=self.cid(), match_id=mid, player=BOT)):
            out = self.execute(cmd)
            if out.rejection is not None:
                raise RuntimeError(f"could not start the match: {out.rejection}")
        return self.state()

    # -- display ----------------------------------------------------------------------
    def show_new_events(self) -> None:
        from engine.rules.cards import format_ranks
        from engine.match.events import (
            CardsPlayed, HandDealt, MatchFinished, Passed, PlayerEscaped, TrusteeshipEnded,
            TrusteeshipStarted, TurnTimedOut,
        )

        events = self.timers.store.load(self.match_id, after=self.seen)
        for e in events:
            self.seen = e.seq
            who = "[cyan]you[/cyan]" if getattr(e, "player", None) == YOU else "[magenta]bot[/magenta]"
            if isinstance(e, HandDealt):
                first = YOU if e.first == 0 else BOT
                lead = f" (lead card {format_ranks([e.lead_card])})" if e.lead_card is not None else ""
                self.console.print(f"Cards dealt: 27 each. [bold]{first}[/bold] lead{'s' if first == BOT else ''}"
                                   f" the first trick{lead}.")
            elif isinstance(e, CardsPlayed):
                by = "" if e.by == "player" else f" [dim]({e.by})[/dim]"
                self.console.print(f"  {who} play{'s' if e.player == BOT else ''} "
                                   f"[bold]{format_ranks(e.cards)}[/bold] — {e.reading.combo().describe()}{by}")
            elif isinstance(e, Passed):
                by = "" if e.by == "player" else f" [dim]({e.by}{': cannot beat' if e.by == 'auto' else ''})[/dim]"
                self.console.print(f"  {who} pass{'es' if e.player == BOT else ''}{by}")
            elif isinstance(e, TurnTimedOut):
                self.console.print(f"  [yellow]{who} timed out ({e.count}): {e.notice_zh}[/yellow]")
                self.console.print(f"  [yellow]{e.notice_en}[/yellow]")
            elif isinstance(e, TrusteeshipStarted):
                self.console.print(f"  [yellow]{who} now in trusteeship ({e.reason})[/yellow]")
            elif isinstance(e, TrusteeshipEnded):
                self.console.print(f"  {who} take{'s' if e.player == BOT else ''} control back ({e.reason})")
            elif isinstance(e, PlayerEscaped):
                self.console.print(f"  [red]{who} escaped (policy {e.policy})[/red]")
            elif isinstance(e, MatchFinished):
                self.console.print(f"[bold]{'You win' if e.winner == YOU else 'The bot wins'}[/bold] "
                                   f"({e.reason}); kou {e.kou}; cards left: "
                                   + ", ".join(f"{p} {n}" for p, n in e.cards_left.items()))

    def show_table(self, st: Any) -> None:
        from rich.text import Text

        from engine.rules.cards import card_label, rank_of, sort_cards

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
        self.console.print(text)
        line = f"Bot holds [bold]{len(bot.hand)}[/bold] cards"
        if bot.trusteed:
            line += " (trusteeship)"
        if st.to_beat is not None:
            from engine.rules.cards import format_ranks

            owner = YOU if st.seats[st.to_beat.seat].player == YOU else BOT
            line += (f".  To beat ({owner}): [bold]{format_ranks(st.to_beat.cards)}[/bold]"
                     f" — {st.to_beat.combo.describe()}")
        else:
            line += ".  You lead: play any combination."
        self.console.print(line)

    def remaining(self, st: Any) -> float | None:
        d = st.deadline()
        if d is None:
            return None
        return max(0.0, (d.at_ms - self.clock.now_ms()) / 1000)

    # -- the bot ------------------------------------------------------------------------
    def bot_turns(self) -> Any:
        """Let the bot play while it is its turn; returns the state for the person."""
        from engine.match.commands import Pass, Play

        st = self.state()
        for _ in range(200):
            if st.phase != "playing" or st.current_player != BOT:
                return st
            seat = st.seat(st.turn)
            if seat.trusteed:  # the timer workers play for it
                st = self._wait_change(st)
                continue
            play = self.bot.choose(st, BOT)
            if play is None:
                cmd: Any = Pass(command_id=self.cid(), match_id=self.match_id, player=BOT)
            else:
                cmd = Play(command_id=self.cid(), match_id=self.match_id, player=BOT, cards=play.cards)
            self.execute(cmd)
            st = self.state()
        return st

    def _wait_change(self, st: Any, timeout_s: float = 60.0) -> Any:
        import time

        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            new = self.state()
            if new.version != st.version:
                return new
            time.sleep(0.02)
        return self.state()


def _read_line(prompt: str, console: Any) -> str | None:
    try:
        console.print(prompt, end="")
        line = sys.stdin.readline()
    except KeyboardInterrupt:
        return None
    if line == "":
        return None  # EOF
    if not sys.stdin.isatty():
        console.print(line.rstrip("\n"), highlight=False, markup=False)  # echo piped input
    return line.strip()


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from engine.tools.bot import hint
    from engine.rules.cards import CardNotationError, format_ranks, parse_tokens
    from engine.cli import CliError
    from engine.match.commands import CancelTrustee, Escape, Pass, Play, RequestTrustee
    from engine.config import ConfigError

    console = Console(highlight=False)
    try:
        game = _Game(args, console)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    try:
        console.print(f"[bold]火拼雙扣[/bold] — you against the bot ({game.config.name} room, "
                      f"{game.config.turn_seconds:g} s a turn, seed {game.seed}). Type 'help' for commands.")
        st = game.start()
        game.show_new_events()
        while True:
            st = game.bot_turns()
            game.show_new_events()
            if st.phase == "finished":
                break
            me = st.seat(st.seat_of(YOU))
            if me.trusteed:
                console.print("[yellow]You are in trusteeship: the system plays for you "
                              "(type 'cancel' to take control back, if allowed).[/yellow]")
            game.show_table(st)
            left = game.remaining(st)
            clock = f"[{left:.0f}s] " if left is not None else ""
            line = _read_line(f"{clock}your play> ", console)
            if line is None:
                console.print("\n[dim]end of input: leaving the terminal (the match is not finished).[/dim]")
                return 0
            now = game.state()
            if now.version != st.version:
                game.show_new_events()
                if now.phase == "finished":
                    break
                if line and line.lower() not in ("help", "hint", "h", "?"):
                    console.print("[yellow]The match moved on while you typed (your clock ran out?); "
                                  "look at the table again.[/yellow]")
                    continue
                st = now
            word = line.lower()
            if not word:
                continue
            if word in ("help", "?", "h"):
                console.print(HELP)
                continue
            if word == "hint":
                h = hint(st, YOU)
                console.print("hint: " + ("pass (nothing beats)" if h is None else
                                          f"{format_ranks(h.cards)} — {h.combo.describe()}"))
                continue
            if word in ("quit", "q", "exit"):
                out = game.execute(Escape(command_id=game.cid(), match_id=game.match_id, player=YOU))
                if out.rejection is not None:
                    console.print(f"[red]{out.rejection.reason}[/red]")
                game.show_new_events()
                st = game.state()
                if st.phase != "finished":
                    console.print("You left; the system plays for you until the end (escape policy trustee).")
                    game.timers.wait_finished(game.match_id, timeout_s=600)
                    game.show_new_events()
                break
            if word == "auto":
                h = hint(st, YOU)
                if h is None:
                    word = "pass"
                else:
                    line = format_ranks(h.cards)
            if word in ("pass", "p"):
                cmd: Any = Pass(command_id=game.cid(), match_id=game.match_id, player=YOU)
            elif word == "trustee":
                cmd = RequestTrustee(command_id=game.cid(), match_id=game.match_id, player=YOU)
            elif word == "cancel":
                cmd = CancelTrustee(command_id=game.cid(), match_id=game.match_id, player=YOU)
            else:
                try:
                    parse_tokens(line)
                except CardNotationError as exc:
                    console.print(f"[red]{exc}[/red]  (type 'help')")
                    continue
                if word == "auto" and h is not None:
                    cmd = Play(command_id=game.cid(), match_id=game.match_id, player=YOU, cards=h.cards)
                else:
                    cmd = Play(command_id=game.cid(), match_id=game.match_id, player=YOU, text=line)
            out = game.execute(cmd)
            if out.rejection is not None:
                console.print(f"[red]Not accepted: {out.rejection.reason}[/red]")
                continue
            game.show_new_events()
            if word == "trustee":
                game._wait_change(game.state(), timeout_s=game.config.trustee_delay_seconds + 5)
        _show_settlement(game, console)
        return 0
    finally:
        game.close()


def _show_settlement(game: _Game, console: Any) -> None:
    from rich.table import Table

    from projections.settlement import settle

    events = game.timers.store.load(game.match_id)
    s = settle(events)
    if s is None:
        console.print("The match has not finished: no settlement.")
        return
    t = Table(title=f"Settlement — {s.winner} wins, kou {s.kou}", title_justify="left")
    t.add_column("player")
    t.add_column("cards left", justify="right")
    t.add_column("score", justify="right")
    for p, n in s.scores.items():
        t.add_row(p, str(s.cards_left.get(p, "")), f"{n:+d}")
    console.print(t)
    if s.burned:
        console.print(f"burned (to no one): {s.burned}")
    for k, v in s.breakdown.items():  # the formulas only (the full breakdown: shuangkou replay)
        if isinstance(v, dict) and "formula" in v:
            console.print(f"  {k}: {v['formula']}", highlight=False, markup=False)
        elif k.endswith("formula") or k.endswith("_from"):
            console.print(f"  {v}", highlight=False, markup=False)
