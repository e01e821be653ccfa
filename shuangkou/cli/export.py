"""``shuangkou export MATCH_ID --redis URL > match.jsonl``: one match as a file.

Writes the export format of :mod:`engine.tools.export` (a header line with the
ledger's stored settlement, then one JSON event per line) to stdout, or to
``--out FILE``.  ``shuangkou replay --events match.jsonl`` and the replay
viewer (``/replay/<match_id>``) read it.  It only reads Redis (GET, XRANGE,
HGET), so the read-only Redis user for disputes is enough.  An unknown match
says "no such match" (exit 1).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("match_id", help="the match to export")
    parser.add_argument("--redis", metavar="URL", default=None,
                        help="Redis URL of the event store (default $SK_REDIS_URL) (read-only user is enough)")
    parser.add_argument("--out", metavar="FILE", help="write here instead of stdout")


def read_only_store(url: str) -> Any:
    """A :class:`~engine.store.redis_store.RedisEventStore` that never writes.

    ``RedisEventStore.from_url`` records the bucket layout (SET NX), which the
    read-only user may not do; this one only compares it (GET).
    """
    from shuangkou.cli import CliError
    from shuangkou.cli.serve import connect_redis
    from engine.store import keys
    from engine.store.redis_store import RedisEventStore

    client = connect_redis(url, "--redis")
    try:
        store = RedisEventStore(client)
        found = store.client.get(keys.LAYOUT)
    except Exception as exc:
        raise CliError(f"cannot read {url}: {exc}") from None
    wanted = f"buckets={store.buckets}"
    if found is not None and found.decode() != wanted:
        raise CliError(f"{url} is laid out with {found.decode()!r}, this build uses {wanted!r}")
    return store


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError
    from engine.tools.export import export_text
    from projections.ledger import RedisLedger

    args.redis = args.redis or os.environ.get("SK_REDIS_URL") or None
    if not args.redis:
        raise CliError("give --redis URL (or set SK_REDIS_URL)")
    store = read_only_store(args.redis)
    try:
        events = store.load(args.match_id)
        stored = RedisLedger(store.client).settlement(args.match_id) if events else None
    except Exception as exc:
        raise CliError(f"cannot read match {args.match_id!r} from {args.redis}: {exc}") from None
    if not events:
        print(f"shuangkou export: no such match: {args.match_id!r}", file=sys.stderr)
        return 1
    text = export_text(events, None if stored is None else stored.to_json(), int(time.time() * 1000))
    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise CliError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
    return 0
