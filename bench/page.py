"""What an update costs the table page: the browser's style and layout work per update.

    python bench/page.py [--baseline REF] [--updates 40] [--runs 5] [--cpu-throttle 4] [--json]

Debian's Chromium under Playwright opens the table page (gateway/static) at a desktop
(1280×900) and a phone (390×844) viewport, its socket replaced by one that feeds it a real
engine match (as the browser tests do: tests/test_table_browser.py). After the deal, each of
``--updates`` moves is fed as one message, and the page is given a frame to paint it before
the next. Chromium's own counters (CDP ``Performance.getMetrics``) over those updates give,
per update:

* ``layouts`` and ``style_recalcs``: how many times the page's layout and style were
  computed (the frame's own, and every one a script forced by reading geometry after a change);
* ``layout_ms`` and ``style_ms``: the time they took;
* ``task_ms``: the main thread's busy time (scripts, style, layout, paint).

``--baseline REF`` measures the page of a git commit too (its ``gateway/static``, served the
same way), in turn with this checkout's, run by run; ``ratio`` is the baseline's
``layout_ms + style_ms`` over this code's (each run's own, median). ``--cpu-throttle N`` slows
the page's CPU N times (Chromium's ``Emulation.setCPUThrottlingRate``), as a mid-range phone.
Printed: the medians and their spread per viewport. It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_fair_browser import CHROMIUM  # noqa: E402
from tests.test_table_browser import Match, _open, _seat, _Site  # noqa: E402

VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
COUNTERS = {"layouts": "LayoutCount", "style_recalcs": "RecalcStyleCount", "layout_ms": "LayoutDuration",
            "style_ms": "RecalcStyleDuration", "task_ms": "TaskDuration"}


@contextmanager
def site(static: Path) -> Iterator[str]:
    """``static`` served as the gateway serves gateway/static, with the page's JSON endpoints."""

    class Handler(_Site):
        def translate_path(self, path: str) -> str:
            path = path.split("?", 1)[0]
            if path == "/":
                return str(static / "index.html")
            if path.startswith("/static/"):
                return str(static / path[len("/static/"):])
            return str(static / "missing")

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(static)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def static_of(ref: str, into: Path) -> Path:
    """``gateway/static`` as commit ``ref`` has it, written under ``into``."""
    got = subprocess.run(["git", "archive", ref, "gateway/static"], cwd=ROOT, capture_output=True)
    if got.returncode != 0:
        raise SystemExit(f"bench/page.py: --baseline {ref}: {got.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=got.stdout, check=True)
    return into / "gateway" / "static"


def one_run(browser: Any, url: str, viewport: dict[str, int], updates: int, throttle: float) -> dict[str, float]:
    """The page's counters per update over ``updates`` moves of one match."""
    context, page, errors = _open(browser, url, viewport=viewport)
    try:
        m = Match()
        _seat(page, m)
        moves = m.step(updates)
        cdp = context.new_cdp_session(page)
        cdp.send("Performance.enable")
        if throttle > 1:
            cdp.send("Emulation.setCPUThrottlingRate", {"rate": throttle})
        frame = "() => new Promise(r => requestAnimationFrame(() => setTimeout(() => r(1), 0)))"
        page.evaluate(frame)

        def counters() -> dict[str, float]:
            return {x["name"]: x["value"] for x in cdp.send("Performance.getMetrics")["metrics"]}

        before = counters()
        for msg in moves:
            page.evaluate("(m) => window.__feed(m)", msg)
            page.evaluate(frame)
        after = counters()
        if errors:
            raise RuntimeError(f"the page failed: {errors[:3]}")
        n = len(moves)
        out = {k: (after[c] - before[c]) / n * (1000 if k.endswith("_ms") else 1) for k, c in COUNTERS.items()}
        out["updates"] = n
        return out
    finally:
        context.close()


def summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    keys = [k for k in COUNTERS]
    return {"median": {k: round(statistics.median(r[k] for r in runs), 2) for k in keys},
            "spread": {k: [round(min(r[k] for r in runs), 2), round(max(r[k] for r in runs), 2)] for k in keys},
            "updates": runs[0]["updates"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", help="a git commit whose page is measured in turn with this one")
    ap.add_argument("--updates", type=int, default=40, help="moves fed after the deal (default 40)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cpu-throttle", type=float, default=1.0, help="slow the page's CPU N times (default 1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        codes = {"head": ROOT / "gateway" / "static"}
        if args.baseline:
            codes["baseline"] = static_of(args.baseline, Path(tmp))
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        results: dict[str, dict[str, list[dict[str, float]]]] = {c: {v: [] for v in VIEWPORTS} for c in codes}
        with site(codes["head"]) as head_url, site(codes.get("baseline", codes["head"])) as base_url:
            urls = {"head": head_url, "baseline": base_url}
            for i in range(args.runs):
                order = list(codes) if i % 2 == 0 else list(reversed(codes))
                for code in order:
                    for vname, vp in VIEWPORTS.items():
                        results[code][vname].append(one_run(browser, urls[code], vp, args.updates, args.cpu_throttle))
        browser.close()
    report: dict[str, Any] = {"runs": args.runs, "cpu_throttle": args.cpu_throttle, "baseline": args.baseline,
                              **{code: {v: summary(rs) for v, rs in per.items()} for code, per in results.items()}}
    if args.baseline:
        def forced(r: dict[str, float]) -> float:
            return r["layout_ms"] + r["style_ms"]

        report["ratio"] = {v: round(statistics.median(forced(b) / forced(h) for b, h in
                                                      zip(results["baseline"][v], results["head"][v])), 2)
                           for v in VIEWPORTS}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for code in codes:
            for v in VIEWPORTS:
                med = report[code][v]["median"]
                print(f"{code:8s} {v:7s} " + "  ".join(f"{k} {med[k]}" for k in COUNTERS))
        if args.baseline:
            print("ratio (baseline ÷ head, layout + style ms):", report["ratio"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
