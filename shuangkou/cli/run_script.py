"""``shuangkou run-script FILE [--json] [--config NAME|FILE]``: run a scripted match
(engine/tools/script.py).

``--config`` names the room config to play the script under: a built-in room
(``points``, ``wealth``) or a TOML file (relative to the current directory).  It
replaces the script's ``"config"``; a script whose config is
``{"base": …, <keys>}`` keeps its changed keys on the new base.  Without it the
script's own ``"config"`` is used (a name, or a path relative to the script).

``--json`` prints ``{"events": [...], "rejections": [{"index", "reason"}], "result": {...}}``
(docs/ARCHITECTURE.md "Contracts that stay stable"); without it, a play-by-play in card notation, the rejections and
the result.  A malformed script (missing keys, a bad card token, an unknown
config) prints one line and exits 2.  A script's ``"expect"`` is checked
(:func:`engine.tools.script.expect_mismatches`): each mismatch is printed to
stderr as ``expect mismatch: KEY: expected …, got …`` and the exit code is 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the match script (JSON)")
    parser.add_argument("--json", action="store_true", help="print events, rejections and result as JSON")
    parser.add_argument("--config", metavar="NAME|FILE",
                        help="play under this room config (points, wealth or a TOML file) instead of the script's")


def with_config(data: dict[str, Any], config: str) -> dict[str, Any]:
    """The script with its room config replaced by ``config`` (a name or a path from the
    current directory); a ``{"base": …}`` config keeps its changed keys."""
    from pathlib import Path

    p = Path(config)
    spec = str(p.resolve()) if (p.suffix == ".toml" or p.exists()) else config
    old = data.get("config")
    new = dict(old, base=spec) if isinstance(old, dict) and "base" in old else spec
    return dict(data, config=new)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from shuangkou.cli import CliError
    from engine.match.narrate import narrate
    from engine.tools.script import ScriptError, expect_mismatches, format_result, load_script, run_script

    try:
        data = load_script(args.file)
        if getattr(args, "config", None):
            data = with_config(data, args.config)
        out = run_script(data, base_dir=Path(args.file).resolve().parent)
        mismatches = expect_mismatches(out)
    except ScriptError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(out.to_json(), ensure_ascii=False))
    else:
        for line in narrate(out.events):
            print(line)
        for r in out.rejections:
            print(f"rejected action {r['index']}: {r['reason']}")
        print(format_result(out.result))
    for m in mismatches:
        print(f"shuangkou run-script: expect mismatch: {m}", file=sys.stderr)
    return 1 if mismatches else 0
