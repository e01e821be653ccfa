"""``shuangkou config check FILE…``: validate operator config files (R-14).

For each file prints ``ok: <name> (<mode>)`` on stdout, or every problem on
stderr, one per line, as ``<file>: <key.path>: <message>`` (``(file)`` as the
key path for a missing file or bad TOML).  Exit 0 when every file is valid,
2 otherwise.  Never a traceback.  FILE may also be a shipped room name
(``points``, ``wealth``).
"""

from __future__ import annotations

import argparse
import sys

# engine.config (pydantic) is imported in run(): build_parser imports every command module.


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = sub.add_parser("check", help="validate config files; print ok or every problem with its key path",
                           description="validate config files; print ok or every problem with its key path")
    check.add_argument("files", nargs="+", metavar="FILE", help="a TOML room config (or points / wealth)")


def run(args: argparse.Namespace) -> int:
    from engine.config import ConfigError, load_config

    status = 0
    for name in args.files:
        try:
            cfg = load_config(name)
        except ConfigError as exc:
            status = 2
            for problem in exc.problems:
                print(f"{exc.source}: {problem}", file=sys.stderr)
        except Exception as exc:  # never a traceback for an operator's file
            status = 2
            print(f"{name}: (file): cannot check: {type(exc).__name__}: {exc}", file=sys.stderr)
        else:
            print(f"ok: {cfg.name} ({cfg.mode})")
    return status
