"""``shuangkou reconcile --redis URL [--json]``: settle finished matches that have no settlement.

Projections settle a match when its bucket feed announces the finish.  Should
an entry be lost (a feed trimmed by hand, a bug, a restore from an older
backup), the match would stay unsettled for ever: this command scans every
match of the store, finds the finished ones the ledger has no settlement for
and settles them — exactly once, so it is safe beside running projections
and other reconcilers (``serve`` runs it every ``--reconcile-every`` seconds).

A match whose settlement is refused for good (e.g. a ledger overflow) is
*parked* with its reason (``sk:{ledger}:parked``) and reported.  Then the ledger is
cross-checked against the log (:mod:`projections.audit`): a settlement or a journal
line for a match the log does not hold or finish, or whose settlement differs from the
log's, is a *ledger mismatch*, named with its match (it is never "fixed" here: the
operator decides).  Exit 0 when every finished match is settled afterwards and the
ledger agrees with the log, 1 when some stay parked or disagree, 2 on bad input.

Example::

    $ shuangkou reconcile --redis redis://127.0.0.1:6379/0
    checked 1000 matches: settled 800 now, 0 parked now, 0 left parked, 0 ledger mismatch(es)
"""

from __future__ import annotations

import argparse
import json
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis", metavar="URL", default=os.environ.get("SK_REDIS_URL"),
                        help="the event store's Redis (default $SK_REDIS_URL)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError
    from shuangkou.cli.serve import connect_redis
    from engine.store.redis_store import RedisEventStore
    from projections.ledger import RedisLedger
    from projections.runner import reconcile

    if not args.redis:
        raise CliError("--redis URL is required (or set SK_REDIS_URL)")
    client = connect_redis(args.redis, "--redis")
    store = RedisEventStore(client)
    from projections.audit import audit_ledger

    try:
        store.check_layout()
        ledger = RedisLedger(client)
        report = reconcile(store, ledger)
        parked = ledger.parked()
        mismatches = audit_ledger(store, ledger)
    except Exception as exc:
        raise CliError(f"cannot reconcile {args.redis}: {exc}") from None
    left = sorted(set(report.parked) | set(report.unsettled_parked))
    if args.json:
        out = report.to_json()
        out["parked_reasons"] = {m: parked.get(m, {}).get("reason") for m in left}
        out["ledger_mismatches"] = [m.to_json() for m in mismatches]
        print(json.dumps(out, ensure_ascii=False))
    else:
        print(f"checked {report.checked} matches: settled {len(report.settled)} now, "
              f"{len(report.parked)} parked now, {len(report.unsettled_parked)} left parked, "
              f"{len(mismatches)} ledger mismatch(es)")
        for m in left:
            print(f"  parked {m}: {parked.get(m, {}).get('reason', '?')}")
        for mm in mismatches:
            print(f"  ledger mismatch {mm.match_id}: {mm.problem}")
    return 1 if left or mismatches else 0
