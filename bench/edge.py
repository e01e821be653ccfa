"""Memory of the gateway under large frames before login (issue 23 item 1).

Starts a throw-away redis-server and, per run, a fresh ``shuangkou gateway``; then N
unauthenticated sockets each send one 16,000,000-byte frame (a hostile client's first
message), and the gateway's RSS is sampled every 10 ms (``/proc/<pid>/status``).

* **limit** (what ships): ``--max-message-bytes 16384`` -- the transport refuses each frame at
  its header (close 1009), nothing is buffered.
* **baseline** (same run): ``--max-message-bytes 16777216`` (uvicorn's default ``ws_max_size``,
  what the gateway had before), with fewer sockets (``--baseline-sockets``) to spare the machine.

Prints per run the RSS at the start, the sampled peak and after, and the medians of the growth
per socket with the ratio baseline / limit::

    python bench/edge.py [--sockets 30] [--baseline-sockets 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import start_redis_server, stop_redis_server  # noqa: E402
from tests.gateway_support import SECRET, Stack  # noqa: E402
from tests.test_edge import measure_flood  # noqa: E402


def one(stack: Stack, name: str, max_bytes: int, sockets: int) -> dict[str, float]:
    g = stack.start_gateway(name, "--max-message-bytes", str(max_bytes),
                            "--max-unauthenticated-per-address", str(sockets + 10))
    try:
        return measure_flood(g.url, g.proc.pid, sockets=sockets)
    finally:
        from tests.processes import stop_group

        stop_group(g.proc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sockets", type=int, default=30)
    ap.add_argument("--baseline-sockets", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    proc, url, workdir = start_redis_server()
    tmp = Path(tempfile.mkdtemp(prefix="sk-bench-edge-"))
    base = url.rsplit("/", 1)[0]
    stack = Stack(base + "/0", base + "/1", tmp, [])
    stack.secret_file = tmp / "secret"
    stack.secret_file.write_bytes(SECRET)
    per_socket: dict[str, list[float]] = {"limit": [], "baseline": []}
    try:
        for run in range(args.runs):
            for label, max_bytes, n in (("limit", 16 * 1024, args.sockets),
                                        ("baseline", 16 * 1024 * 1024, args.baseline_sockets)):
                f = one(stack, f"{label}-{run}", max_bytes, n)
                growth = f["peak_mb"] - f["start_mb"]
                per_socket[label].append(growth / n)
                print(f"run {run + 1} {label:8s}: {n} sockets x 16 MB frames: RSS start {f['start_mb']:.1f} MB, "
                      f"peak {f['peak_mb']:.1f} MB (+{growth:.1f}), after {f['after_mb']:.1f} MB "
                      f"(+{f['after_mb'] - f['start_mb']:.1f}); closes {f['codes']}", flush=True)
    finally:
        stack.stop()
        stop_redis_server(proc, workdir)
    lim, bl = statistics.median(per_socket["limit"]), statistics.median(per_socket["baseline"])
    print(f"\nmedian peak growth per socket over {args.runs} runs: limit {lim:.2f} MB, baseline {bl:.2f} MB"
          f" -> baseline / limit = {bl / max(lim, 0.01):.0f}x (limit floored at 0.01 MB); "
          f"{args.sockets} sockets under the limit: +{lim * args.sockets:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
