"""What a room's queue costs whoever runs it next (a restart, a new owner of its bucket).

    python bench/queue_load.py [--matches 1083 10083] [--runs 5] [--json]

On a redis-server of its own (no persistence), for each ``--matches`` count: a room's queue
history of that many matches, made by the lobby's pure model (tests/lobby_world.py: two
players Join, are paired, play a one-card match, are settled and Leave; six queue events a
match), appended through :class:`engine.service.lobby.LobbyStreams` as the lobby appends it,
so a snapshot is saved every ``QUEUE_SNAPSHOT_EVERY`` events.  Then, ``--runs`` times in turn:

* ``snapshot_ms``: a fresh :class:`~engine.service.lobby.LobbyEngine` loads the queue (the
  latest snapshot, then the ``tail_events`` after it: 498 with the default counts, 83 matches
  past a multiple of 500 events, about the most a load folds);
* ``whole_ms``: the same with no snapshot (the whole stream read and folded: the baseline,
  what every load cost before the queue was snapshotted).

Printed per count, medians of the runs and their spread: ``events``, ``tail_events``, ``snapshot_ms``,
``whole_ms``, ``ratio`` (``whole_ms / snapshot_ms``, each run's own, median), and
``queue_bytes_per_match``: ``MEMORY USAGE`` of the queue's stream, command ids, room feed and
snapshot over the matches (what the room keeps for each match it ever paired, until
``shuangkou archive`` takes the old ones).  It measures; it
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import start_redis_server, stop_redis_server  # noqa: E402


def history(matches: int) -> list[Any]:
    """The queue events of ``matches`` matches of a room (the pure model)."""
    from tests.lobby_world import World

    w = World(bots=False)
    people = [f"p{i}" for i in range(40)]
    for r in range(matches):
        a, b = people[(2 * r) % 40], people[(2 * r + 1) % 40]
        before = set(w.tables)
        for p in (a, b):
            w.join(p)
        w.deliver_all()
        for p in (a, b):
            w.ready(p)
        w.deliver_all()
        m = w.current_match(a)
        if m:
            w.play_out(m)
        w.deliver_all()
        for t in set(w.tables) - before:
            w.settle(t)
        w.deliver_all()
        w.now += 1000
        w.leave(a)
        w.leave(b)
        w.deliver_all()
    return w.queue_events


def store_history(client: Any, room: str, events: list[Any]) -> None:
    """Append ``events`` command by command, as the lobby does (snapshots included)."""
    from engine.lobby.replay import replay_queue
    from engine.lobby.state import QueueState
    from engine.service.lobby import QUEUE_SNAPSHOTS, LobbyStreams
    from engine.store.lobby_store import RedisLobbyStore

    streams = LobbyStreams(RedisLobbyStore(client), QUEUE_SNAPSHOTS)
    state = QueueState(room=room)
    i = 0
    while i < len(events):
        j = i
        while j < len(events) and events[j].command_id == events[i].command_id:
            j += 1
        new = replay_queue(room, events[i:j], state)
        streams.append(f"queue:{room}", state.version, events[i].command_id, events[i:j], new)
        state, i = new, j


def load_ms(client: Any, room: str, snapshots: bool) -> float:
    from engine.service.lobby import QUEUE_SNAPSHOTS, LobbyEngine
    from engine.store.lobby_store import RedisLobbyStore

    engine = LobbyEngine(RedisLobbyStore(client), matches=None, clock=lambda: 0, rooms=None,  # type: ignore[arg-type]
                         follow_appends=False, queue_snapshots=QUEUE_SNAPSHOTS if snapshots else None)
    t = time.perf_counter()
    engine.queue(room)
    return (time.perf_counter() - t) * 1000


def measure(client: Any, matches: int, runs: int) -> dict[str, Any]:
    from engine.store import keys

    client.flushdb()
    room = "points"
    events = history(matches)
    store_history(client, room, events)
    with_snap, whole, ratios = [], [], []
    for _ in range(runs):
        s, w = load_ms(client, room, True), load_ms(client, room, False)
        with_snap.append(s)
        whole.append(w)
        ratios.append(w / s)
    ks = keys.queue_keys(room)
    used = sum(client.memory_usage(k) or 0 for k in (ks[0], ks[1], ks[2], keys.lobby_snapshot_key(f"queue:{room}")))
    from engine.service.lobby import QUEUE_SNAPSHOT_EVERY

    return {"matches": matches, "events": len(events), "tail_events": len(events) % QUEUE_SNAPSHOT_EVERY,
            "snapshot_ms": round(statistics.median(with_snap), 2),
            "snapshot_ms_spread": [round(min(with_snap), 2), round(max(with_snap), 2)],
            "whole_ms": round(statistics.median(whole), 1),
            "whole_ms_spread": [round(min(whole), 1), round(max(whole), 1)],
            "ratio": round(statistics.median(ratios), 1),
            "queue_bytes_per_match": round(used / matches)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matches", type=int, nargs="+", default=[1083, 10083])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import redis

    proc, url, workdir = start_redis_server()
    try:
        client = redis.Redis.from_url(url)
        out = [measure(client, n, args.runs) for n in args.matches]
    finally:
        stop_redis_server(proc, workdir)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for r in out:
        print(f"{r['matches']} matches ({r['events']} events): {r['snapshot_ms']} ms from the snapshot "
              f"and {r['tail_events']} events, "
              f"{r['whole_ms']} ms folding the whole stream (×{r['ratio']}); "
              f"{r['queue_bytes_per_match']} B of the queue's keys a match")


if __name__ == "__main__":
    main()
