"""``shuangkou config check FILE… [--json]``: validate operator config files (R-14).

For each file prints ``ok: <name> (<mode>)`` on stdout, or every problem on
stderr, one per line, as ``<file>: <key.path>: <message>`` (``(file)`` as the
key path for a missing file or bad TOML).  Exit 0 when every file is valid,
2 otherwise.  Never a traceback.  FILE may also be a built-in room name
(``points``, ``wealth``: shipped inside the package, see
:func:`engine.config.builtin_configs`).

``--json`` prints one object on stdout instead (nothing on stderr), same exit codes::

    {"ok": false, "files": [
      {"file": "points", "source": ".../points.toml", "ok": true, "name": "points", "mode": "points"},
      {"file": "room.toml", "source": "room.toml", "ok": false, "problems": ["kou.single: ..."]}]}
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

# engine.config (pydantic) is imported in run(): build_parser imports every command module.


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = sub.add_parser("check", help="validate config files; print ok or every problem with its key path",
                           description="validate config files; print ok or every problem with its key path")
    check.add_argument("files", nargs="+", metavar="FILE", help="a TOML room config (or points / wealth)")
    check.add_argument("--json", action="store_true",
                       help='print {"ok": …, "files": [{"file", "source", "ok", "name", "mode" | "problems"}]}')


def check_file(name: str) -> dict[str, Any]:
    """One file's verdict: ``ok`` with the room's ``name`` and ``mode``, or its ``problems``."""
    from engine.config import ConfigError, load_config, resolve_config_path

    try:
        cfg = load_config(name)
    except ConfigError as exc:
        return {"file": name, "source": exc.source, "ok": False, "problems": list(exc.problems)}
    except Exception as exc:  # never a traceback for an operator's file
        return {"file": name, "source": name, "ok": False,
                "problems": [f"(file): cannot check: {type(exc).__name__}: {exc}"]}
    return {"file": name, "source": str(resolve_config_path(name)), "ok": True, "name": cfg.name, "mode": cfg.mode}


def run(args: argparse.Namespace) -> int:
    results = [check_file(name) for name in args.files]
    ok = all(r["ok"] for r in results)
    if getattr(args, "json", False):
        print(json.dumps({"ok": ok, "files": results}, ensure_ascii=False))
        return 0 if ok else 2
    for r in results:
        if r["ok"]:
            print(f"ok: {r['name']} ({r['mode']})")
        else:
            for problem in r["problems"]:
                print(f"{r['source']}: {problem}", file=sys.stderr)
    return 0 if ok else 2
