"""What a match event's codec costs: the dicts serve builds for every event it appends.

    python bench/codec.py [--matches 20] [--runs 5] [--json]

In this process, no Redis: the events of ``--matches`` random bot matches (tests/strategies.py,
played through :class:`~engine.service.service.MatchService` on the in-memory store, the
same seeds every run).  Then, ``--runs`` times in turn, CPU µs per event (``time.process_time``)
of each way over every event:

* ``append_us``: what serve does with an accepted command's events, each event's stored bytes
  (:func:`~engine.match.events.encode_event`) and its public dict for the players' updates
  (:func:`~engine.match.events.public_event_dict`);
* ``append_dump_us``: the same through pydantic's ``model_dump`` (the baseline: how
  :func:`~engine.match.events.event_to_dict` built every dict before it copied a plain
  event's fields);

Printed: the medians, their spread, and ``append_ratio`` (baseline ÷ this code, each run's
own, median).  It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import msgpack

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.match import events as ev  # noqa: E402
from tests.strategies import MatchSpec, play_match  # noqa: E402


def match_events(matches: int) -> list[ev.EventBase]:
    out: list[ev.EventBase] = []
    for seed in range(matches):
        run = play_match(MatchSpec(seed=seed, mode="points", escape_policy="trustee", reclaim=False,
                                   chaos=0.1, snapshot_every=50))
        for step in run.steps:
            out += step.outcome.events
    return out


def _per_event(fn: Any, events: list[Any], repeat: int = 5) -> float:
    t0 = time.process_time()
    for _ in range(repeat):
        for e in events:
            fn(e)
    return (time.process_time() - t0) * 1e6 / (repeat * len(events))


def _append(e: ev.EventBase) -> None:
    ev.encode_event(e)
    ev.public_event_dict(e)


def _append_dump(e: ev.EventBase) -> None:
    msgpack.packb(e.model_dump(mode="python"), use_bin_type=True)
    data = e.model_dump(mode="python")
    for name in ev.PRIVATE_FIELDS.get(str(data.get("type")), ()):
        data.pop(name, None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matches", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    events = match_events(a.matches)
    runs: list[dict[str, float]] = []
    for _ in range(a.runs):
        runs.append({"append_us": _per_event(_append, events),
                     "append_dump_us": _per_event(_append_dump, events)})
    out: dict[str, Any] = {"events": len(events), "runs": a.runs}
    for k in runs[0]:
        vals = [r[k] for r in runs]
        out[k] = round(statistics.median(vals), 2)
        out[k + "_spread"] = [round(min(vals), 2), round(max(vals), 2)]
    out["append_ratio"] = round(statistics.median(r["append_dump_us"] / r["append_us"] for r in runs), 2)
    print(json.dumps(out) if a.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
