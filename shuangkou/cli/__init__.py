"""The ``shuangkou`` command line.

Each sub-command lives in its own module under ``shuangkou.cli`` and defines
``add_arguments(parser)`` and ``run(args) -> int``; modules are imported only
when their command runs, so ``shuangkou classify`` stays fast.
Exit codes (one table for every command, README.md): 0 success, 1 a check failed or the
thing asked for was not found (a match not in the store, one that was archived), 2 bad usage
or input (one readable line on stderr);
141 (128 + SIGPIPE) when the reader of the output went away (``shuangkou … | head``),
without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "classify": ("shuangkou.cli.classify", "print the reading of some cards as JSON"),
    "run-script": ("shuangkou.cli.run_script", "run a scripted match (JSON) and print its events and result"),
    "replay": ("shuangkou.cli.replay", "rebuild a stored match from its events, print it, check it"),
    "simulate": ("shuangkou.cli.simulate", "many bot matches through the full pipeline, with a summary"),
    "play": ("shuangkou.cli.play", "play a match against the bot in the terminal"),
    "serve": ("shuangkou.cli.serve", "run the command service and projections on real Redis"),
    "config": ("shuangkou.cli.config_cmd", "check an operator config file"),
    "gateway": ("shuangkou.cli.gateway", "run the players' WebSocket gateway (lobby, tables, spectators)"),
    "token": ("shuangkou.cli.token_cmd", "mint a gateway session token (JWT) for tests and development"),
    "export": ("shuangkou.cli.export", "write one stored match as a JSON Lines file (for replay --events and the viewer)"),
    "matches": ("shuangkou.cli.matches", "find stored matches by player, start time or room (disputes)"),
    "ledger": ("shuangkou.cli.ledger_cmd", "audited credits and debits, a player's balances and entries"),
    "room": ("shuangkou.cli.room_cmd", "register room configs, list and show them"),
    "reconcile": ("shuangkou.cli.reconcile", "settle finished matches that have no settlement (exactly once)"),
    "archive": ("shuangkou.cli.archive", "export finished, settled matches to files and delete them from Redis"),
    "ratings": ("shuangkou.cli.ratings_cmd", "ranked ladders: rebuild a season from the events, show a leaderboard"),
    "season": ("shuangkou.cli.season_cmd", "seasons of ranked play: start, end, list"),
    "verify-deal": ("shuangkou.cli.verify_deal", "check a finished match's deal against its commitment and seeds"),
    "integrity": ("shuangkou.cli.integrity", "chip-dumping flags: report, show or dismiss suspicious pairs"),
    "lobby-upgrade": ("shuangkou.cli.lobby_upgrade", "move the waiting players of the old {lobby} keys to the "
                                                     "rooms' queues and delete those keys"),
}


class CliError(Exception):
    """Bad input on the command line: printed as one line, exit code 2."""


class NotFound(CliError):
    """The thing asked for is not there (an unknown or archived match): one line, exit code 1."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line naming the command, and a pointer to
    its ``--help`` (not the whole usage block); exit code 2 as before.  Each parser names
    itself in the namespace (``_parser``: a command's, or its subcommand's, is the last)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(_parser=self)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\nTry '{self.prog} --help'.\n")


def build_parser() -> argparse.ArgumentParser:
    from engine import __version__

    parser = Parser(prog="shuangkou", description="火拼雙扣 match engine")
    parser.add_argument("--version", action="version", version=f"shuangkou {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module_name)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            p.set_defaults(_missing=True)
            continue
        module.add_arguments(p)
    return parser


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `yes | head`


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a closed output pipe (EPIPE) ends it quietly with :data:`EXIT_BROKEN_PIPE`."""
    try:
        try:
            code = _main(argv)
        except SystemExit:  # argparse: --help, --version, a usage error
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # a pipe closed early fails here, not at interpreter exit
        return code
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _discard_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stdout (tests): nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own parser, which knows its arguments
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "_missing", False):
        print(f"shuangkou: the {args.command!r} command is not available in this build", file=sys.stderr)
        return 2
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except NotFound as exc:
        print(f"shuangkou {args.command}: {exc}", file=sys.stderr)
        return 1
    except CliError as exc:
        print(f"shuangkou {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
