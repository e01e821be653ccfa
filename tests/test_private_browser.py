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
1280×800 (``private-<screen>-<w>x<h>.png``, in the first deployment).

A third test plays one hand on two phones (375×812, a zh-CN owner and an en friend) and checks
what a play-test found: names and the hand in the tally, nothing covered by it, Ask to end
reachable, the code's panel in view, a malformed code refused in the page, English words and
plurals in the result and the standings, Verify's checks in view, a refused vote to end said in
each page's language in the tally, no repeated leave reason, and
the lobby after the final standings are closed (``private-phone-<what>-<lang>-375x812.png``)."""

from __future__ import annotations

import json
import re
import time

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


# -- a private table on two phones (the play-test of 2026-12-05) ----------------------------------

PHONE = {"width": 375, "height": 812}
CJK = "[\u3400-\u9fff]"

#: a box's [left, top, right, bottom] in the viewport, or None when it is not laid out
_BOX = """e => { if (!e) return null; const r = e.getBoundingClientRect();
  return r.width && r.height ? [r.left, r.top, r.right, r.bottom] : null; }"""

#: the part of an element a player sees: its box clipped by each scrolling or clipping ancestor
#: (a result sheet scrolled down to Verify's checks hides its heading under its top edge)
_SHOWN = """e => { if (!e) return null; const r = e.getBoundingClientRect();
  let [l, t, rt, b] = [r.left, r.top, r.right, r.bottom];
  for (let p = e.parentElement; p; p = p.parentElement) {
    if (getComputedStyle(p).overflow === "visible") continue;
    const c = p.getBoundingClientRect();
    l = Math.max(l, c.left); t = Math.max(t, c.top); rt = Math.min(rt, c.right); b = Math.min(b, c.bottom);
  }
  return rt > l && b > t ? [l, t, rt, b] : null; }"""

#: whether a click at the element's centre reaches it (nothing covers it) inside the viewport
_REACHABLE = """sel => { const e = document.querySelector(sel); if (!e) return `no ${sel}`;
  const r = e.getBoundingClientRect(); const x = r.left + r.width / 2, y = r.top + r.height / 2;
  if (!r.width || x < 0 || y < 0 || x > innerWidth || y > innerHeight) return `${sel} is not in view at ${x},${y}`;
  const hit = document.elementFromPoint(x, y); return !!hit && (hit === e || e.contains(hit))
    || `${sel} at ${x},${y} is under ${hit ? hit.outerHTML.slice(0, 120) : "nothing"}`; }"""


def _reachable(page, sel: str, seconds: float = 5.0) -> None:
    """A click at the centre of ``sel`` reaches it: it is in the viewport and nothing covers it
    (within ``seconds``: the page lays out what it has just rendered)."""
    end = time.monotonic() + seconds
    while (got := page.evaluate(_REACHABLE, sel)) is not True and time.monotonic() < end:
        page.wait_for_timeout(100)
    assert got is True, got


def _box(page, sel: str):
    return page.evaluate(f"() => ({_BOX})(document.querySelector({json.dumps(sel)}))")


def _boxes(page, sel: str) -> list:
    return [b for b in page.eval_on_selector_all(sel, f"els => els.map({_BOX})") if b]


def _overlap(a, b) -> bool:
    return a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5


def _tally_clear_of(page, sels: str) -> None:
    """The series tally and its button overlap no shown part of the elements ``sels`` (a selector
    list): what a scrolled sheet clips is not under the tally."""
    tally = _box(page, "[data-series-tally]")
    assert tally, "the tally is not shown"
    shown = [b for b in page.eval_on_selector_all(sels, f"els => els.map({_SHOWN})") if b]
    hits = [b for b in shown if _overlap(tally, b)]
    assert not hits, (tally, hits, page.text_content("[data-series-tally]"))


def _watch_notices(page) -> None:
    """Keep every notice's text in window.__notices (they are gone after 4.5 s)."""
    page.evaluate("""() => { window.__notices = [];
      new MutationObserver((ms) => { for (const m of ms) for (const n of m.addedNodes)
        if (n.textContent) window.__notices.push(n.textContent); })
        .observe(document.querySelector('#notices'), { childList: true }); }""")


def _in_lobby(page) -> bool:
    return page.evaluate("""() => { const v = (s) => { const e = document.querySelector(s);
        return !!e && !!(e.offsetWidth || e.offsetHeight); };
      return document.querySelector('#table').dataset.phase === 'lobby' && v('#lobby') && !v('#match')
        && document.querySelector('#sheet').hidden && v('[data-action=join]') && v('[data-action=create-table]')
        && v('[data-action=join-table]') && document.querySelector('[data-action=ready]').hidden; }""")


def test_a_private_table_on_two_phones_names_fits_and_ends_in_the_lobby(stack, deployment) -> None:
    """老王 (a zh-CN phone) opens a 4-hand table, Dave (an en phone) joins it by its code after a
    code too short; one hand played by the trustee, then Dave asks to end and 老王 plays on (both
    pages say so in the tally), Dave asks again, 老王 agrees, both close the standings.  At
    375×812: the code's panel is in view; the too-short code is refused in the page; the tally
    names the owner (never an id), shows the hand being played, covers no seat, badge or result
    heading, and Ask to end is reachable; the English result has no Chinese in its score details
    and says "1 card left" / "N cards left"; the checks of Verify are in view above Ready; the
    refused vote is said in each page's language; the standings say "1 hand played"; no leave
    notice repeats its reason; after Close both pages are in the lobby and stay there."""
    from playwright.sync_api import sync_playwright

    base = stack["base"]
    shoot = deployment == DEPLOYMENTS[0]
    console = Console()
    SHOTS.mkdir(parents=True, exist_ok=True)

    def shot(page, what: str, lang: str) -> None:
        if shoot:
            page.screenshot(path=str(SHOTS / f"private-phone-{what}-{lang}-375x812.png"))

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            a = browser.new_context(viewport=PHONE, locale="zh-CN").new_page()
            b = browser.new_context(viewport=PHONE, locale="en-US").new_page()
            console.watch(a, "owner")
            console.watch(b, "friend")

            # -- 老王 opens a table: the code's panel is in view ---------------------------------
            a.goto(base + "/")
            a.fill("#login-name", "老王")
            a.click("[data-action=login]")
            a.wait_for_selector("#lobby:not([hidden]) input[name=room][value=friends]")
            _watch_notices(a)
            a.check("input[name=room][value=friends]")
            a.select_option("[data-private-hands]", "4")
            a.click("[data-action=create-table]")
            a.wait_for_selector("[data-private-created]:not([hidden])", timeout=60_000)
            a.wait_for_function(f"() => ({_REACHABLE})('[data-private-code]') === true", timeout=5_000)
            code = a.text_content("[data-private-code]").strip()
            assert "牌桌已开好" in a.text_content("[data-status]")
            shot(a, "created", "zh")

            # -- Dave: a code too short is refused in the page, then the right one -----------------
            b.goto(base + "/")
            b.fill("#login-name", "Dave")
            b.click("[data-action=login]")
            b.wait_for_selector("#lobby:not([hidden]) [data-action=join-table]")
            _watch_notices(b)
            b.fill("[data-private-join-code]", "abc")
            b.click("[data-action=join-table]")
            b.wait_for_selector("[data-private-join-error]:visible")
            assert "6 letters or digits" in b.text_content("[data-private-join-error]")
            b.wait_for_timeout(300)
            assert b.get_attribute("[data-status]", "data-code") is None  # nothing was sent
            b.fill("[data-private-join-code]", code.lower())
            b.click("[data-action=join-table]")
            for page in (a, b):
                page.wait_for_selector("#match:not([hidden])", timeout=60_000)
                page.wait_for_selector("[data-series-tally]:not([hidden])", timeout=60_000)
            assert b.is_hidden("[data-private-join-error]")

            # -- seated: names in the tally, the hand to be played, nothing covered ---------------
            b.wait_for_function("() => document.querySelector('[data-tally-text]').textContent.includes('老王')",
                                timeout=15_000)
            a.wait_for_function("() => document.querySelector('[data-tally-text]').textContent.includes('Dave')",
                                timeout=15_000)
            for page in (a, b):
                assert "u-" not in page.text_content("[data-tally-text]")
                page.wait_for_function(
                    "() => !['', '—'].includes(document.querySelector('[data-opponent-name]').textContent.trim())")
            assert b.text_content("[data-tally-text]").startswith("Hand 1/4")
            assert a.text_content("[data-tally-text]").startswith("第1/4局")
            assert b.get_attribute("[data-series-tally]", "data-hand") == "0"
            seats = "[data-opponent-name], #opp-level, #opp-badges > *, #opp-avatar, #opp .backs, #opp .count"
            for page in (a, b):
                _tally_clear_of(page, seats)
                _reachable(page, "[data-action=request-end]")
                _reachable(page, "[data-opponent-name]")
            shot(a, "seated", "zh")
            shot(b, "seated", "en")

            # -- hand 1, played by the trustee to its settlement ----------------------------------
            for page in (a, b):
                page.wait_for_selector("[data-action=ready]:visible", timeout=60_000)
                page.click("[data-action=ready]")
            for page in (a, b):
                page.wait_for_function("() => document.querySelector('#table').dataset.phase === 'playing'",
                                       timeout=60_000)
            assert b.text_content("[data-tally-text]").startswith("Hand 1/4")
            for page in (a, b):
                _tally_clear_of(page, seats)
                _reachable(page, "[data-action=request-end]")
            shot(b, "dealt", "en")
            for page in (a, b):
                page.click("[data-action=trustee]")
            for page in (a, b):
                page.wait_for_selector("[data-series-tally][data-hand='1']", timeout=60_000)
                page.wait_for_selector("[data-settlement]:visible", timeout=60_000)
                page.wait_for_selector("[data-settlement] [data-xiang]", state="attached", timeout=30_000)
                _tally_clear_of(page, "[data-settlement] h2, [data-settlement] .verdict")
                _reachable(page, "[data-settlement] h2")
                _reachable(page, "[data-action=request-end]")
            assert b.text_content("[data-tally-text]").startswith("Hand 1/4")

            # the English result: no Chinese in the score details, proper plurals
            for cell in b.eval_on_selector_all("[data-settlement] [data-xiang]", "els => els.map(e => e.textContent)"):
                assert not re.search(CJK, cell), cell
            lefts = b.eval_on_selector_all("[data-settlement] .final-name", "els => els.map(e => e.textContent)")
            assert lefts and not any("(s)" in x for x in lefts), lefts
            for x in lefts:
                m = re.search(r"(\d+) cards? left", x)
                if m:
                    assert x.endswith(" card left" if m.group(1) == "1" else " cards left"), x
            shot(a, "settled", "zh")
            shot(b, "settled", "en")

            # Verify (when the deal was a fair one): its checks are in view, above Ready
            if a.is_visible("[data-action=verify]"):
                a.click("[data-action=verify]")
                a.wait_for_selector("[data-verify-checks] li", timeout=30_000)
                a.wait_for_timeout(200)
                last = _boxes(a, "[data-verify-checks] li")[-1]
                ready = _box(a, "[data-action=ready]")
                assert last[3] <= (ready[1] if ready else PHONE["height"]), (last, ready)
                _reachable(a, "[data-verify-checks] li:last-child")
                shot(a, "verified", "zh")

            # -- Dave asks to end, 老王 plays on: both read what came of it in the tally ------------
            b.click("[data-action=request-end]")
            a.wait_for_selector("[data-vote-dialog]:not([hidden]) [data-action=vote-refuse]:not([hidden])",
                                timeout=60_000)
            a.click("[data-action=vote-refuse]")
            for page in (a, b):
                page.wait_for_selector("[data-series-tally] [data-vote-result=refused]:visible", timeout=60_000)
                assert page.is_hidden("[data-vote-dialog]")
                _tally_clear_of(page, "[data-settlement] h2, [data-settlement] .verdict")
            assert a.text_content("[data-vote-result]") == "你选择继续打：解散申请未通过。"
            assert b.text_content("[data-vote-result]") == "老王 chose to play on: the vote to end was refused."
            shot(a, "vote-refused", "zh")
            shot(b, "vote-refused", "en")

            # -- Dave asks again (a real click on the phone), 老王 agrees --------------------------
            b.click("[data-action=request-end]")
            a.wait_for_selector("[data-vote-dialog]:not([hidden]) [data-action=vote-agree]:not([hidden])",
                                timeout=60_000)
            assert a.is_hidden("[data-vote-result]")  # a new vote: the old outcome is gone
            a.click("[data-action=vote-agree]")
            for page in (a, b):
                page.wait_for_selector("[data-standings]:not([hidden])", timeout=60_000)
                # the table is left: its result no longer asks to press Ready
                page.wait_for_function("() => document.querySelector('#table').dataset.phase !== 'seating'"
                                       " && !document.querySelector('[data-action=ready]').offsetWidth", timeout=30_000)
            assert b.text_content("[data-standings-hands]").strip() == "1 hand played"
            b.wait_for_function("() => !document.querySelector('[data-settlement]').textContent.includes('Press Ready')",
                                timeout=30_000)
            for page in (a, b):  # the table is left, the lobby is due: it waits for Close, not under the result
                page.wait_for_function("() => !document.querySelector('#lobby').hidden", timeout=30_000)
                assert page.evaluate("() => document.querySelector('#lobby').offsetHeight") == 0
            shot(a, "standings", "zh")
            shot(b, "standings", "en")

            # -- Close: both are back in the lobby, and stay there ---------------------------------
            for page in (a, b):
                page.click("[data-action=standings-close]")
            for page in (a, b):
                assert _wait_lobby(page), page.evaluate("() => document.querySelector('#table').dataset.phase")
            a.wait_for_timeout(3000)  # the updates that follow the series' end do not bring the table back
            for page in (a, b):
                assert _in_lobby(page), page.evaluate("() => document.querySelector('#table').dataset.phase")
            shot(a, "after-close", "zh")
            shot(b, "after-close", "en")

            # -- no leave notice said its reason twice --------------------------------------------
            for page, twice in ((a, "离开牌桌：离开"), (b, "left the table: left")):
                notes = page.evaluate("() => window.__notices")
                assert not [n for n in notes if twice in n], notes
        finally:
            browser.close()
    assert console.errors == []


def _wait_lobby(page, seconds: float = 15.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if _in_lobby(page):
            return True
        page.wait_for_timeout(200)
    return False


def test_the_owner_cancels_a_table_nobody_joined_even_after_a_reload(stack) -> None:
    """Found by a new user's play (2026-12-06): a table nobody joined held its owner for the
    room's ``private_join_seconds`` (600 s): the page had no way to send CancelTable, Join and
    opening another table were refused ``already_placed``, and after a reload the tally offered
    "Ask to end", which the series refuses before its first hand.  The code's panel now has
    ``[data-action=cancel-table]``; the owner is back in the lobby and can Join."""
    from playwright.sync_api import sync_playwright

    console = Console()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            a = browser.new_context(viewport={"width": 390, "height": 844}, locale="zh-CN").new_page()
            console.watch(a, "nora")
            a.goto(stack["base"] + "/")
            a.fill("#login-name", "Nora")
            a.click("[data-action=login]")
            a.wait_for_selector("#lobby:not([hidden]) input[name=room][value=friends]")
            a.check("input[name=room][value=friends]")
            a.click("[data-action=create-table]")
            a.wait_for_selector("[data-private-created]:not([hidden])", timeout=60_000)
            a.reload()  # a reconnect: the tally and the code again, and no "Ask to end" before a hand
            a.wait_for_selector("[data-private-created]:not([hidden])", timeout=60_000)
            assert a.is_hidden("[data-action=request-end]") and a.is_hidden("[data-series-tally]")  # as before it
            a.check("input[name=room][value=friends]")
            a.click("[data-action=join]")  # refused already_placed: the words name the way out
            a.wait_for_function("() => document.querySelector('[data-status]').textContent === "
                                "'你的好友房正在等待好友加入：请先取消开房。'", timeout=60_000)
            cancel = a.locator("[data-action=cancel-table]")
            assert cancel.inner_text() == "取消开房"
            cancel.click()
            a.wait_for_selector("[data-private-created]", state="hidden", timeout=60_000)
            assert _wait_lobby(a) and a.is_hidden("[data-standings]") and a.is_hidden("[data-series-tally]")
            assert a.text_content("[data-status]") == "已取消开房。选择房间即可再玩。"
            a.check("input[name=room][value=friends]")
            a.click("[data-action=join]")  # no longer placed at the cancelled table: queued
            a.wait_for_function("() => (document.querySelector('[data-status]').dataset.code || '') !== "
                                "'already_placed' && !document.querySelector('#lobby').offsetParent",
                                timeout=60_000)
        finally:
            browser.close()
    assert console.errors == []
