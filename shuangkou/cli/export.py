"""``shuangkou export MATCH_ID --redis URL > match.jsonl``: one match as a file.

Writes the export format of :mod:`engine.tools.export` (a header line with the
ledger's stored settlement, then one JSON event per line) to stdout, or to
``--out FILE``.  ``shuangkou replay --events match.jsonl`` and the replay
viewer (``/replay/<match_id>``) read it.  It only reads Redis (GET, XRANGE,
HGET), so the read-only Redis user for disputes is enough.  An unknown match
says "no such match" (exit 1); an archived one says where it went (exit 1: the file
``shuangkou archive`` wrote is already an export of it).
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


def archived_notice(client: Any, match_id: str, hint: str) -> tuple[Any, str] | None:
    """``(ArchivedMatch, message)`` when ``match_id`` was archived (``shuangkou archive``):
    "match ID was archived on DATE to FILE; HINT" (``{file}`` in ``hint`` is replaced by the
    file); None when it never was (or the ledger cannot be read)."""
    from engine.tools.archive import archived_match
    from projections.ledger import RedisLedger

    try:
        gone = archived_match(RedisLedger(client), match_id)
    except Exception:  # the ledger cannot be read: say only what is certain
        return None
    if gone is None:
        return None
    return gone, f"match {match_id!r} was {gone.where()}; " + hint.format(file=gone.file)


def missing_match(client: Any, match_id: str, hint: str) -> Exception:
    """The :class:`~shuangkou.cli.NotFound` (exit 1) for a match with no events in the store:
    where it went when it was archived (:func:`archived_notice`), else "no such match"."""
    from shuangkou.cli import NotFound

    notice = archived_notice(client, match_id, hint)
    return NotFound(notice[1] if notice else f"no such match: {match_id!r}")


def archive_argument(path: str) -> tuple[dict[str, list[Any]], dict[str, dict[str, Any]]]:
    """``--archive DIR`` read (:func:`engine.tools.archive.read_archive`), or the
    :class:`~shuangkou.cli.CliError` (exit 2) that says why it cannot be."""
    from engine.tools.archive import read_archive
    from shuangkou.cli import CliError

    try:
        return read_archive(path)
    except Exception as exc:
        raise CliError(f"cannot read the archive {path}: {exc}") from None


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
        raise missing_match(store.client, args.match_id, "that file is its export")
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
