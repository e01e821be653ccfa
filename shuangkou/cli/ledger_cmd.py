"""``shuangkou ledger``: audited operator entries and a player's balances and journal.

* ``ledger credit PLAYER AMOUNT --reason TEXT [--operator ID] [--mode wealth|points]``
* ``ledger debit PLAYER AMOUNT --reason TEXT [--operator ID] [--mode …]``
* ``ledger show PLAYER [--json]``: balances (points and coins) and every entry: operator
  credits/debits and match settlements, oldest first (what a dispute looks at).

Credits and debits are sent on the operator channel ``sk:ops`` and applied by the
engine (``shuangkou serve``), idempotently by command id; a debit never takes a
balance below 0.  Exit 0 when applied, 1 when the engine refused it, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import sys

from shuangkou.cli.ops_client import add_redis_arguments, connect, send_and_wait


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="ledger_command", required=True, metavar="ACTION")
    for name, what in (("credit", "add coins or points to a player's balance"),
                       ("debit", "take coins or points from a player's balance (never below 0)")):
        p = sub.add_parser(name, help=what, description=what)
        p.add_argument("player")
        p.add_argument("amount", type=int)
        p.add_argument("--reason", required=True, help="why (kept with the entry, shown in disputes)")
        p.add_argument("--operator", default=None, help="the operator's id (default: the login name)")
        p.add_argument("--mode", choices=("wealth", "points"), default="wealth",
                       help="which balance: wealth = coins (default), points")
        p.add_argument("--command-id", default=None, help="idempotency key (default: a new uuid); "
                                                          "re-run with the same id to retry safely")
        add_redis_arguments(p)
    p = sub.add_parser("show", help="a player's balances and ledger entries")
    p.add_argument("player")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_redis_arguments(p, wait=False)


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError

    client = connect(args)
    if args.ledger_command == "show":
        return _show(client, args)
    import uuid

    from pydantic import ValidationError

    from engine.match.commands import Credit, Debit

    cls = Credit if args.ledger_command == "credit" else Debit
    try:
        cmd = cls(command_id=args.command_id or uuid.uuid4().hex, player=args.player, amount=args.amount,
                  mode=args.mode, reason=args.reason, operator=args.operator or getpass.getuser())
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise CliError(problems) from None
    msg = send_and_wait(client, cmd, args.timeout)
    if msg.kind in ("accepted", "duplicate"):
        from projections.ledger import RedisLedger

        bal = RedisLedger(client).balance(args.player, args.mode)
        note = " (already applied: same command id)" if msg.kind == "duplicate" else ""
        print(f"{args.ledger_command} {args.amount} {args.mode} for {args.player}: applied{note}; "
              f"balance {bal} (entry {cmd.command_id})")
        return 0
    print(f"refused ({msg.code}): {msg.reason}", file=sys.stderr)
    return 1


def _show(client, args: argparse.Namespace) -> int:
    from projections.ledger import MODES, RedisLedger

    ledger = RedisLedger(client)
    balances = {m: ledger.balance(args.player, m) for m in MODES}
    entries = [dataclasses.asdict(e) for e in ledger.entries(args.player)]
    for e in entries:
        if e["kind"] == "settlement":
            e["match"] = e["ref"]
    if args.json:
        print(json.dumps({"player": args.player, "balance": balances["wealth"], "balances": balances,
                          "entries": entries}, ensure_ascii=False, indent=2))
        return 0
    print(f"{args.player}: {balances['wealth']} coins, {balances['points']} points")
    if not entries:
        print("  no entries")
    for e in entries:
        who = f" by {e['operator']}" if e["operator"] else ""
        ref = f"match {e['ref']}" if e["kind"] == "settlement" else f"entry {e['ref']}"
        print(f"  {e['at_ms']:>14}  {e['kind']:<10} {e['amount']:>+12} {e['mode']:<6} {ref}{who}: {e['reason']}")
    return 0
