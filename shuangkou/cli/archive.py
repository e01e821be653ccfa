"""``shuangkou archive --older-than DAYS --to DIR [--redis URL] [--json]``: retention.

Exports every finished, settled match whose end is older than DAYS (events,
settlement, ledger entries; one JSON Lines file per match, the format of
``shuangkou export``) to DIR, checks each file reads back, then deletes the
match from Redis (:mod:`engine.tools.archive`).  Then each closed table whose close is older
than DAYS and none of whose matches is left in Redis (the lobby's table streams) goes to a
``table-….jsonl`` file in DIR the same way (:func:`engine.tools.archive.archive_tables`), and each
finished private-table series whose hands are all archived to a ``series-….jsonl`` file, its
code freed (:func:`engine.tools.archive.archive_series`).  Last, each registered room's queue
events older than DAYS, up to its latest snapshot, go to a ``queue-….jsonl`` file and leave
its stream (:func:`engine.tools.archive.archive_queues`).  ``shuangkou replay --events
FILE``, ``shuangkou replay --all --archive DIR`` and ``shuangkou replay --table ID --archive
DIR`` read the files.

Example::

    $ shuangkou archive --older-than 30 --to /var/lib/shuangkou/archive
    archived 1200 of 1500 matches (3.1 MB written); 0 finished but not settled yet; 590 closed table(s) archived with their matches; 12 finished series archived with their hands; 3540 queue event(s) of 2 room(s) archived
"""

from __future__ import annotations

import argparse
import json
import os
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--older-than", type=float, required=True, metavar="DAYS",
                        help="archive matches that finished more than DAYS days ago (0: every finished one)")
    parser.add_argument("--to", required=True, metavar="DIR", help="folder for the archive files")
    parser.add_argument("--redis", metavar="URL", default=os.environ.get("SK_REDIS_URL"),
                        help="the event store's Redis (default $SK_REDIS_URL)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError
    from shuangkou.cli.serve import connect_redis
    from engine.store.redis_store import RedisEventStore
    from engine.store.lobby_store import RedisLobbyStore
    from engine.service.rooms import RedisRooms
    from engine.tools.archive import (DAY_MS, ArchiveReport, archive_matches, archive_queues, archive_series,
                                      archive_tables)
    from projections.ledger import RedisLedger

    if not args.redis:
        raise CliError("--redis URL is required (or set SK_REDIS_URL)")
    if not (args.older_than >= 0) or args.older_than == float("inf"):
        raise CliError(f"--older-than must be a number of days >= 0, got {args.older_than}")
    client = connect_redis(args.redis, "--redis")
    store = RedisEventStore(client)
    try:
        store.check_layout()
        now = int(time.time() * 1000)
        report = archive_matches(store, RedisLedger(client), args.to, int(args.older_than * DAY_MS), now)
        lobby = RedisLobbyStore(client, buckets=store.buckets)
        tables, more = archive_tables(lobby, store, args.to, int(args.older_than * DAY_MS), now)
        series, more_series = archive_series(lobby, store, args.to, int(args.older_than * DAY_MS), now)
        queues, more_queues = archive_queues(lobby, RedisRooms(client).names(), args.to,
                                             int(args.older_than * DAY_MS), now)
        report = ArchiveReport(report.checked, report.archived, report.skipped_unsettled,
                               report.bytes_written + more + more_series + more_queues, tuple(tables), tuple(series),
                               tuple(queues))
    except OSError as exc:
        raise CliError(f"cannot write to {args.to}: {exc.strerror or exc}") from None
    except Exception as exc:
        raise CliError(f"cannot archive from {args.redis}: {exc}") from None
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        print(f"archived {len(report.archived)} of {report.checked} matches "
              f"({report.bytes_written / 1e6:.1f} MB written); "
              f"{len(report.skipped_unsettled)} finished but not settled yet; "
              f"{len(report.tables)} closed table(s) archived with their matches; "
              f"{len(report.series)} finished series archived with their hands; "
              f"{sum(n for _r, n in report.queue_events)} queue event(s) of {len(report.queue_events)} room(s) archived")
    return 0
