"""Private tables in the browser (issue 39 §7): a real headless Chromium (Debian's
``/usr/bin/chromium`` via Playwright) against a real ``shuangkou gateway --dev``, ``shuangkou
serve`` and a real redis-server.

Alice (a zh-TW page) opens a 4-hand table from the lobby and gets its code and link; Bob (an
en-US page) opens the link ``/t/<code>``, signs in and is seated at once; both see the series'
tally.  Alice asks to end; Bob's page shows the vote dialog with its countdown and he agrees; both
pages show the final standings (dissolved).  No page logs an error.  A screenshot of the code
(``private-code-1280x800.png``) goes to ``artifacts/screenshots/``.

A second test plays two hands of a 4-hand series through the link (both players ask for the
trustee, whose choice plays each hand to its settlement), then Bob asks to end and Alice agrees:
both see the standings (dissolved, 2 hands) whose totals are the tally's and the hands' sums.
Screenshots of the create, join, tally, vote and standings screens at 375×812, 812×375 and
1280×800 (``private-<screen>-<w>x<h>.png``, in the first deployment)."""

from __future__ import annotations

import json

import pytest

from tests.gateway_support import DEPLOYMENTS
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, SHOTS, Console, browser_stack

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.redis, pytest.mark.worker]


@pytest.fixture
def stack(redis_server, tmp_path, deployment):
    with browser_stack(redis_server, tmp_path, deployment, {"friends": {"turn_seconds": 120, "ready_seconds": 120, "trustee_delay_seconds": 0.1}}, "privbrowser", "--dev") as (_s, gw):
        yield {"base": gw.http}


def _alice_and_bob(browser, console: Console, bob_viewport: dict[str, int]):
    """Alice's zh-TW page at 1280×800 and Bob's en-US page at ``bob_viewport``, both watched."""
    a = browser.new_context(viewport={"width": 1280, "height": 800}, locale="zh-TW").new_page()
    b = browser.new_context(viewport=bob_viewport, locale="en-US").new_page()
    console.watch(a, "alice")
    console.watch(b, "bob")
    return a, b


def test_two_friends_open_a_table_by_link_and_end_the_series_by_vote(stack) -> None:
    from playwright.sync_api import sync_playwright

    base = stack["base"]
    console = Console()
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            a, b = _alice_and_bob(browser, console, {"width": 375, "height": 812})
            a.goto(base + "/")
            a.fill("#login-name", "Alice")
            a.click("[data-action=login]")
            a.wait_for_selector("#lobby:not([hidden]) input[name=room][value=friends]")
            a.check("input[name=room][value=friends]")
            a.select_option("[data-private-hands]", "4")
            a.click("[data-action=create-table]")
            a.wait_for_selector("[data-private-created]:not([hidden])", timeout=60_000)
            code = a.text_content("[data-private-code]").strip()
            link = a.text_content("[data-private-link]").strip()
            assert len(code) == 6 and link.endswith(f"/t/{code}")
            assert "房間號" in a.text_content("[data-private-created]") or "連結" in a.text_content("[data-private-created]")
            a.screenshot(path=str(SHOTS / "private-code-1280x800.png"))

            b.goto(f"{base}/t/{code}")  # the shared link: joins right after sign-in
            b.fill("#login-name", "Bob")
            b.click("[data-action=login]")
            for page in (a, b):
                page.wait_for_selector("#match:not([hidden])", timeout=60_000)
                page.wait_for_selector("[data-series-tally]:not([hidden])", timeout=60_000)
                assert page.get_attribute("[data-series-tally]", "data-hands") == "4"
            assert a.is_hidden("[data-private-created]")

            a.click("[data-action=request-end]")
            b.wait_for_selector("[data-vote-dialog]:not([hidden]) [data-action=vote-agree]:not([hidden])",
                                timeout=60_000)
            assert "end" in b.text_content("[data-vote-dialog]").lower()
            assert b.text_content("[data-vote-countdown]").strip()
            a.wait_for_selector("[data-vote-dialog]:not([hidden])")
            assert a.is_hidden("[data-action=vote-agree]")  # the asker waits for the answer
            b.click("[data-action=vote-agree]")
            for page in (a, b):
                page.wait_for_selector("[data-standings]:not([hidden])", timeout=60_000)
                assert page.get_attribute("[data-standings]", "data-reason") == "dissolved"
                assert page.locator("[data-standings-row]").count() == 2
                assert page.is_hidden("[data-vote-dialog]") and page.is_hidden("[data-series-tally]")
            assert "agreement" in b.text_content("[data-standings]")
            assert "大結算" in a.text_content("[data-standings]")
        finally:
            browser.close()
    assert console.errors == []


#: the screenshot sizes of the table (issue 36): a phone in portrait, in landscape, a desktop
SIZES = ((375, 812), (812, 375), (1280, 800))


def _shots(page, name: str, on: bool) -> None:
    """``private-<name>-<w>x<h>.png`` at each of SIZES (when ``on``); the page is left at 1280×800."""
    if on:
        for w, h in SIZES:
            page.set_viewport_size({"width": w, "height": h})
            page.wait_for_timeout(150)  # one layout pass at the new size before the picture
            page.screenshot(path=str(SHOTS / f"private-{name}-{w}x{h}.png"))
    page.set_viewport_size({"width": 1280, "height": 800})


def _frames(page, into: list[dict]) -> None:
    """Every JSON message of kind ``settled`` or ``series`` the page receives, in order."""
    def keep(frame: str | bytes) -> None:
        try:
            msg = json.loads(frame)
        except ValueError:
            return
        if isinstance(msg, dict) and msg.get("kind") in ("settled", "series"):
            into.append(msg)
    page.on("websocket", lambda ws: ws.on("framereceived", keep))


def _signed(v: int) -> str:
    return f"+{v}" if v > 0 else str(v)


def test_two_friends_play_two_hands_by_link_then_end_the_series_by_vote(stack, deployment) -> None:
    from playwright.sync_api import sync_playwright

    base = stack["base"]
    shoot = deployment == DEPLOYMENTS[0]
    console = Console()
    SHOTS.mkdir(parents=True, exist_ok=True)
    seen: dict[str, list[dict]] = {"a": [], "b": []}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            a, b = _alice_and_bob(browser, console, {"width": 1280, "height": 800})
            _frames(a, seen["a"])
            _frames(b, seen["b"])

            # -- Alice opens a 4-hand table -------------------------------------------------------
            a.goto(base + "/")
            a.fill("#login-name", "Alice")
            a.click("[data-action=login]")
            a.wait_for_selector("#lobby:not([hidden]) input[name=room][value=friends]")
            a.check("input[name=room][value=friends]")
            a.select_option("[data-private-hands]", "4")
            _shots(a, "create", shoot)
            a.click("[data-action=create-table]")
            a.wait_for_selector("[data-private-created]:not([hidden])", timeout=60_000)
            code = a.text_content("[data-private-code]").strip()
            assert a.text_content("[data-private-link]").strip().endswith(f"/t/{code}")

            # -- Bob opens the link, signs in and is seated ---------------------------------------
            b.goto(f"{base}/t/{code}")
            b.wait_for_selector("#login-name")
            _shots(b, "join", shoot)
            b.fill("#login-name", "Bob")
            b.click("[data-action=login]")
            for page in (a, b):
                page.wait_for_selector("#match:not([hidden])", timeout=60_000)
                page.wait_for_selector("[data-series-tally]:not([hidden])", timeout=60_000)
                assert page.get_attribute("[data-series-tally]", "data-hands") == "4"
                assert page.get_attribute("[data-series-tally]", "data-hand") == "0"

            # -- two hands, each played by the trustee to its settlement --------------------------
            for hand in (1, 2):
                for page in (a, b):
                    page.wait_for_selector("[data-action=ready]:visible", timeout=60_000)
                    page.click("[data-action=ready]")
                for page in (a, b):
                    page.wait_for_function(
                        "n => { const t = document.querySelector('#table');"
                        " return t.dataset.phase === 'playing' && (t.dataset.match || '').endsWith('-' + n); }",
                        arg=hand, timeout=60_000)
                    page.click("[data-action=trustee]")
                for page in (a, b):
                    page.wait_for_selector(f"[data-series-tally][data-hand='{hand}']", timeout=60_000)
                    page.wait_for_selector("[data-settlement]:visible", timeout=60_000)
                if hand == 1:
                    _shots(b, "tally", shoot)

            settled = [m for m in seen["a"] if m["kind"] == "settled"]
            assert [m["series"]["hand"] for m in settled] == [1, 2]
            totals = settled[-1]["series"]["totals"]
            assert len(totals) == 2
            assert totals == {p: sum(m["scores"][p] for m in settled) for p in totals}
            for page in (a, b):  # the tally shown is the series' running totals
                text = page.text_content("[data-tally-text]")
                assert all(_signed(v) in text for v in totals.values()), (text, totals)

            # -- Bob asks to end; Alice agrees in the vote dialog ---------------------------------
            b.click("[data-action=request-end]")
            a.wait_for_selector("[data-vote-dialog]:not([hidden]) [data-action=vote-agree]:not([hidden])",
                                timeout=60_000)
            assert a.text_content("[data-vote-countdown]").strip()
            b.wait_for_selector("[data-vote-dialog]:not([hidden])")
            assert b.is_hidden("[data-action=vote-agree]")
            _shots(a, "vote", shoot)
            a.click("[data-action=vote-agree]")
            for page in (a, b):
                page.wait_for_selector("[data-standings]:not([hidden])", timeout=60_000)
                assert page.get_attribute("[data-standings]", "data-reason") == "dissolved"
                rows = page.eval_on_selector_all(
                    "[data-standings-row]", "els => els.map(e => [e.dataset.player, e.dataset.total])")
                assert {p: int(v) for p, v in rows} == totals
                assert "2" in page.text_content("[data-standings-hands]")
            _shots(b, "standings", shoot)
        finally:
            browser.close()
    for who in ("a", "b"):
        finished = [m for m in seen[who] if m["kind"] == "series" and m.get("state") == "finished"]
        assert len(finished) == 1, seen[who]
        assert finished[0]["reason"] == "dissolved"
        standings = finished[0]["standings"]
        assert len(standings["per_hand"]) == 2 and standings["totals"] == totals
        assert {p: sum(h["scores"][p] for h in standings["per_hand"]) for p in totals} == totals
    assert console.errors == []
