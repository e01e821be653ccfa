"""The browser's side of provably fair deals (gateway/static/js/fair.js, docs/FAIRNESS.md),
in a real headless Chromium (``/usr/bin/chromium`` driven by Playwright):

* fair.js (WebCrypto) gives the same commitment and deal as the engine on every case
  of tests/vectors/fair_deal.json;
* the table page (gateway/static/index.html + table.js) shows the commitment during
  play, sends a random ``client_seed`` with Ready, and after the finish its "verify
  this deal" panel ([data-action=verify], the answer in [data-fair]) recomputes the deal in the page: ``ok`` for the engine's real match,
  ``mismatch`` when one byte of the revealed seed is changed.  The page's socket is
  replaced by one that feeds it the engine's own per-player messages (the events
  redacted as the service publishes them and the player's view), so the test needs
  no gateway process.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine.config import load_config
from engine.match.commands import CreateMatch, Escape, Ready, Sit
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random
from engine.store.memory import InMemoryEventStore
from projections.views import redact_event, view_for

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "gateway" / "static"
VECTORS = json.loads((ROOT / "tests" / "vectors" / "fair_deal.json").read_text(encoding="utf-8"))
CHROMIUM = "/usr/bin/chromium"


class _Static(SimpleHTTPRequestHandler):
    """``/`` is the table page, ``/static/…`` the client's files (as the gateway serves them)."""

    def translate_path(self, path: str) -> str:
        path = path.split("?", 1)[0]
        if path == "/" or path.startswith("/?"):
            return str(STATIC / "index.html")
        if path.startswith("/static/"):
            return str(STATIC / path[len("/static/"):])
        return str(STATIC / "missing")

    def log_message(self, *args) -> None:
        pass


def serve_static(handler: type[SimpleHTTPRequestHandler]) -> Iterator[str]:
    """``gateway/static`` served by ``handler`` on a loopback port, for a module's ``site`` fixture."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(STATIC)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def site():
    yield from serve_static(_Static)


def chromium() -> Iterator[Any]:
    """Debian's Chromium under Playwright, for a module's ``browser`` fixture."""
    pw_sync = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is not installed")
    with pw_sync.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def browser():
    yield from chromium()


def test_fair_js_matches_the_vectors(site, browser):
    page = browser.new_page()
    page.goto(site + "/static/css/table.css")  # same origin (a secure context: loopback)
    results = page.evaluate("""async (cases) => {
        const f = await import("/static/js/fair.js");
        const out = [];
        for (const c of cases) {
            const d = await f.fairDeal(c.server_seed, c.client_seeds, c.match_id);
            out.push({commitment: await f.commitmentOf(c.server_seed, c.match_id), deck: d.deck,
                      lead_index: d.leadIndex, lead_card: d.leadCard, first: d.first, hands: d.hands,
                      words_used: d.wordsUsed});
        }
        return out;
    }""", VECTORS["cases"])
    for case, got in zip(VECTORS["cases"], results, strict=True):
        for key in ("commitment", "deck", "lead_index", "lead_card", "first", "hands", "words_used"):
            assert got[key] == case[key], (case["match_id"], key)
    page.close()


# ---- the table page ---------------------------------------------------------------------------

FAKE_SOCKET = """
window.__sent = [];
class FakeSocket {
  constructor(url) { this.readyState = 0; this.l = {}; window.__ws = this;
                     setTimeout(() => { this.readyState = 1; this._emit("open", {}); }, 0); }
  addEventListener(type, fn) { (this.l[type] = this.l[type] || []).push(fn); }
  send(data) { window.__sent.push(JSON.parse(data)); }
  close() {}
  _emit(type, ev) { for (const fn of this.l[type] || []) fn(ev); }
}
FakeSocket.OPEN = 1;
window.WebSocket = FakeSocket;
window.__feed = (msg) => window.__ws._emit("message", { data: JSON.stringify(msg) });
"""


def _token(player: str) -> str:
    claims = base64.urlsafe_b64encode(json.dumps({"sub": player, "role": "player"}).encode()).decode().rstrip("=")
    return f"e30.{claims}.sig"


class Match:
    """A real match in the engine; ``messages(out)`` is what alice's socket would receive."""

    def __init__(self) -> None:
        self.svc = MatchService(InMemoryEventStore(), lambda: 1_800_000_000_000, seeded_random(1))
        self.mid = "fair-page-1"

    def run(self, cmd) -> list[dict]:
        out = self.svc.execute(cmd)
        assert out.rejection is None, out.rejection
        return [{"kind": "update", "match": self.mid, "version": out.state.version,
                 "events": [json.loads(json.dumps(redact_event(e, "alice", state=out.state))) for e in out.events],
                 "view": json.loads(json.dumps(view_for(out.state, "alice")))}]


def _feed(page, messages) -> None:
    for m in messages:
        page.evaluate("(m) => window.__feed(m)", m)


def _play_to_the_finish(browser, site, tamper: bool):
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page.add_init_script(FAKE_SOCKET)
    page.goto(f"{site}/?token={_token('alice')}")
    page.wait_for_function("() => !!window.__ws && window.__ws.readyState === 1")
    m = Match()
    cfg = load_config("points").to_record()
    _feed(page, [{"kind": "welcome", "player": "alice", "role": "player"}])
    msgs = m.run(CreateMatch(command_id="c1", match_id=m.mid, config=cfg))
    msgs = m.run(Sit(command_id="c2", match_id=m.mid, player="alice"))
    msgs += m.run(Sit(command_id="c3", match_id=m.mid, player="bob"))
    _feed(page, [{"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m.mid}] + msgs)
    commitment = m.svc.store.load(m.mid)[0].commitment
    page.wait_for_selector("#fair:not([hidden])")
    assert page.text_content("[data-commitment]") == commitment  # shown before any card is dealt
    assert page.is_hidden("[data-verify]")
    page.click("[data-action=ready]")
    [ready] = [s for s in page.evaluate("() => window.__sent") if s.get("type") == "Ready"]
    seed = ready["client_seed"]
    assert len(seed) == 32 and all(ch in "0123456789abcdef" for ch in seed)  # random, from the page
    msgs = m.run(Ready(command_id=ready["command_id"], match_id=m.mid, player="alice", client_seed=seed))
    msgs += m.run(Ready(command_id="c5", match_id=m.mid, player="bob"))
    _feed(page, msgs)
    page.wait_for_selector("[data-card]")
    assert page.text_content("[data-commitment]") == commitment
    assert page.is_hidden("[data-verify]")  # nothing to verify before the reveal
    finish = m.run(Escape(command_id="c6", match_id=m.mid, player="bob"))
    if tamper:
        fair = finish[0]["view"]["fair"]
        fair["server_seed"] = ("0" if fair["server_seed"][0] != "0" else "1") + fair["server_seed"][1:]
    _feed(page, finish)
    page.wait_for_selector("[data-verify]:not([hidden])")
    page.click("[data-action=verify]")
    page.wait_for_selector("[data-verify-result][data-verify-result='ok'], "
                           "[data-verify-result][data-verify-result='mismatch']")
    result = page.get_attribute("[data-verify-result]", "data-verify-result")
    fair = page.get_attribute("[data-verify-result]", "data-fair")  # issue 25's name for the same answer
    assert fair == {"ok": "verified", "mismatch": "failed"}[result]
    # each check's words come from the page's catalogue; data-check names it (fair.js check keys)
    checks = page.eval_on_selector_all("[data-verify-checks] li", "els => els.map(e => `${e.dataset.check} ${e.textContent}`)")
    # each check carries its own ✔ / ✘: no list bullet before it as well
    assert page.eval_on_selector("[data-verify-checks] li", "e => getComputedStyle(e).listStyleType") == "none"
    page.close()
    # the page's own JSON API (/api/readings, /api/hint) belongs to the gateway process, not served here
    api = [u for u in missing if "/api/" in u]
    assert missing == api, missing
    return result, checks, [e for e in errors if not (api and "404" in e)]


def test_the_table_shows_the_commitment_and_verifies_the_deal(site, browser):
    result, checks, errors = _play_to_the_finish(browser, site, tamper=False)
    assert result == "ok", checks
    assert any(c.startswith("myCards ") for c in checks) and any(c.startswith("mySeed ") for c in checks)
    assert all(c.split(" ", 1)[1].startswith("✔") for c in checks)
    assert not errors, errors


def test_the_page_catches_a_changed_seed(site, browser):
    result, checks, errors = _play_to_the_finish(browser, site, tamper=True)
    assert result == "mismatch"
    assert any(c.startswith("commitmentBad ✘") for c in checks), checks
    assert not errors, errors
