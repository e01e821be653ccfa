"""The nemesis (issue 35 §7): faults on the whole stack on a real Redis Cluster, and what the
checker finds in what the clients were told.

    python bench/nemesis.py [--minutes N | --rounds 1] [--kinds kill_master,...] [--replica-acks K]
                            [--replicas 2] [--logs DIR] [--json]

It makes a private network namespace (``ip netns add``; root or CAP_NET_ADMIN), runs itself
inside it (``ip netns exec``), and removes it at the end.  Inside: the stack and the clients of
tests/nemesis/harness.py, each fault kind in turn (round after round for ``--minutes``, a
master lost for good once at the end), then tests/nemesis/checker.py over the clients'
history and the store.

The JSON: ``kinds`` maps each fault kind (``kill_master``, ``stop_master``,
``partition_master``, ``partition_serve``, ``kill_process``, ``lose_master``) to ``faults``,
``acked``, ``acked_lost``, ``duplicates_applied``, ``updates_not_in_store``,
``ledger_mismatches``, ``outage_timeouts_charged``, ``stall_s_max`` (and ``version_gaps``,
``version_backwards``, ``late_ends``); ``totals`` the same over the run; ``findings`` the first
of what the checker found; ``backwards`` each update an inbox player read below a version it
had read (not a redelivery), with its entry id and command id and the entry first read at
that version (the writer's traces); ``replay_all_exit`` the exit code of ``shuangkou replay --all`` on
the final store; ``others_throughput`` for each partition of a master the commands/s acknowledged
on the other masters' matches during it and in the 30 s before it (clipped at the previous
fault's heal), and ``others_throughput_ratio`` the lowest ratio of the two (issue 35's target:
≥ 0.8; also in ``kinds.partition_master``).  ``--replica-acks`` unset runs the product's defaults.
``logs``: the folder of the run's process logs and history (``--logs``, created if need be;
without it a new ``sk-nemesis-*`` under the system's temporary folder), kept after the run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.nemesis import netns  # noqa: E402
from tests.nemesis.harness import KINDS, Config, dumps, run_inside  # noqa: E402


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=None, help="fault after fault for this long")
    ap.add_argument("--rounds", type=int, default=1, help="without --minutes: faults of each kind")
    ap.add_argument("--kinds", default=",".join(KINDS), help="the fault kinds, comma-separated")
    ap.add_argument("--replica-acks", type=int, default=None, help="serve --replica-acks and SK_REPLICA_ACKS "
                    "(unset: the product's defaults)")
    ap.add_argument("--masters", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=2, help="replicas per master")
    ap.add_argument("--inbox-clients", type=int, default=3)
    ap.add_argument("--ws-pairs", type=int, default=2)
    ap.add_argument("--settle", type=float, default=6.0, help="seconds of load between two faults")
    ap.add_argument("--baseline", type=float, default=30.0, help="seconds of load before a partition of a "
                    "master (the other masters' throughput is compared with it)")
    ap.add_argument("--logs", help="the folder for the run's logs and history (default: a new "
                    "sk-nemesis-* under the system's temporary folder); kept after the run")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--inside", help=argparse.SUPPRESS)  # the namespace this process already runs in
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        print(f"unknown fault kinds {unknown} (one of {', '.join(KINDS)})", file=sys.stderr)
        return 2
    if args.inside is None:
        reason = netns.unavailable()
        if reason is not None:
            print(f"bench/nemesis.py: {reason}", file=sys.stderr)
            return 3
        n = args.masters * (1 + args.replicas)
        with netns.NetNS(f"sk-nem-{os.getpid()}", n) as ns:
            argv_in = [*ns.exec, sys.executable, str(Path(__file__).resolve()), *(argv or sys.argv[1:]),
                       "--inside", ns.name]
            env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
            return subprocess.run(argv_in, env=env, cwd=ROOT).returncode
    cfg = Config(replica_acks=args.replica_acks, masters=args.masters, replicas=args.replicas,
                 inbox_clients=args.inbox_clients, ws_pairs=args.ws_pairs, kinds=kinds, rounds=args.rounds,
                 minutes=args.minutes, settle_s=args.settle, baseline_s=args.baseline)
    if args.logs:
        tmp = Path(args.logs).resolve()
        tmp.mkdir(parents=True, exist_ok=True)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="sk-nemesis-"))
    result = run_inside(cfg, tmp)
    result["logs"] = str(tmp)
    if args.json:
        print(dumps(result))
    else:
        for kind, row in result["kinds"].items():
            print(f"{kind:>17}: " + " ".join(f"{k}={v}" for k, v in row.items()))
        print(json.dumps({k: v for k, v in result.items() if k != "kinds"}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
