"""Quick phrases in the browser (issue 39 item 5): a real headless Chromium (Debian's
``/usr/bin/chromium`` driven by Playwright) against a real ``shuangkou gateway --dev``,
``shuangkou serve`` and a real redis-server.

Two people (a zh-TW page and an en-US page) are paired at a table and dealt; a third page
watches it.
Alice opens the picker near her hand and says 好牌!: Bob's page shows "Nice cards!" at Alice's
seat, the spectator's page too, and her own page at her own seat.  Bob mutes Alice (the toggle
at her seat): her next phrase reaches his socket but shows nothing, while his own still shows;
the toggle is remembered across a reload.  Every frame validates against the schemas and no
page logs an error.  Screenshots (the picker open; a phrase at the opponent's seat) at 375×812,
812×375 and 1280×800 go to ``artifacts/screenshots/`` (``say-picker-<w>x<h>.png``,
``say-bubble-<w>x<h>.png``)."""

from __future__ import annotations

import pytest


from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, SHOTS, Console, browser_stack
from tests.test_table_browser import SIZES

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.redis, pytest.mark.worker]


@pytest.fixture
def stack(redis_server, tmp_path, deployment):
    """serve (+ a dramatiq worker, or alone) + ``gateway --dev`` (no bots: the two pages are
    paired with each other) on a real redis-server; a room whose turn clock (120 s) outlasts
    the test, so the match is still running at its end."""
    with browser_stack(redis_server, tmp_path, deployment, {"chat": {"turn_seconds": 120, "ready_seconds": 120}}, "saybrowser", "--dev") as (_s, gw):
        yield {"base": gw.http}


#: nothing wider than the screen (the hand is laid out again a moment after a resize)
NO_OVERFLOW = "() => document.documentElement.scrollWidth <= window.innerWidth"


def _bubble(player: str, phrase: str, seat: str = ".seat") -> str:
    """The phrase's bubble at ``player``'s seat (``seat``: which one, #opp or #mine, when it matters)."""
    return f"{seat}[data-player='{player}'] [data-say][data-say-player='{player}'][data-phrase='{phrase}']"


def _say(page, phrase: str) -> None:
    """Open the picker once its rest after the last Say is over, and pick ``phrase``."""
    page.wait_for_selector("[data-say-picker][data-cooling=false]", state="attached", timeout=30_000)
    page.click("[data-action=say]")
    page.wait_for_selector("[data-say-picker]:not([hidden])")
    page.click(f"[data-say-picker] [data-phrase='{phrase}']")


def test_a_phrase_shows_at_the_senders_seat_and_a_muted_opponent_shows_none(stack) -> None:
    from playwright.sync_api import sync_playwright

    base = stack["base"]
    console = Console()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            a_ctx = browser.new_context(viewport={"width": 1280, "height": 800}, locale="zh-TW")
            b_ctx = browser.new_context(viewport={"width": 375, "height": 812}, locale="en-US")
            a, b = a_ctx.new_page(), b_ctx.new_page()
            console.watch(a, "alice")
            console.watch(b, "bob")
            for page, name in ((a, "Alice"), (b, "Bob")):
                page.goto(base + "/")
                page.fill("#login-name", name)
                page.click("[data-action=login]")
                page.wait_for_selector("#lobby:not([hidden]) input[name=room][value=chat]")
                page.check("input[name=room][value=chat]")
            a.click("[data-action=join]")
            b.click("[data-action=join]")  # at once: two waiting players are paired before any bot
            for page in (a, b):
                page.wait_for_selector("#match:not([hidden]) [data-action=say]:not([hidden])", timeout=60_000)
                page.click("[data-action=ready]")
            for page in (a, b):  # the cards are dealt: the phrases are said over a hand in play
                page.wait_for_selector("#hand [data-card]", timeout=60_000)
            alice = a.get_attribute("#mine", "data-player")
            bob = b.get_attribute("#mine", "data-player")
            assert alice and bob and b.get_attribute("#opp", "data-player") == alice
            match = a.get_attribute("#table", "data-match")

            s_ctx = browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
            spec = s_ctx.new_page()
            console.watch(spec, "fan")
            spec.goto(f"{base}/watch/{match}")
            spec.fill("#login-name", "Fan")
            spec.click("[data-action=login]")
            spec.wait_for_selector(f"#match:not([hidden]) .seat[data-player='{alice}']", timeout=60_000)
            assert spec.is_hidden("[data-action=say]")  # a spectator may not Say

            # the picker near the hand: every phrase in the page's language, the emotes
            a.click("[data-action=say]")
            a.wait_for_selector("[data-say-picker]:not([hidden])")
            assert a.get_attribute("[data-action=say]", "aria-expanded") == "true"
            assert a.text_content("[data-say-picker] [data-phrase=hurry_up]") == "快點吧！"
            assert len(a.query_selector_all("[data-say-picker] [data-phrase]")) == 14
            SHOTS.mkdir(parents=True, exist_ok=True)
            for width, height in SIZES:
                a.set_viewport_size({"width": width, "height": height})
                a.wait_for_selector("[data-say-picker]:not([hidden])")
                a.wait_for_function(NO_OVERFLOW, timeout=15_000)  # once the hand is laid out again
                box = a.eval_on_selector("[data-say-picker]", "e => { const r = e.getBoundingClientRect(); "
                                         "return [r.left, r.right, r.top]; }")
                assert box[0] >= -1 and box[1] <= width + 1 and box[2] >= -1, (width, height, box)
                a.screenshot(path=str(SHOTS / f"say-picker-{width}x{height}.png"), animations="disabled")
            a.set_viewport_size({"width": 1280, "height": 800})
            a.click("[data-say-picker] [data-phrase=nice_cards]")

            # the opponent, the spectator and the sender see it at the sender's seat
            b.wait_for_selector(_bubble(alice, "nice_cards", "#opp"), timeout=30_000)
            assert b.text_content(_bubble(alice, "nice_cards")) == "Nice cards!"
            spec.wait_for_selector(_bubble(alice, "nice_cards"), timeout=30_000)
            assert a.text_content(_bubble(alice, "nice_cards", "#mine")) == "好牌！"
            assert a.is_hidden("[data-say-picker]")
            # it is gone after its 3 s
            b.wait_for_selector(_bubble(alice, "nice_cards"), state="detached", timeout=30_000)

            # a phrase at the opponent's seat at each size
            for width, height in SIZES:
                b.set_viewport_size({"width": width, "height": height})
                b.wait_for_function(NO_OVERFLOW, timeout=15_000)
                _say(a, "emote_cool")
                b.wait_for_selector(_bubble(alice, "emote_cool"), timeout=30_000)
                b.screenshot(path=str(SHOTS / f"say-bubble-{width}x{height}.png"), animations="disabled")
                b.wait_for_selector(_bubble(alice, "emote_cool"), state="detached", timeout=30_000)

            # Bob mutes Alice: her next phrase reaches his page and shows nothing; his own shows
            assert b.get_attribute("[data-action=mute-say]", "aria-pressed") == "false"
            b.click("[data-action=mute-say]")
            assert b.get_attribute("[data-action=mute-say]", "aria-pressed") == "true"
            _say(a, "thanks")
            a.wait_for_selector(_bubble(alice, "thanks", "#mine"), timeout=30_000)  # the engine took it
            spec.wait_for_selector(_bubble(alice, "thanks"), timeout=30_000)
            _say(b, "sorry")  # after Alice's in Bob's stream: once it shows, hers was handled
            b.wait_for_selector(_bubble(bob, "sorry", "#mine"), timeout=30_000)
            assert b.query_selector("[data-say][data-phrase=thanks]") is None
            b.reload()
            b.wait_for_selector("#match:not([hidden]) [data-action=mute-say]:not([hidden])", timeout=60_000)
            assert b.get_attribute("[data-action=mute-say]", "aria-pressed") == "true"
            b.click("[data-action=mute-say]")  # unmuted: Alice's phrases show again
            _say(a, "well_played")
            b.wait_for_selector(_bubble(alice, "well_played"), timeout=30_000)
            for ctx in (a_ctx, b_ctx, s_ctx):
                ctx.close()
        finally:
            browser.close()
    assert console.errors == []
