"""``shuangkou integrity``: chip-dumping flags for coin rooms (docs/INTEGRITY.md).

* ``integrity report [--since T] [--min-score S] [--json]``: the flagged pairs, highest score
  first, with their evidence (coins moved, rates, the worst decisions and the concessions,
  each with a replay position: ``shuangkou replay MATCH`` shows event ``seq``); ``--min-score``
  defaults to the detector's threshold and must be above 0 (a pair at 0 is not indexed); a
  dismissed pair is listed again only on new evidence;
* ``integrity show A B [--json]``: one pair's evidence, scored now;
* ``integrity dismiss A B --reason R``: mark the pair reviewed; only matches after now can
  flag it again;
* ``integrity scan [--follow] [--metrics-port P]``: run the projection: follow the bucket
  feeds with the consumer group ``sk-integrity`` and score every finished match (once; with
  ``--follow`` until stopped, serving ``shuangkou_integrity_flags_total`` on ``/metrics``).

Exit codes: 0 done (an empty report too), 1 ``show``/``dismiss`` of a pair that never played,
2 bad input.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import sys
import time
from typing import Any

from shuangkou.cli.ops_client import add_redis_arguments, connect


def above_zero(text: str) -> float:
    """``--min-score``: a number above 0 (a pair scoring 0 has no evidence against it and is
    not kept in the ranked index, so a report could not list it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < math.inf:  # NaN and infinity too (JSON has neither)
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text} (a pair at 0 has no "
                                         "evidence and is not listed)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from projections.integrity.score import DEFAULT_MIN_SCORE

    sub = parser.add_subparsers(dest="integrity_command", required=True, metavar="ACTION")
    p = sub.add_parser("report", help="the flagged pairs with their evidence, highest score first")
    p.add_argument("--since", metavar="T", help="only pairs that played at or after T (ISO time, ms, or 2h / 7d)")
    p.add_argument("--min-score", type=above_zero, default=DEFAULT_MIN_SCORE, metavar="S",
                   help=f"list pairs scoring at least S, above 0 (default {DEFAULT_MIN_SCORE:g}: the flag "
                        "threshold)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_redis_arguments(p, wait=False)
    p = sub.add_parser("show", help="one pair's evidence, scored now")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_redis_arguments(p, wait=False)
    p = sub.add_parser("dismiss", help="mark a pair reviewed (it comes back only on new evidence)")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--reason", required=True, help="why the flag is dismissed (kept with the review)")
    p.add_argument("--operator", default=None, help="the operator's id (default: the login name)")
    add_redis_arguments(p, wait=False)
    p = sub.add_parser("scan", help="score the finished matches the feeds announce (the projection)")
    p.add_argument("--follow", action="store_true", help="keep following the feeds until stopped")
    p.add_argument("--consumer", default="integrity-1", help="consumer name in the group sk-integrity")
    p.add_argument("--metrics-port", type=int, default=None, metavar="P",
                   help="with --follow: serve /metrics on this port (127.0.0.1)")
    add_redis_arguments(p, wait=False)


def run(args: argparse.Namespace) -> int:
    from projections.integrity.store import IntegrityStore

    client = connect(args)
    store = IntegrityStore(client)
    cmd = args.integrity_command
    if cmd == "report":
        return _report(store, args)
    if cmd == "scan":
        return _scan(client, store, args)
    _check_pair(args.a, args.b)
    if cmd == "show":
        return _show(store, args)
    return _dismiss(store, args)


def _check_pair(a: str, b: str) -> None:
    from shuangkou.cli import CliError

    if a == b:
        raise CliError(f"a pair is two different accounts, got {a!r} twice")


def _played(store: Any, a: str, b: str) -> bool:
    from engine.store import keys

    return any(b in json.loads(v)["players"] for v in store.client.hvals(keys.integrity_records_key(a)))


def _report(store: Any, args: argparse.Namespace) -> int:
    since = None
    if args.since:
        from shuangkou.cli.matches import parse_since

        since = parse_since(args.since, int(time.time() * 1000))
    # the index ranks by the score of each pair's last rescoring; the listed pairs are scored
    # again now (a few reads each), so the evidence shown is current
    pop = store.population()
    rows = []
    for stored in store.ranked(args.min_score, since):
        ev = store.score(stored["a"], stored["b"], pop)
        ev["last_ts"], ev["last_match"] = stored.get("last_ts"), stored.get("last_match")
        if ev["score"] >= args.min_score:
            rows.append(ev)
    rows.sort(key=lambda ev: -ev["score"])
    if args.json:
        print(json.dumps({"min_score": args.min_score, "pairs": rows}, ensure_ascii=False, indent=2))
        return 0
    if not rows:
        print(f"no pair scores {args.min_score:g} or more")
        return 0
    for rank, ev in enumerate(rows, 1):
        print(_summary(rank, ev))
    return 0


def _summary(rank: int, ev: dict[str, Any]) -> str:
    d = ev["directions"][0]
    lines = [f"{rank}. {ev['a']} / {ev['b']}  score {ev['score']:.1f}  {ev['matches']} matches  "
             f"{d['giver']} → {d['receiver']}: {d['net_coins']} coins ({d['net_x']} × base)",
             "   share of matches against the partner: " + ", ".join(f"{p} {s:.0%}" for p, s in ev["share"].items())]
    sig = [f"{name} {v['k']}/{v['n']} (base {v['base_rate']:.0%}, +{v['surprise']})"
           for name, v in d["signals"].items() if name != "quality" and v["surprise"] > 0]
    if sig:
        lines.append("   signals: " + "; ".join(sig))
    q = d["signals"]["quality"]
    if q["n"]:
        elsewhere = "n/a" if q["baseline_mean"] is None else q["baseline_mean"]
        lines.append(f"   quality: mean regret {q['mean']} over {q['n']} sampled decisions against the partner, "
                     f"{elsewhere} elsewhere ({q['baseline_n']} of the player's own; tested against the "
                     f"{q['baseline']}'s), +{q['surprise']}")
    for w in ev.get("worst", [])[:3]:
        lines.append(f"   worst: match {w['match']} seq {w['seq']}: played {w['chosen']}, best {w['best']} "
                     f"(−{w['regret']:.0%} chance to win)")
    for c in ev.get("concessions", [])[:3]:
        lines.append(f"   concession: match {c['match']} seq {c['seq']}: {c['what']}")
    if ev.get("dismissed"):
        since = "new evidence since" if ev["score"] > 0 else "nothing new since: the score counts only later matches"
        lines.append(f"   dismissed before: {ev['dismissed'].get('reason')} ({since})")
    return "\n".join(lines)


def _show(store: Any, args: argparse.Namespace) -> int:
    from shuangkou.cli import NotFound

    if not _played(store, args.a, args.b):
        raise NotFound(f"{args.a} and {args.b} have no scored match together")
    ev = store.score(args.a, args.b)
    if args.json:
        print(json.dumps(ev, ensure_ascii=False, indent=2))
    else:
        print(_summary(1, ev).split(". ", 1)[1])
    return 0


def _dismiss(store: Any, args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError, NotFound

    if not args.reason.strip():
        raise CliError("--reason must say why")
    if not _played(store, args.a, args.b):
        raise NotFound(f"{args.a} and {args.b} have no scored match together")
    row = store.dismiss(args.a, args.b, args.reason, int(time.time() * 1000), by=args.operator or getpass.getuser())
    print(f"dismissed {args.a} / {args.b} (score {row['score']}): {args.reason}; "
          "only matches from now on can flag the pair again")
    return 0


def _scan(client: Any, store: Any, args: argparse.Namespace) -> int:
    import threading

    from engine.store.redis_store import RedisEventStore

    from engine.tools.integrity import integrity_runner

    runner = integrity_runner(client, RedisEventStore(client), args.consumer)
    if not args.follow:
        n = runner.drain()
        print(f"scanned {n} feed entries, scored {runner.projection.matches} match(es)"
              + (f", {len(runner.errors)} failed" if runner.errors else ""))
        return 1 if runner.errors else 0
    if args.metrics_port is not None:
        from projections.metrics import start_metrics_server

        server, _ = start_metrics_server(args.metrics_port)
        print(f"metrics-port {server.server_port}", flush=True)
    stop = threading.Event()
    try:
        runner.run_forever(stop)
    except KeyboardInterrupt:
        stop.set()
    print(f"scored {runner.projection.matches} match(es)", file=sys.stderr)
    return 0
