"""Private tables in the browser (issue 39 §7): a real headless Chromium (Debian's
``/usr/bin/chromium`` via Playwright) against a real ``shuangkou gateway --dev``, ``shuangkou
serve`` and a real redis-server.

Alice (a zh-TW page) opens a 4-hand table from the lobby and gets its code and link; Bob (an
en-US page) opens the link ``/t/<code>``, signs in and is seated at once; both see the series'
tally.  Alice asks to end; Bob's page shows the vote dialog with its countdown and he agrees; both
pages show the final standings (dissolved).  No page logs an error.  Screenshots (the code; the
vote dialog; the standings) at 1280×800, 375×812 and 812×375 go to ``artifacts/screenshots/``
(``private-*.png``)."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import pytest

from tests.processes import tail, wait_for
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, SHOTS, Console

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.redis, pytest.mark.worker]


@pytest.fixture
def stack(redis_server, tmp_path, deployment):
    from tests.gateway_support import start_stack

    if not Path(CHROMIUM).exists():
        msg = "the browser tests need Debian's chromium at /usr/bin/chromium (.ci/run installs it)"
        if os.environ.get("SK_ALLOW_NO_BROWSER") == "1":
            pytest.skip(msg)
        pytest.fail(msg, pytrace=False)
    s = start_stack(redis_server.db_url(2), redis_server.db_url(3), tmp_path,
                    {"friends": {"turn_seconds": 120, "ready_seconds": 120}}, deployment)
    try:
        gw = s.start_gateway("privbrowser", "--dev")

        def up() -> bool:
            for p in s.procs:
                assert p.poll() is None, "a process exited:\n" + "\n".join(tail(x) for x in s.logs)
            try:
                return urllib.request.urlopen(gw.http + "/healthz", timeout=2).status == 200
            except OSError:
                return False

        wait_for(up, 60, "the gateway never answered /healthz", s.logs)
        yield {"base": gw.http}
    finally:
        s.stop()


def test_two_friends_open_a_table_by_link_and_end_the_series_by_vote(stack) -> None:
    from playwright.sync_api import sync_playwright

    base = stack["base"]
    console = Console()
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            a_ctx = browser.new_context(viewport={"width": 1280, "height": 800}, locale="zh-TW")
            b_ctx = browser.new_context(viewport={"width": 375, "height": 812}, locale="en-US")
            a, b = a_ctx.new_page(), b_ctx.new_page()
            console.watch(a, "alice")
            console.watch(b, "bob")
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
            b.screenshot(path=str(SHOTS / "private-vote-375x812.png"))
            b.click("[data-action=vote-agree]")
            for page in (a, b):
                page.wait_for_selector("[data-standings]:not([hidden])", timeout=60_000)
                assert page.get_attribute("[data-standings]", "data-reason") == "dissolved"
                assert page.locator("[data-standings-row]").count() == 2
                assert page.is_hidden("[data-vote-dialog]") and page.is_hidden("[data-series-tally]")
            assert "agreement" in b.text_content("[data-standings]")
            assert "大結算" in a.text_content("[data-standings]")
            for page, (w, h) in ((a, (1280, 800)), (b, (375, 812)), (b, (812, 375))):
                page.set_viewport_size({"width": w, "height": h})
                page.screenshot(path=str(SHOTS / f"private-standings-{w}x{h}.png"))
        finally:
            browser.close()
    assert console.errors == []
