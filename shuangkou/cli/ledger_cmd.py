"""``shuangkou ledger``: audited operator entries and a player's balances and journal.

* ``ledger credit PLAYER AMOUNT --reason TEXT [--operator ID] [--mode wealth|points]``
* ``ledger debit PLAYER AMOUNT --reason TEXT [--operator ID] [--mode …]``
* ``ledger show PLAYER [--json]``: balances (points and coins) and every entry: operator
  credits/debits and match settlements, oldest first (what a dispute looks at).

Credits and debits are sent on the operator channel ``sk:ops`` and applied by the
engine (``shuangkou serve``), idempotently by command id; a debit never takes a
balance below 0.  Exit 0 when applied, 1 when the engine refused it, 2 bad input.

PLAYER is always a player id, never resolved from a display name (anyone may choose a
display name, another player's id included).  The browser shows display names, so a PLAYER
that is no known player (no display name, no balance, no entry) but the display name of
some is refused (exit 2), naming both ways on: the id of one of them, or ``--new-player``
to open the account PLAYER (a deposit before the first login).  A credit to an id nobody
knows and nobody goes by goes through, with a note on stderr.  ``show`` of an unknown id
exits 1, naming who goes by it; ``show NAME --by-name`` shows each player who goes by
``NAME`` (``--json``: one player's object; a name several go by is refused).
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import sys
from typing import Any

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
        p.add_argument("--new-player", action="store_true",
                       help="PLAYER is the id of a player who has not logged in yet, though others go by "
                            "it as a display name: open that account")
        add_redis_arguments(p)
    p = sub.add_parser("show", help="a player's balances and ledger entries")
    p.add_argument("player")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--by-name", action="store_true",
                   help="PLAYER is a display name: show each player who goes by it")
    add_redis_arguments(p, wait=False)


def known(client: Any, player: str) -> bool:
    """Whether ``player`` is a player id this deployment knows: a display name the gateways
    keep, a balance, or a ledger entry."""
    from engine.store import keys
    from projections.ledger import MODES, balance_key, journal_key

    if client.hget(keys.NAMES_KEY, player) is not None or client.hlen(journal_key(player)):
        return True
    return any(client.hget(balance_key(m), player) is not None for m in MODES)


def going_by(client: Any, name: str) -> list[str]:
    """The players whose display name is ``name`` (``name`` itself left out)."""
    from shuangkou.cli.matches import players_named

    return sorted(players_named(client, name) - {name})


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError

    client = connect(args)
    if args.ledger_command == "show":
        return _show(client, args)
    if not known(client, args.player):
        named = going_by(client, args.player)
        if named and not args.new_player:
            raise CliError(f"no player id {args.player!r} is known here, but {_who(named)} by it as a display "
                           f"name: name an existing player by id, or pass --new-player to open the account "
                           f"{args.player!r} for a player who has not logged in yet")
        print(f"note: no player {args.player!r} is known here yet (no display name, balance or entry): "
              f"a new account", file=sys.stderr)
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
    from shuangkou.cli import CliError, NotFound
    from shuangkou.cli.matches import display_names

    if args.by_name:
        itself = display_names(client, {args.player}).get(args.player) == args.player
        players = sorted(going_by(client, args.player) + ([args.player] if itself else []))
        if not players:
            raise NotFound(f"nobody goes by the display name {args.player!r} here")
    elif known(client, args.player):
        players = [args.player]
    else:
        named = going_by(client, args.player)
        also = f"; {_who(named)} by it as a display name (--by-name shows them)" if named else ""
        raise NotFound(f"no player {args.player!r} is known here (no display name, balance or entry){also}")
    ledger = RedisLedger(client)
    names = display_names(client, set(players))
    shown: list[dict[str, Any]] = []
    for player in players:
        balances = {m: ledger.balance(player, m) for m in MODES}
        entries = [dataclasses.asdict(e) for e in ledger.entries(player)]
        for e in entries:
            if e["kind"] == "settlement":
                e["match"] = e["ref"]
        shown.append({"player": player, "name": names.get(player), "balance": balances["wealth"],
                      "balances": balances, "entries": entries})
    if args.json:
        if len(shown) > 1:
            raise CliError(f"{args.player!r} is the display name of {', '.join(players)}: name the player by id")
        print(json.dumps(shown[0], ensure_ascii=False, indent=2))
        return 0
    for s in shown:
        name = f" ({s['name']})" if s["name"] and s["name"] != s["player"] else ""
        print(f"{s['player']}{name}: {s['balances']['wealth']} coins, {s['balances']['points']} points")
        if not s["entries"]:
            print("  no entries")
        for e in s["entries"]:
            who = f" by {e['operator']}" if e["operator"] else ""
            ref = f"match {e['ref']}" if e["kind"] == "settlement" else f"entry {e['ref']}"
            print(f"  {_when(e['at_ms'])}  {e['kind']:<10} {e['amount']:>+12} {e['mode']:<6} {ref}{who}: "
                  f"{e['reason']}")
    return 0


def _who(players: list[str]) -> str:
    """``u-1 goes``, ``u-2, u-3 go``: who goes by a display name, for a message."""
    return f"{', '.join(players)} {'goes' if len(players) == 1 else 'go'}"


def _when(ms: int) -> str:
    """An entry's time in UTC, to the second (``2026-12-06 16:25:05Z``)."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
