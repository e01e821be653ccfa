"""``shuangkou run-script FILE [--json]``: run a scripted match (engine/tools/script.py).

``--json`` prints ``{"events": [...], "rejections": [{"index", "reason"}], "result": {...}}``
(DESIGN.md); without it, a play-by-play in card notation, the rejections and
the result.  A malformed script (missing keys, a bad card token, an unknown
config) prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the match script (JSON)")
    parser.add_argument("--json", action="store_true", help="print events, rejections and result as JSON")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from engine.cli import CliError
    from engine.tools.script import ScriptError, format_result, load_script, narrate, run_script

    try:
        data = load_script(args.file)
        out = run_script(data, base_dir=Path(args.file).resolve().parent)
    except ScriptError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(out.to_json(), ensure_ascii=False))
        return 0
    for line in narrate(out.events):
        print(line)
    for r in out.rejections:
        print(f"rejected action {r['index']}: {r['reason']}")
    print(format_result(out.result))
    return 0
