"""Retention: export finished, settled matches to files and delete them from Redis
(``shuangkou archive --older-than DAYS --to DIR``; issue 11 §8).

Each match becomes one file in the export format of :mod:`engine.tools.export`
(JSON Lines: a header with the stored settlement and the match's ledger
entries, then one event per line), so ``shuangkou replay --events FILE`` and
``replay --all --archive DIR`` read it, and a dispute can be settled from the
file alone.  The order of the steps makes a crash at any point harmless:

1. the file is written to a temporary name, flushed to disk and renamed;
2. it is read back and compared with the stored events;
3. the ledger marks the match *archived* (:meth:`~projections.ledger.Ledger.mark_archived`):
   its settlement JSON leaves Redis, a small marker stays, so the match is never
   settled twice (a late feed entry, a reconcile);
4. the match's keys are deleted (:meth:`~engine.store.redis_store.RedisEventStore.delete_match`).

A re-run after a crash between 3 and 4 finds the marker and finishes the deletion.
Only matches whose ``MatchFinished`` is older than the cut-off and whose
settlement is stored are archived; parked or unsettled ones stay.  An abandoned match
(``MatchAbandoned``: ended before the deal, nothing to settle) is archived once its
terminal event is older than the cut-off, with no settlement in its file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote

from engine.match.events import MatchAbandoned, MatchFinished
from engine.tools.export import export_text, parse_events_text
from projections.ledger import Ledger
from projections.settlement import Settlement

DAY_MS = 86_400_000


def archive_file_name(match_id: str) -> str:
    """A safe, unique file name for a match id (any characters, up to 200 of them).

    >>> archive_file_name("m 1/x")[-16:]
    '-m%201%2Fx.jsonl'
    """
    digest = hashlib.sha256(match_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{digest}-{quote(match_id[:60], safe='')}.jsonl"


def ledger_entries(match_id: str, settlement: Settlement) -> list[dict[str, Any]]:
    """The ledger movements of a settlement, one per player (and the burned share)."""
    out = [{"match_id": match_id, "mode": settlement.mode, "player": p, "delta": d, "kind": "settlement"}
           for p, d in settlement.scores.items()]
    if settlement.burned:
        out.append({"match_id": match_id, "mode": settlement.mode, "player": None,
                    "delta": settlement.burned, "kind": "burned"})
    return out


@dataclass(frozen=True)
class ArchiveReport:
    checked: int
    archived: tuple[str, ...]
    skipped_unsettled: tuple[str, ...]
    bytes_written: int
    #: closed tables archived with their matches (:func:`archive_tables`)
    tables: tuple[str, ...] = ()
    #: finished series archived with their hands (:func:`archive_series`)
    series: tuple[str, ...] = ()
    #: the queue events archived, by room (:func:`archive_queues`)
    queue_events: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"checked": self.checked, "archived": list(self.archived),
                "skipped_unsettled": list(self.skipped_unsettled), "bytes_written": self.bytes_written,
                "tables_archived": list(self.tables), "series_archived": list(self.series),
                "queue_events_archived": dict(self.queue_events)}


TABLE_FORMAT = "shuangkou-table/1"


def table_file_name(table: str) -> str:
    """The archive file of a table: ``table-`` and the match file name rule."""
    return "table-" + archive_file_name(table)


def archive_tables(lobby: Any, store: Any, to_dir: str | Path, older_than_ms: int, now_ms: int) -> tuple[
        list[str], int]:
    """Archive every closed table (engine/store/lobby_store.py) whose close is older than the
    cut-off and none of whose matches is still in the store (they were archived, or never
    created): one JSON Lines file (a header ``{"format", "table", "room", "players",
    "matches", "close_reason", "archived_at_ms"}``, then each event as a dict), read back,
    then the table's keys deleted.  The archived tables and the bytes written."""
    from engine.lobby.events import match_of, table_aggregate
    from engine.lobby.replay import replay_table

    out_dir = Path(to_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cutoff = now_ms - older_than_ms
    done: list[str] = []
    written = 0
    for tid in sorted(lobby.table_ids()):
        events = lobby.load(table_aggregate(tid))
        if not events:
            continue
        t = replay_table(tid, events)
        if t.status != "closed" or events[-1].ts > cutoff:
            continue
        matches = [match_of(tid, n) for n in range(1, t.n + 1)]
        if any(store.version(m) for m in matches):  # a match of it is still live: it goes first
            continue
        head = {"format": TABLE_FORMAT, "table": tid, "room": t.room, "players": list(t.players), "bot": t.bot,
                "matches": matches, "close_reason": t.close_reason, "archived_at_ms": now_ms}
        written += _write_lobby_file(out_dir / table_file_name(tid), head, events, TABLE_FORMAT,
                                     f"table {tid}", "deleted")
        lobby.delete_table(tid)
        done.append(tid)
    return done, written


SERIES_FORMAT = "shuangkou-series/1"


def series_file_name(series: str) -> str:
    """The archive file of a private table's series: ``series-`` and the match file name rule."""
    return "series-" + archive_file_name(series)


def archive_series(lobby: Any, store: Any, to_dir: str | Path, older_than_ms: int, now_ms: int) -> tuple[
        list[str], int]:
    """Archive every finished series (engine/lobby/series.py) whose finish is older than the
    cut-off and none of whose hands is still in the store (they were archived first, as a
    table's matches are): one JSON Lines file (a header ``{"format", "series", "room",
    "owner", "players", "hands", "matches", "reason", "standings", "archived_at_ms"}``, then
    each event as a dict), read back, then the series' keys and its code deleted.  The
    archived series and the bytes written."""
    from engine.lobby.series import replay_series
    from engine.lobby.series_events import series_aggregate

    out_dir = Path(to_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cutoff = now_ms - older_than_ms
    done: list[str] = []
    written = 0
    for sid in sorted(lobby.series_ids()):
        events = lobby.load(series_aggregate(sid))
        if not events:
            continue
        s = replay_series(sid, events)
        if s.status != "finished" or events[-1].ts > cutoff:
            continue
        matches = [e.match for e in events if type(e).__name__ == "HandStarted"]
        if any(store.version(m) for m in matches):  # a hand is still live: it goes first
            continue
        head = {"format": SERIES_FORMAT, "series": sid, "room": s.room, "owner": s.owner, "players": list(s.players),
                "bot": s.bot, "hands": s.hands, "matches": matches, "reason": s.reason,
                "standings": s.final.to_json() if s.final is not None else None, "archived_at_ms": now_ms}
        written += _write_lobby_file(out_dir / series_file_name(sid), head, events, SERIES_FORMAT,
                                     f"series {sid}", "deleted")
        lobby.delete_series(sid, s.code or None)
        done.append(sid)
    return done, written


QUEUE_FORMAT = "shuangkou-queue/1"


def queue_file_name(room: str, first: int, last: int) -> str:
    """The archive file of a room queue's events ``first`` … ``last``: ``queue-``, the seqs
    (12 digits each: the files of a room sort in order) and the match file name rule."""
    return f"queue-{first:012d}-{last:012d}-" + archive_file_name(room)


def archive_queues(lobby: Any, rooms: Sequence[str], to_dir: str | Path, older_than_ms: int,
                   now_ms: int) -> tuple[list[tuple[str, int]], int]:
    """Archive the oldest events of each room's queue: those older than the cut-off, up to
    the queue's kept snapshot (a queue's state is folded from there on, engine/service/lobby.py;
    a snapshot this build cannot read, or not at its version, archives nothing), never one the
    lobby's feed follower has still to handle and never a command's events apart
    (:meth:`~engine.store.lobby_store.LobbyStore.trim_point`), to one JSON Lines file per
    room and range (a header ``{"format", "room", "first", "last", "archived_at_ms"}``, then
    each event as a dict), read back, then trimmed from the stream with the command ids that
    appended only them (:meth:`~engine.store.lobby_store.LobbyStore.trim`).  The rooms with
    the events archived, and the bytes written."""
    from engine.lobby.events import queue_aggregate
    from engine.service.lobby import QUEUE_SNAPSHOTS, LobbyStreams

    out_dir = Path(to_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cutoff = now_ms - older_than_ms
    done: list[tuple[str, int]] = []
    written = 0
    for room in rooms:
        agg = queue_aggregate(room)
        base = LobbyStreams(lobby, QUEUE_SNAPSHOTS).base(agg)
        if base is None:  # none, or unreadable: the lobby would fold the whole stream, every event stays
            continue
        events = lobby.load(agg)
        n = 0
        while n < len(events) and events[n].ts <= cutoff:
            n += 1
        if n == 0:
            continue
        upto = lobby.trim_point(agg, min(events[n - 1].seq, base.version))
        part = [e for e in events[:n] if e.seq <= upto]
        if not part:
            continue
        head = {"format": QUEUE_FORMAT, "room": room, "first": part[0].seq, "last": part[-1].seq,
                "archived_at_ms": now_ms}
        written += _write_lobby_file(out_dir / queue_file_name(room, part[0].seq, part[-1].seq), head, part,
                                     QUEUE_FORMAT, f"the queue of {room}", "trimmed")
        trimmed = lobby.trim(agg, part[-1].seq)  # 0: another run took them first
        if trimmed:
            done.append((room, trimmed))
    return done, written


def read_queue_archive(path: str | Path, room: str) -> list[Any]:
    """The archived events of a room's queue under the folder ``path`` (every one of the
    room's :func:`queue_file_name` files, in order; none: ``[]``)."""
    from engine.lobby.events import lobby_event_from_dict

    out: list[Any] = []
    root = Path(path)
    files = [f for f in root.rglob("queue-*-" + archive_file_name(room)) if f.is_file()] if root.is_dir() else []
    for f in sorted(files, key=lambda f: f.name):
        head, events = _read_lobby_file(f, QUEUE_FORMAT, lobby_event_from_dict)
        if head.get("room") == room:
            out += [e for e in events if not out or e.seq > out[-1].seq]
    return out


def read_series_archive(path: str | Path) -> tuple[dict[str, Any], list[Any]]:
    """A series' archive file: its header and its events."""
    from engine.lobby.series_events import stored_event_from_dict

    return _read_lobby_file(path, SERIES_FORMAT, stored_event_from_dict)


def read_table_archive(path: str | Path) -> tuple[dict[str, Any], list[Any]]:
    """A table's archive file: its header and its events."""
    from engine.lobby.events import lobby_event_from_dict

    return _read_lobby_file(path, TABLE_FORMAT, lobby_event_from_dict)


#: the kind of lobby aggregate each archive format holds
LOBBY_FORMATS = {TABLE_FORMAT: "table", SERIES_FORMAT: "series", QUEUE_FORMAT: "queue"}


def _read_lobby_file(path: str | Path, fmt: str, decode: Any) -> tuple[dict[str, Any], list[Any]]:
    """The header and the events (each line ``decode``d) of a table's or a series' archive
    file; ``ValueError`` when its header names another ``format`` than ``fmt``."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    head = json.loads(lines[0])
    if head.get("format") != fmt:
        raise ValueError(f"{path} is not a {LOBBY_FORMATS[fmt]} archive ({head.get('format')!r})")
    return head, [decode(json.loads(x)) for x in lines[1:] if x.strip()]


def _write_lobby_file(path: Path, head: dict[str, Any], events: Sequence[Any], fmt: str, what: str,
                      undone: str) -> int:
    """Write a table's, a series' or a queue's archive file (``head``, then each event as a
    dict) and read it back (:func:`_read_lobby_file`); RuntimeError when it reads back
    otherwise, before anything is ``undone``.  The bytes written."""
    from engine.lobby.events import lobby_event_to_dict
    from engine.lobby.series_events import stored_event_from_dict

    lines = [json.dumps(head, ensure_ascii=False)]
    lines += [json.dumps(lobby_event_to_dict(e), ensure_ascii=False) for e in events]
    text = "\n".join(lines) + "\n"
    _write_atomic(path, text)
    if _read_lobby_file(path, fmt, stored_event_from_dict)[1] != list(events):
        raise RuntimeError(f"archive of {what} at {path} does not read back: nothing {undone}")
    return len(text.encode("utf-8"))


def _write_atomic(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file of its own (two runs at once never share
    one), flushed to disk, then renamed over it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def archive_matches(store: Any, ledger: Ledger, to_dir: str | Path, older_than_ms: int, now_ms: int,
                    limit: int | None = None) -> ArchiveReport:
    """Archive every finished, settled match finished before ``now_ms - older_than_ms``."""
    out_dir = Path(to_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cutoff = now_ms - older_than_ms
    checked, written = 0, 0
    archived: list[str] = []
    unsettled: list[str] = []
    for mid in list(store.match_ids()):
        if limit is not None and len(archived) >= limit:
            break
        checked += 1
        version = store.version(mid)
        if version == 0:
            continue
        last = store.load(mid, after=version - 1)
        if not last or not isinstance(last[-1], (MatchFinished, MatchAbandoned)) or last[-1].ts > cutoff:
            continue
        if ledger.archived(mid) is not None:  # a crash after step 3: finish the deletion
            store.delete_match(mid)
            archived.append(mid)
            continue
        abandoned = isinstance(last[-1], MatchAbandoned)  # ended before the deal: nothing to settle
        settlement = None if abandoned else ledger.settlement(mid)
        if settlement is None and not abandoned:
            unsettled.append(mid)
            continue
        events = store.load(mid)
        text = export_text(events, None if settlement is None else settlement.to_json(), now_ms)
        if settlement is not None:
            header, _, rest = text.partition("\n")
            head = json.loads(header)
            head["ledger_entries"] = ledger_entries(mid, settlement)
            head["settlement_record"] = json.loads(settlement.model_dump_json())
            text = json.dumps(head, ensure_ascii=False) + "\n" + rest
        path = out_dir / archive_file_name(mid)
        _write_atomic(path, text)
        back = parse_events_text(path.read_text(encoding="utf-8")).by_match.get(mid, [])
        if [e.seq for e in back] != [e.seq for e in events]:
            raise RuntimeError(f"archive of {mid} at {path} does not read back: nothing deleted")
        written += len(text.encode("utf-8"))
        if abandoned:
            ledger.mark_archived_unsettled(mid, str(path))
        else:
            ledger.mark_archived(mid, str(path))
        store.delete_match(mid)
        archived.append(mid)
    return ArchiveReport(checked=checked, archived=tuple(archived), skipped_unsettled=tuple(unsettled),
                         bytes_written=written)


def read_lobby_archive(path: str | Path, kind: str, ident: str) -> list[Any] | None:
    """The events of table or series (``kind``) ``ident`` from its archive file under ``path``
    (a folder, or the file itself: :func:`table_file_name`, :func:`series_file_name`); None
    when there is none.  A file that is not that table's or series' raises ``ValueError``."""
    name, read = (table_file_name(ident), read_table_archive) if kind == "table" else \
        (series_file_name(ident), read_series_archive)
    root = Path(path)
    f = root / name if root.is_dir() else root
    if not f.is_file():
        return None
    head, events = read(f)
    if head.get(kind) != ident:
        raise ValueError(f"{f} is the archive of {kind} {head.get(kind)!r}, not {ident!r}")
    return events


def archive_kind(text: str) -> str | None:
    """``table`` or ``series`` when ``text`` is such an archive file (its header line names
    :data:`TABLE_FORMAT` or :data:`SERIES_FORMAT`), None for anything else (a match's)."""
    try:
        head = json.loads(text.split("\n", 1)[0])
    except ValueError:
        return None
    fmt = head.get("format") if isinstance(head, dict) else None
    return LOBBY_FORMATS.get(fmt) if isinstance(fmt, str) else None


def read_archive(path: str | Path) -> tuple[dict[str, list[Any]], dict[str, dict[str, Any]]]:
    """Events and stored settlement forms of every match's archive file under ``path`` (a file
    or a folder, whose tables', series' and queues' files, ``table-*``, ``series-*`` and
    ``queue-*``, are not
    matches'): ``{match_id: {"settlement": ..., "settlement_record": ...}}`` as
    :meth:`engine.tools.export.ParsedEvents.stored_forms` gives them, for
    :func:`engine.tools.export.settlement_differences`."""
    root = Path(path)
    files = sorted(f for f in root.rglob("*.jsonl") if not f.name.startswith(("table-", "series-", "queue-"))) \
        if root.is_dir() else [root]
    events: dict[str, list[Any]] = {}
    stored: dict[str, dict[str, Any]] = {}
    for f in files:
        parsed = parse_events_text(f.read_text(encoding="utf-8"))
        for mid, evs in parsed.by_match.items():
            events[mid] = evs
            stored[mid] = parsed.stored_forms(mid)
    return events, stored


@dataclass(frozen=True)
class ArchivedMatch:
    """Where an archived match went: the ledger's marker (``sk:{ledger}:archived``) and,
    when the file can be read here, the time it was written (its header) and its events."""

    match_id: str
    file: str
    archived_at_ms: int | None = None
    events: tuple[Any, ...] = ()
    readable: bool = False

    def where(self) -> str:
        """``archived on 2026-12-01 20:05 UTC to FILE`` (the date when the file says it)."""
        from projections.timeline import format_ts

        when = f" on {format_ts(self.archived_at_ms)} UTC" if self.archived_at_ms else ""
        return f"archived{when} to {self.file}"


def load_archived(match_id: str, file: str) -> ArchivedMatch:
    """The marker of ``match_id`` with the file's time and events, when the file is readable
    here and holds that match (otherwise only where it went)."""
    try:
        text = Path(file).read_text(encoding="utf-8")
        header = json.loads(text.partition("\n")[0])
        events = parse_events_text(text).by_match.get(match_id, [])
    except (OSError, ValueError):
        return ArchivedMatch(match_id, file)
    at = header.get("exported_at_ms") if isinstance(header, dict) else None
    return ArchivedMatch(match_id, file, at if isinstance(at, int) else None, tuple(events), bool(events))


def archived_match(ledger: Ledger, match_id: str) -> ArchivedMatch | None:
    """The archived match ``match_id`` (:func:`load_archived`), or None: never archived."""
    file = ledger.archived(match_id)
    return None if file is None else load_archived(match_id, file)


def archived_markers(client: Any) -> dict[str, str]:
    """Every archived match id → its file, from the ledger's ``sk:{ledger}:archived`` hash."""
    from projections.ledger import ARCHIVED_KEY

    def text(v: Any) -> str:
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)

    return {text(k): text(v) for k, v in (client.hgetall(ARCHIVED_KEY) or {}).items()}
