"""The nemesis checker (issue 35 §2): what clients were told against what the store holds.

A pure library: :func:`check` takes a :class:`History` (what each client sent and was told,
and when the faults were) and a :class:`Final` snapshot of the store (each match's events,
the ledger's settlements and balances) and returns a :class:`Report`.  No clock, no I/O; the
harness (tests/nemesis/harness.py) records the history and takes the snapshot.

The rules, each a counter of the report (tests/test_nemesis_checker.py breaks each one):

* ``acked_lost``: an acknowledged command (``accepted``, ``duplicate``, or an update carrying
  its command id) has no event in the log (nor an entry in the match's command record);
* ``duplicates_applied``: a command's events form more than one run of seqs (applied twice);
* ``updates_not_in_store``: an update a player read is not in the log at the same version with
  the same content (its events compared field by field, :data:`COMPARED`);
* ``version_gaps`` / ``version_backwards``: a player's updates of a match skip versions (not
  after a resync view) or go back (redeliveries marked ``duplicate`` aside);
* ``late_ends``: a match live at a heal is not finished or abandoned within
  ``ready_seconds + 2 × turn_seconds + grace + 30 s`` after it; the finding says what held it
  (its timeouts: the client idle, its command not taken in time, or the update late; a client
  that gave up on it, :attr:`History.gave_up`; the faults after that heal);
* ``ledger_mismatches``: a settlement booked for a match the log does not finish, a booked
  settlement that differs from the log's, a finished match never booked, or a balance that is
  not its opening plus the log's settlements (each booked once: coins are conserved);
* ``outage_timeouts_charged``: a ``TurnTimedOut`` for a turn whose update (the version just
  before the timeout) reached the player after its deadline, or never; and a player removed
  by the ready clock (``PlayerRemoved`` ``not_ready``) who read no update of their seat (a
  version from their ``PlayerSeated`` on) before the ready deadline, or none while the load
  ran (:attr:`History.load_stop_ms`: a client stopped at a table not dealt is not charged).

:func:`by_fault` splits a report's findings over the faults by time (each finding goes to the
fault nearest in time); :func:`stall_s_max` is the longest time without any acknowledgement
around a fault; :func:`others_throughput` compares the commands/s acknowledged on the matches a
fault did not touch during the fault with the same matches' rate before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: the event fields compared between an update a player read and the stored event (those
#: present on both sides: a redacted hand or a rewritten command id is not compared)
COMPARED = ("seq", "type", "ts", "player", "cards", "winner", "loser", "count", "reason", "kou")
#: the events that end a match
TERMINAL = ("MatchFinished", "MatchAbandoned")
#: the report's counters, in order
COUNTERS = ("acked", "acked_lost", "duplicates_applied", "updates_not_in_store", "version_gaps",
            "version_backwards", "late_ends", "ledger_mismatches", "outage_timeouts_charged")


@dataclass(frozen=True)
class Ack:
    """An acknowledgement a client got for a command (``kind``: accepted, duplicate or update),
    ``command_id`` as the engine stores it, at ``at_ms`` (the client's wall clock)."""

    client: str
    match: str
    command_id: str
    kind: str
    at_ms: int
    version: int | None = None


@dataclass(frozen=True)
class Read:
    """An update a player read: its version, its events (each a map with at least ``seq`` and
    ``type``), whether it was a redelivery (``duplicate``) or carried a full view (a resync),
    and its brief's ``turn`` and ``deadline_ms``."""

    player: str
    match: str
    version: int
    at_ms: int
    events: tuple[Mapping[str, Any], ...] = ()
    duplicate: bool = False
    view: bool = False
    turn: str | None = None
    deadline_ms: int | None = None


@dataclass(frozen=True)
class Sent:
    """A command a client sent (each time it sent it, a re-send with the same id too) for
    ``player`` in ``match``, at ``at_ms`` (its first attempt): whether a player acted before a
    deadline; ``stored_ms``: when the server had it (the inbox entry id's milliseconds, after
    the XADD's retries through an outage; None: not known, a WebSocket frame)."""

    client: str
    player: str | None
    match: str
    command_id: str
    at_ms: int
    stored_ms: int | None = None


@dataclass(frozen=True)
class GaveUp:
    """A client stopped playing a match before it ended, at ``at_ms``, for ``why`` (its error):
    the match then runs on the clocks alone, which no real player's match does."""

    client: str
    match: str
    at_ms: int
    why: str


@dataclass(frozen=True)
class Fault:
    """One fault: its kind (``kill_master`` …), when it began and when it was healed."""

    kind: str
    start_ms: int
    heal_ms: int


@dataclass
class History:
    acks: list[Ack] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    #: when the clients were told to stop (None: they never were)
    load_stop_ms: int | None = None
    #: the commands the clients sent (``late_ends`` tells a client that did not act from a
    #: server that did not take its command)
    sends: list[Sent] = field(default_factory=list)
    #: the matches a client stopped playing before they ended
    gave_up: list[GaveUp] = field(default_factory=list)


@dataclass
class Final:
    """The store after the run: ``log`` match → its events in seq order (maps with ``seq``,
    ``type``, ``command_id``, ``ts`` and the event's fields); ``recorded`` match → the command ids
    of its command record (a command that appended nothing is only there); ``booked`` match →
    the ledger's settlement scores; ``settled`` match → the scores the log's events settle to
    (finished matches only); ``balances`` / ``opening`` player → balance now / before the run."""

    log: dict[str, list[Mapping[str, Any]]]
    booked: dict[str, dict[str, int]] = field(default_factory=dict)
    settled: dict[str, dict[str, int]] = field(default_factory=dict)
    balances: dict[str, int] = field(default_factory=dict)
    opening: dict[str, int] = field(default_factory=dict)
    recorded: dict[str, set[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Limits:
    """The room's clocks and the sweeper's grace: a match live at a heal ends within
    ``ready_s + 2 * turn_s + grace_s + slack_s`` of it."""

    ready_s: float
    turn_s: float
    grace_s: float
    slack_s: float = 30.0

    @property
    def end_bound_ms(self) -> int:
        return int((self.ready_s + 2 * self.turn_s + self.grace_s + self.slack_s) * 1000)


@dataclass(frozen=True)
class Finding:
    """One broken rule: the counter it adds to, the match, what was seen, and when (for
    :func:`by_fault`)."""

    rule: str
    match: str | None
    detail: str
    at_ms: int | None = None


@dataclass
class Report:
    acked: int = 0
    findings: list[Finding] = field(default_factory=list)
    ack_times: list[int] = field(default_factory=list)

    def count(self, rule: str) -> int:
        if rule == "acked":
            return self.acked
        return sum(1 for f in self.findings if f.rule == rule)

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> dict[str, int]:
        return {k: self.count(k) for k in COUNTERS}

    def to_json(self) -> dict[str, Any]:
        return {**self.summary(), "findings": [asdict(f) for f in self.findings[:200]]}


def _runs(seqs: Sequence[int]) -> int:
    """How many runs of consecutive numbers ``seqs`` (sorted) makes."""
    return sum(1 for i, s in enumerate(seqs) if i == 0 or s != seqs[i - 1] + 1)


def _same(read: Mapping[str, Any], stored: Mapping[str, Any]) -> bool:
    return all(read[k] == stored[k] for k in COMPARED if k in read and k in stored
               and read[k] is not None and stored[k] is not None)


def _norm(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def check(history: History, final: Final, limits: Limits) -> Report:
    """Every rule of this module's docstring over ``history`` and ``final``."""
    report = Report()
    out = report.findings
    log = final.log

    # acknowledged commands: in the log, exactly once
    acked: dict[tuple[str, str], int] = {}
    kinds: dict[tuple[str, str], set[str]] = {}
    for a in history.acks:
        report.ack_times.append(a.at_ms)
        key = (a.match, a.command_id)
        acked[key] = min(acked.get(key, a.at_ms), a.at_ms)
        kinds.setdefault(key, set()).add(a.kind)
    report.acked = len(acked)
    by_command: dict[tuple[str, str], list[int]] = {}
    for match, events in log.items():
        for e in events:
            cid = e.get("command_id")
            if cid:
                by_command.setdefault((match, cid), []).append(int(e["seq"]))
    for (match, cid), at in sorted(acked.items()):
        if (match, cid) not in by_command and cid not in final.recorded.get(match, set()):
            out.append(Finding("acked_lost", match, f"acknowledged {cid!r} ({', '.join(sorted(kinds[(match, cid)]))}) "
                               "is not in the log", at))
    for (match, cid), seqs in sorted(by_command.items()):
        if _runs(sorted(seqs)) > 1:
            again = int(log[match][sorted(seqs)[-1] - 1].get("ts", 0)) or None
            out.append(Finding("duplicates_applied", match, f"{cid!r} applied more than once: seqs {sorted(seqs)}",
                               again))

    # updates read: in the log at the same version with the same content
    for r in history.reads:
        events = log.get(r.match, [])
        bad = None
        if r.version > len(events):
            bad = f"version {r.version} read by {r.player}, the log has {len(events)} events"
        else:
            for e in r.events:
                seq = int(e["seq"])
                stored = events[seq - 1] if 1 <= seq <= len(events) else None
                if stored is None or not _same({k: _norm(v) for k, v in e.items()},
                                               {k: _norm(v) for k, v in stored.items()}):
                    shown = {k: e.get(k) for k in COMPARED if k in e}
                    kept = None if stored is None else {k: stored.get(k) for k in COMPARED if k in stored}
                    bad = f"{r.player} read {shown}, the log holds {kept}"
                    break
        if bad is not None:
            out.append(Finding("updates_not_in_store", r.match, bad, r.at_ms))

    # each player's versions of a match: never back (redeliveries aside), and no version skipped
    # in the end (a redelivery may fill a gap late; a view covers every version up to its own)
    last: dict[tuple[str, str], int] = {}
    covered: dict[tuple[str, str], set[int]] = {}
    reads_of: dict[tuple[str, str], list[Read]] = {}
    for r in history.reads:
        key = (r.player, r.match)
        reads_of.setdefault(key, []).append(r)
        first = r.version - len(r.events) + 1 if r.events else r.version
        got = covered.setdefault(key, set())
        got.update(range(1 if r.view else first, r.version + 1))
        if r.duplicate:
            continue
        prev = last.get(key)
        if prev is not None and r.version < prev:
            out.append(Finding("version_backwards", r.match, f"{r.player}: version {r.version} after {prev}",
                               r.at_ms))
        last[key] = max(r.version, prev or 0)
    for key, got in covered.items():
        player, match = key
        missing = sorted(set(range(min(got), max(got) + 1)) - got)
        runs = [v for i, v in enumerate(missing) if i == 0 or v != missing[i - 1] + 1]
        for start in runs:
            upto = start
            while upto + 1 in missing:
                upto += 1
            after = next((r.at_ms for r in reads_of[key] if r.version > upto), None)
            out.append(Finding("version_gaps", match, f"{player}: versions {start}..{upto} never read", after))

    # every match live at a heal ends within the bound after it
    bound = limits.end_bound_ms
    sends_of: dict[tuple[str, str], list[tuple[int, int | None]]] = {}
    for sent in history.sends:
        if sent.player is not None:
            sends_of.setdefault((sent.player, sent.match), []).append((sent.at_ms, sent.stored_ms))
    gave_up = {g.match: g for g in sorted(history.gave_up, key=lambda g: -g.at_ms)}
    first_read: dict[tuple[str, str, int], Read] = {}
    for r in history.reads:
        rk = (r.player, r.match, r.version)
        if rk not in first_read or r.at_ms < first_read[rk].at_ms:
            first_read[rk] = r
    for match, events in log.items():
        if not events:
            continue
        born = int(events[0].get("ts", 0))
        end = next((int(e.get("ts", 0)) for e in events if e.get("type") in TERMINAL), None)
        for f in history.faults:
            if born <= f.heal_ms and (end is None or end > f.heal_ms) and (end is None or end > f.heal_ms + bound):
                what = "never ended" if end is None else f"ended {(end - f.heal_ms) / 1000:.1f}s after the heal"
                timeouts = sum(1 for e in events if e.get("type") == "TurnTimedOut")
                gap = max((int(b.get("ts", 0)) - int(a.get("ts", 0)) for a, b in zip(events, events[1:])
                           if int(b.get("ts", 0)) > f.heal_ms), default=0)
                why = _late_why(match, events, f, end, history.faults, sends_of, first_read, gave_up.get(match))
                out.append(Finding("late_ends", match, f"live at the {f.kind} heal, {what} "
                                   f"(bound {bound / 1000:.0f}s; began {(f.heal_ms - born) / 1000:.1f}s before "
                                   f"it, {len(events)} events, {timeouts} timeouts, longest gap after the heal "
                                   f"{gap / 1000:.1f}s){why}", f.heal_ms))
                break

    # the bank: the ledger equals the log's settlements, each booked once (a match the log lost
    # whole has the time of its last acknowledgement)
    last_ack: dict[str, int] = {}
    for a in history.acks:
        last_ack[a.match] = max(last_ack.get(a.match, 0), a.at_ms)
    for match, scores in sorted(final.booked.items()):
        events = log.get(match, [])
        end_at = next((int(e.get("ts", 0)) for e in events if e.get("type") == "MatchFinished"), None)
        if match not in final.settled:
            out.append(Finding("ledger_mismatches", match, f"booked {scores} for a match the log does not finish",
                               int(events[-1].get("ts", 0)) if events else last_ack.get(match)))
        elif dict(scores) != dict(final.settled[match]):
            out.append(Finding("ledger_mismatches", match, f"booked {scores}, the log settles {final.settled[match]}",
                               end_at))
    for match in sorted(set(final.settled) - set(final.booked)):
        events = log.get(match, [])
        out.append(Finding("ledger_mismatches", match, "finished in the log, never booked",
                           int(events[-1].get("ts", 0)) if events else None))
    expected: dict[str, int] = dict(final.opening)
    for scores in final.settled.values():
        for p, s in scores.items():
            expected[p] = expected.get(p, 0) + int(s)
    # a balance off goes with the latest match of the player's found above (else it has no time:
    # a settlement booked twice, counted in the totals only)
    first_at: dict[str, int] = {}  # each match's first finding so far (the cause comes first)
    for fd in out:
        if fd.match is not None and fd.at_ms is not None:
            first_at[fd.match] = min(first_at.get(fd.match, fd.at_ms), fd.at_ms)
    when: dict[str, int] = {}
    for fd in list(out):
        if fd.rule == "ledger_mismatches" and fd.match is not None and fd.match in first_at:
            for p in {**final.booked.get(fd.match, {}), **final.settled.get(fd.match, {})}:
                when[p] = max(when.get(p, 0), first_at[fd.match])
    for p in sorted(set(expected) | set(final.balances)):
        if final.balances.get(p, 0) != expected.get(p, 0):
            out.append(Finding("ledger_mismatches", None, f"{p}: balance {final.balances.get(p, 0)}, "
                               f"the opening plus the log's settlements {expected.get(p, 0)}", when.get(p)))

    # timeouts charged for a turn whose update came after its deadline, or never
    reads_at = first_read  # each player's first read of each version
    for match, events in log.items():
        for e in events:
            if e.get("type") != "TurnTimedOut":
                continue
            seq, player = int(e["seq"]), str(e.get("player"))
            seen = reads_at.get((player, match, seq - 1))
            deadline = seen.deadline_ms if seen is not None and seen.deadline_ms is not None else int(e.get("ts", 0))
            if seen is None or seen.at_ms > deadline:
                how = "never read" if seen is None else f"read {(seen.at_ms - deadline) / 1000:.1f}s after its deadline"
                out.append(Finding("outage_timeouts_charged", match,
                                   f"{player} charged a timeout at seq {seq}: version {seq - 1} {how}",
                                   int(e.get("ts", 0)) or None))
    # the ready clock: a player removed as not ready had read an update of their seat in time
    for match, events in log.items():
        seated: dict[str, int] = {}
        for e in events:
            if e.get("type") == "PlayerSeated":
                seated[str(e.get("player"))] = int(e["seq"])
            if e.get("type") != "PlayerRemoved" or e.get("reason") != "not_ready":
                continue
            seq, player, ts = int(e["seq"]), str(e.get("player")), int(e.get("ts", 0))
            since = seated.get(player, 1)
            mine = sorted((r for r in reads_of.get((player, match), []) if since <= r.version < seq),
                          key=lambda r: r.at_ms)
            shown = [r.deadline_ms for r in mine if r.deadline_ms is not None]
            deadline = max(shown) if shown else ts
            if not mine:
                if history.load_stop_ms is not None and ts >= history.load_stop_ms:
                    continue
                how = "no update of the seat read"
            elif mine[0].at_ms > deadline:
                how = f"the seat's first update read {(mine[0].at_ms - deadline) / 1000:.1f}s after the ready deadline"
            else:
                continue
            out.append(Finding("outage_timeouts_charged", match, f"{player} removed as not ready at seq {seq}: {how}",
                               ts or None))
    return report


def _late_why(match: str, events: Sequence[Mapping[str, Any]], heal: Fault, end: int | None,
              faults: Sequence[Fault], sends_of: Mapping[tuple[str, str], list[tuple[int, int | None]]],
              first_read: Mapping[tuple[str, str, int], Read], gave_up: GaveUp | None) -> str:
    """What tells a late match's causes apart: each ``TurnTimedOut`` is ``idle`` (the player read
    the turn's update in time and sent no command before its deadline: the client did not act),
    ``sent`` (a command of the player's went out between the update and the deadline and the
    server had it by the deadline, or when it had it is not known: the server did not take it
    in time), ``stored_late`` (tried in time, but its XADD went through only after the
    deadline: the outage met the client's own write) or ``unread`` (the update came after the
    deadline, or never: the outage's); the client that gave up on the match; the faults that
    began after this heal and before the end (the bound runs from each heal)."""
    idle = sent = stored_late = unread = 0
    for e in events:
        if e.get("type") != "TurnTimedOut":
            continue
        seq, player, ts = int(e["seq"]), str(e.get("player")), int(e.get("ts", 0))
        seen = first_read.get((player, match, seq - 1))
        deadline = seen.deadline_ms if seen is not None and seen.deadline_ms is not None else ts
        if seen is None or seen.at_ms > deadline:
            unread += 1
        else:
            tried = [stored for t, stored in sends_of.get((player, match), ())
                     if seen.at_ms <= t <= max(deadline, seen.at_ms)]
            if any(stored is None or stored <= deadline for stored in tried):
                sent += 1
            elif tried:
                stored_late += 1
            else:
                idle += 1
    parts = [f"timeouts: {idle} idle (update read in time, no command sent by the deadline), "
             f"{sent} with a command sent in time, {unread} with the update late or never read, "
             f"{stored_late} with a command tried in time and stored after the deadline"]
    if gave_up is not None:
        parts.append(f"the client {gave_up.client} gave up on it {(gave_up.at_ms - heal.heal_ms) / 1000:+.1f}s "
                     f"from the heal: {gave_up.why[:160]}")
    later = [g for g in faults if heal.heal_ms < g.start_ms and (end is None or g.start_ms < end)]
    for g in later:
        after = "" if end is None else f", ended {(end - g.heal_ms) / 1000:.1f}s after its heal"
        parts.append(f"then a {g.kind} {(g.start_ms - heal.heal_ms) / 1000:+.1f}s..{(g.heal_ms - heal.heal_ms) / 1000:+.1f}s"
                     f"{after}")
    return "; " + "; ".join(parts)


def _nearest(faults: Sequence[Fault], at_ms: int) -> int:
    def distance(f: Fault) -> int:
        return 0 if f.start_ms <= at_ms <= f.heal_ms else min(abs(at_ms - f.start_ms), abs(at_ms - f.heal_ms))

    return min(range(len(faults)), key=lambda i: (distance(faults[i]), i))


def stall_s_max(ack_times: Iterable[int], start_ms: int, end_ms: int) -> float:
    """The longest time in ``[start_ms, end_ms]`` without an acknowledgement, in seconds."""
    times = sorted(t for t in ack_times if start_ms <= t <= end_ms)
    edges = [start_ms, *times, end_ms]
    return round(max(b - a for a, b in zip(edges, edges[1:])) / 1000, 2)


def by_fault(report: Report, history: History, after_heal_ms: int = 10_000) -> dict[str, dict[str, Any]]:
    """The report's counters per fault kind: each acknowledgement and finding goes to the fault
    nearest in time (every finding of a match to the fault nearest its first finding; a finding
    without a time to none: it counts in :meth:`Report.summary` only); ``faults`` counts them, and ``stall_s_max`` is the longest time without an
    acknowledgement from a fault's start to ``after_heal_ms`` after its heal."""
    faults = history.faults
    out: dict[str, dict[str, Any]] = {}
    for f in faults:
        row = out.setdefault(f.kind, {"faults": 0, **{k: 0 for k in COUNTERS}, "stall_s_max": 0.0})
        row["faults"] += 1
        row["stall_s_max"] = max(row["stall_s_max"], stall_s_max(report.ack_times, f.start_ms,
                                                                  f.heal_ms + after_heal_ms))
    if not faults:
        return out
    acked: dict[tuple[str, str], int] = {}
    for a in history.acks:
        acked[(a.match, a.command_id)] = min(acked.get((a.match, a.command_id), a.at_ms), a.at_ms)
    for at in acked.values():
        out[faults[_nearest(faults, at)].kind]["acked"] += 1
    first: dict[str, int] = {}  # a match's findings all go with its first one: the cause comes first
    for finding in report.findings:
        if finding.match is not None and finding.at_ms is not None:
            first[finding.match] = min(first.get(finding.match, finding.at_ms), finding.at_ms)
    for finding in report.findings:
        when = first.get(finding.match, finding.at_ms) if finding.match is not None else finding.at_ms
        if when is not None:
            out[faults[_nearest(faults, when)].kind][finding.rule] += 1
    return out


def others_throughput(acks: Iterable[Ack], fault: Fault, touched: Callable[[str], bool],
                      not_before_ms: int | None = None, window_ms: int = 30_000) -> dict[str, Any]:
    """The commands/s acknowledged (each command once, at its first acknowledgement) on the
    matches for which ``touched`` is false, from ``fault.start_ms`` to ``fault.heal_ms``, against
    their rate in the ``window_ms`` before the start (clipped at ``not_before_ms``, the previous
    fault's heal).  ``ratio`` is None without a baseline (no acknowledgement before)."""
    first: dict[tuple[str, str], int] = {}
    for a in acks:
        if touched(a.match):
            continue
        key = (a.match, a.command_id)
        first[key] = min(first.get(key, a.at_ms), a.at_ms)
    since = fault.start_ms - window_ms if not_before_ms is None else max(fault.start_ms - window_ms, not_before_ms)
    before_s = max(fault.start_ms - since, 1) / 1000
    during_s = max(fault.heal_ms - fault.start_ms, 1) / 1000
    before = sum(1 for t in first.values() if since <= t < fault.start_ms) / before_s
    during = sum(1 for t in first.values() if fault.start_ms <= t <= fault.heal_ms) / during_s
    return {"before_per_s": round(before, 2), "during_per_s": round(during, 2), "before_s": round(before_s, 1),
            "ratio": round(during / before, 3) if before > 0 else None}
