"""The browser client end to end (issue 15): a real headless Chromium (Debian's
``/usr/bin/chromium`` driven by Playwright's Python API) against a real
``shuangkou gateway --dev --bots``, ``shuangkou serve`` and a real redis-server, in
both deployments (with a dramatiq worker process, and serve alone).

* A person types a name, joins a room, presses Ready; the trustee bot takes the
  other seat (``--bots``).  The test plays the whole match by clicking the
  cards of its choice (the trustee's choice, computed here from what the page
  shows) and pressing Play -- and Pass now and then when it could follow --
  until the settlement panel shows; Hint is checked to select exactly the
  trustee's choice; one turn is left to time out and the page shows the R-13.1
  notice in Chinese and English.  The settlement on the page equals the
  ledger's; then Ready again starts the next match at the same table.
* A second browser watches the match as a spectator (``/watch/<id>``): no
  ``data-card`` ever appears there, and no frame it receives holds a hand.
* The replay viewer (``/replay/<id>``, operator token) steps through that match
  (forward, back, jump, autoplay) and its settlement numbers equal the ledger's;
  the same viewer loads the ``shuangkou export`` file of the match.
* The JavaScript console has no errors on any page.

Screenshots go to ``artifacts/screenshots/`` (gitignored; CI keeps the folder
as an artifact, docs/BROWSER.md): the table at 375 px and 1280 px during play
and at the settlement, the spectator page, and the replay viewer at both widths.
"""

from __future__ import annotations

import contextlib

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.processes import tail, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.redis, pytest.mark.worker]

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def stack(redis_server, tmp_path, deployment):
    """serve (+ a dramatiq worker, or alone: both deployments) + ``gateway --dev --bots`` on a
    real redis-server, with a points room whose 12 s turn clock shows the timeout notice quickly
    (and leaves a loaded machine the time to click a move)."""
    # the clicks below expect the trustee's simple plays
    with browser_stack(redis_server, tmp_path, deployment, {"quick": {"turn_seconds": 12}}, "browser",
                       "--dev", "--bots", "--bot-think", "0.3", "--bot-level", "trustee") as (s, gw):
        yield {"base": gw.http, "store_url": s.store_url, "logs": s.logs,
               "secret": s.secret_file.read_bytes().strip()}


@contextlib.contextmanager
def browser_stack(redis_server, tmp_path, deployment, rooms: dict, name: str, *gateway_args: str):
    """The stack of a browser test: Debian's chromium is there (else a failure, or a skip only
    with ``SK_ALLOW_NO_BROWSER=1``), serve in ``deployment`` with ``rooms`` on a real
    redis-server, and gateway ``name`` (``gateway_args``) answering /healthz: ``(stack, gateway)``."""
    from tests.gateway_support import start_stack

    if not Path(CHROMIUM).exists():
        msg = "the browser tests need Debian's chromium at /usr/bin/chromium (.ci/run installs it)"
        if os.environ.get("SK_ALLOW_NO_BROWSER") == "1":
            pytest.skip(msg)
        pytest.fail(msg, pytrace=False)
    s = start_stack(redis_server.db_url(2), redis_server.db_url(3), tmp_path, rooms, deployment)
    try:
        gw = s.start_gateway(name, *gateway_args)

        def up() -> bool:
            for p in s.procs:
                assert p.poll() is None, "a process exited:\n" + "\n".join(tail(x) for x in s.logs)
            try:
                return urllib.request.urlopen(gw.http + "/healthz", timeout=2).status == 200
            except OSError:
                return False

        wait_for(up, 60, "the gateway never answered /healthz", s.logs)
        yield s, gw
    finally:
        s.stop()


def _token(base: str, name: str, role: str) -> str:
    req = urllib.request.Request(base + "/api/dev/token", data=json.dumps({"name": name, "role": role}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    return json.loads(urllib.request.urlopen(req, timeout=10).read())["token"]


class Console:
    """Every console error and uncaught exception of the pages it watches."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def watch(self, page, name: str) -> None:
        """Console errors, uncaught exceptions, and every WebSocket frame the page receives that
        does not validate against gateway/schemas/server.json (issue 26 §1)."""
        page.on("console", lambda m: self.errors.append(f"{name}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"{name}: {e}"))
        page.on("websocket", lambda ws: ws.on("framereceived", lambda frame: self._check(name, frame)))

    def _check(self, name: str, frame: str | bytes) -> None:
        from tests.gateway_support import schema_problem

        problem = schema_problem(frame)
        if problem:
            self.errors.append(f"{name}: a frame off the schema: {problem}")


def _attr_ints(page, selector: str, attr: str) -> list[int]:
    return [int(x) for x in page.eval_on_selector_all(selector, f"els => els.map(e => e.getAttribute('{attr}'))")]


def _choice(page):
    """The trustee's choice (R-13.3) for the hand and the play the page shows."""
    from engine.rules.classify import interpretations
    from engine.rules.moves import trustee_choice

    hand = _attr_ints(page, "#hand [data-card]", "data-card")
    table = _attr_ints(page, "#last [data-table-card]", "data-table-card")
    prev = None
    if table:
        kind, rank = page.get_attribute("#last", "data-last-kind"), page.get_attribute("#last", "data-last-rank")
        prev = next(r for r in interpretations(table) if r.kind == kind and r.rank == rank)
    return hand, prev, trustee_choice(hand, prev)


def _click_in_turn(page, selector: str, version: str) -> bool:
    """Click ``selector``; False (no click) when the view moved on first (the turn clock or
    trusteeship played), so a loaded machine's slow screenshot never fails the match."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for _ in range(24):  # two minutes: far past any turn clock
        if page.get_attribute("#table", "data-version") != version:
            return False
        try:
            page.click(selector, timeout=5_000)
            return True
        except PlaywrightTimeout:
            continue
    raise AssertionError(f"{selector} stayed disabled for two minutes at version {version}")


def _select(page, cards, version: str) -> bool:
    """Click each card; True when exactly they are selected and the view did not move meanwhile."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for cid in cards:
        if page.get_attribute("#table", "data-version") != version:
            return False
        try:
            page.click(f"#hand [data-card='{cid}']", timeout=5_000)
        except PlaywrightTimeout:
            if page.get_attribute("#table", "data-version") != version:
                return False
            raise
    picked = sorted(_attr_ints(page, "#hand [data-card][aria-pressed=true]", "data-card"))
    if page.get_attribute("#table", "data-version") != version:
        return False
    if picked != sorted(cards):  # a click lost while the page re-rendered the hand: once more
        for cid in sorted(set(cards) - set(picked)):
            page.click(f"#hand [data-card='{cid}']", timeout=5_000)
        picked = sorted(_attr_ints(page, "#hand [data-card][aria-pressed=true]", "data-card"))
        if page.get_attribute("#table", "data-version") != version:
            return False
    assert picked == sorted(cards)
    return True


def _shot(page, name: str, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    page.wait_for_timeout(150)  # one layout pass at the new width before the picture
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)


def _no_hand_in(frame: str) -> list[str]:
    """What in a spectator's frame would be a hand (empty: nothing)."""
    try:
        msg = json.loads(frame)
    except ValueError:
        return []
    found = []
    view = msg.get("view") or {}
    if view.get("hand"):
        found.append("view.hand")
    for e in msg.get("events") or []:
        if e.get("type") == "HandDealt" and any(h is not None for h in e.get("hands") or []):
            found.append("HandDealt.hands")
    return found


def test_a_whole_match_in_the_browser_against_the_bot(stack, tmp_path) -> None:
    from playwright.sync_api import sync_playwright

    from gateway.web import dev_identity
    from projections.ledger import RedisLedger
    import redis

    base = stack["base"]
    console = Console()
    ledger = RedisLedger(redis.Redis.from_url(stack["store_url"]))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            player_ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-TW")
            page = player_ctx.new_page()
            console.watch(page, "table")

            # -- sit down: dev login with a Chinese name, join the quick points room, Ready -----
            page.goto(base + "/")
            page.wait_for_selector("#login:not([hidden])")
            assert page.locator("#link").is_hidden()  # no socket before sign-in: no "connecting…" badge
            page.fill("#login-name", "小明")
            page.click("[data-action=login]")
            page.wait_for_selector("#link[data-link=open]:visible")
            alice = dev_identity("小明")[0]  # the id the --dev login derives from the name
            page.check("input[name=room][value=quick]")
            page.click("[data-action=join]")
            page.wait_for_selector("[data-action=ready]:visible", timeout=60_000)
            match_id = page.get_attribute("#table", "data-match")
            assert match_id
            page.click("[data-action=ready]")

            # -- a spectator in a second browser ----------------------------------------------
            spec_ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
            spec = spec_ctx.new_page()
            console.watch(spec, "spectator")
            frames: list[str] = []
            spec.on("websocket", lambda ws: ws.on("framereceived", lambda f: frames.append(f if isinstance(f, str) else "")))
            spec.goto(f"{base}/watch/{match_id}")  # straight as a spectator: --dev asks only for a name
            spec.wait_for_selector("#login:not([hidden])")
            assert spec.is_hidden("#login-spectator")
            spec.fill("#login-name", "看客")
            spec.click("[data-action=login]")

            # -- play until the settlement shows ----------------------------------------------
            page.wait_for_selector("#table[data-phase=playing]", timeout=60_000)
            turns = plays = passes = 0
            hint_checked = timed_out = refused_checked = False
            spectator_seen_cards = False
            deadline = time.monotonic() + 600
            while not page.locator("[data-settlement]:visible").count():
                assert time.monotonic() < deadline, "the match did not finish in 10 minutes"
                if spec.locator("#match [data-card]").count():
                    pytest.fail("a data-card (a hand card) appeared on the spectator's table")
                spectator_seen_cards = spectator_seen_cards or spec.locator("[data-table-card]").count() > 0
                if page.get_attribute("#table", "data-your-turn") != "true":
                    page.wait_for_timeout(100)
                    continue
                version = page.get_attribute("#table", "data-version")
                hand, prev, choice = _choice(page)
                turns += 1
                if not timed_out and turns == 3:
                    # let the turn clock run out once; the page says so in both languages
                    note = page.wait_for_selector("[data-notice=timeout]", timeout=30_000)
                    text = note.text_content()  # one language: the page's (zh-Hant)
                    assert "請注意，你已經超時1次了" in text and "timed out" not in text, text
                    timed_out = True
                    continue
                if not refused_checked and len({c % 54 // 4 for c in hand if c % 54 < 52}) >= 3:
                    # issue 25: Play is disabled, with the reason under the hand, for a non-combination
                    ranks = sorted({c % 54 // 4: c for c in hand if c % 54 < 52}.items())
                    odd = [ranks[0][1], ranks[-1][1]]
                    if not _select(page, odd, version):
                        continue
                    page.wait_for_function("() => document.querySelector('[data-action=play]').disabled"
                                           " && document.querySelector('[data-play-why]').textContent === '不成牌型'"
                                           " || document.querySelector('#table').dataset.yourTurn !== 'true'",
                                           timeout=10_000)
                    if page.get_attribute("#table", "data-version") != version:
                        continue
                    for cid in odd:
                        page.click(f"#hand [data-card='{cid}']")
                    refused_checked = True
                elif not hint_checked and prev is not None and choice is not None:
                    page.click("[data-action=hint]")
                    page.wait_for_function(
                        "n => document.querySelectorAll('#hand [data-card][aria-pressed=true]').length === n"
                        " || document.querySelector('#table').dataset.yourTurn !== 'true'",
                        arg=len(choice.cards), timeout=10_000)
                    if page.get_attribute("#table", "data-version") != version:
                        continue  # the clock ran out meanwhile: try again on the next turn
                    picked = _attr_ints(page, "#hand [data-card][aria-pressed=true]", "data-card")
                    assert sorted(picked) == sorted(choice.cards)
                    for cid in picked:  # clear it again by clicking: the test selects by hand below
                        page.click(f"#hand [data-card='{cid}']")
                    hint_checked = True
                if prev is not None and (choice is None or turns % 4 == 0):
                    page.click("[data-action=pass]")
                    passes += 1
                else:
                    assert choice is not None
                    if not _select(page, choice.cards, version):
                        continue  # the turn clock (or trusteeship) played first
                    if plays == 2:
                        _shot(page, "table-play", 375)
                        _shot(page, "table-play", 1280)
                        _shot(spec, "spectator", 1280)
                    if not _click_in_turn(page, "[data-action=play]", version):
                        continue  # the clock ran out while the screenshots were taken
                    plays += 1
                # the next view (or a refusal, when the clock ran out first) before the next turn
                page.wait_for_function(
                    "v => document.querySelector('#table').dataset.version !== v"
                    " || document.querySelector('[data-status]').dataset.kind === 'error'"
                    " || !document.querySelector('[data-settlement]').hidden", arg=version, timeout=30_000)
            assert plays >= 1 and passes >= 1 and timed_out and hint_checked and refused_checked
            assert spectator_seen_cards

            # -- the settlement equals the ledger's ---------------------------------------------
            settled = wait_for(lambda: ledger.settlement(match_id), 60, "the ledger never settled the match",
                                stack["logs"])
            shown = {p: int(page.text_content(f"[data-settlement] [data-score='{p}']")) for p in settled.scores}
            assert shown == settled.scores
            # the player's own new balance, from the ledger (the opponent's is not the player's business)
            assert int(page.text_content("[data-settlement] [data-balance='%s']" % alice)) == ledger.balance(alice, "points")
            # issue 25: the loser's cards face up, a verdict in the page's language, the bot's word
            loser = settled.loser
            page.wait_for_selector(f"[data-cards-left='{loser}'][data-known=true]", state="attached")
            assert page.locator(f"[data-cards-left='{loser}'] [data-card]").count() == settled.cards_left[loser]
            assert page.locator(f"[data-cards-left='{settled.winner}'] [data-card]").count() == 0
            verdict = page.text_content("[data-settlement] .verdict")
            assert verdict.startswith("你贏了" if settled.scores[alice] > 0 else "你輸了"), verdict
            assert page.text_content("[data-opponent-name]") == "機器人"
            assert "小明" in spec.text_content("#match")  # spectators get the names too
            assert page.locator("[data-settlement] [data-term=X]").text_content().startswith(str(settled.breakdown["X"]))
            _shot(page, "table-settlement", 375)
            _shot(page, "table-settlement", 1280)
            spec.wait_for_selector("#table[data-phase=finished]", timeout=30_000)  # the result, in its status line
            assert spec.locator("#match [data-card]").count() == 0
            # a spectator is never sent the settlement: its result does not wait for one ("settling…")
            spec.wait_for_function("() => document.querySelector('[data-status]').textContent.includes('wins')")
            assert "settling" not in spec.text_content("[data-status]")
            leaks = [what for f in frames for what in _no_hand_in(f)]
            assert frames and not leaks, leaks

            # -- the next match at the same table -----------------------------------------------
            page.click("[data-action=ready]")
            page.wait_for_function(
                "m => { const t = document.querySelector('#table');"
                " return t.dataset.match && t.dataset.match !== m && t.dataset.phase === 'playing'; }",
                arg=match_id, timeout=60_000)
            page.click("[data-action=trustee]")  # let trusteeship finish it; the test is done playing
            # the spectator follows the table to its next match, and a reload would watch that one
            nxt = page.get_attribute("#table", "data-match")
            spec.wait_for_function("m => document.querySelector('#table').dataset.match === m", arg=nxt,
                                   timeout=60_000)
            assert spec.url.endswith(f"/watch/{nxt}") and spec.locator("#match [data-card]").count() == 0
            spec_ctx.close()

            # -- the replay viewer ----------------------------------------------------------------
            viewer_ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
            viewer = viewer_ctx.new_page()
            console.watch(viewer, "replay")
            viewer.goto(f"{base}/replay/{match_id}?token={_token(base, 'op', 'operator')}")
            viewer.wait_for_selector("#viewer[data-loaded=true]", timeout=30_000)
            assert viewer.get_attribute("[data-ledger]", "data-ledger") == "true"
            pos = lambda: int(viewer.get_attribute("#pos", "data-step-index"))  # noqa: E731
            assert pos() == 0
            for _ in range(8):
                viewer.click("[data-action=forward]")
            assert pos() == 8
            viewer.click("[data-action=back]")
            assert pos() == 7
            n_steps = viewer.locator("#steps [data-replay-step]").count()
            first_play = viewer.locator("#steps [data-replay-step][data-step-type=CardsPlayed]").first
            first_play.click()
            assert viewer.locator("#now [data-actor]").count() == 1
            assert viewer.locator("[data-replay-hand]").count() == 2  # both hands
            viewer.click("[data-action=autoplay]")
            viewer.wait_for_function("() => Number(document.querySelector('#pos').dataset.stepIndex) >= 12",
                                     timeout=30_000)
            viewer.click("[data-action=autoplay]")
            viewer.click("[data-action=last]")
            assert pos() == n_steps - 1
            assert viewer.locator("#steps .trick").count() >= 2  # trick breaks
            assert viewer.locator("#steps li", has_text="timed out").count() >= 1  # our timeout
            shown = {p: int(viewer.text_content(f"[data-settlement] [data-score='{p}']")) for p in settled.scores}
            assert shown == settled.scores
            for p, x in settled.breakdown["xiang"].items():
                cell = viewer.locator(f"[data-settlement] [data-xiang='{p}']")
                assert int(cell.get_attribute("data-xiang-value")) == x["xiang"] and "R-8.3" in cell.text_content()
                # which bomb: the command line's English transcript, folded under the settlement
                assert x["source"] in viewer.text_content("[data-settlement] .settlement-lines")
            if "win_formula" in settled.breakdown:
                assert viewer.text_content("[data-settlement] [data-term=win]") == settled.breakdown["win_formula"]
            _shot(viewer, "replay", 1280)
            _shot(viewer, "replay", 375)
            # on a phone each hand's heading shows the whole name (wrapped, not cut): the display
            # name the player chose, the id beside it in the players' line
            cut = viewer.eval_on_selector_all("[data-replay-hand] .name",
                                              "els => els.filter((e) => e.scrollWidth > e.clientWidth).length")
            assert cut == 0 and viewer.locator(f"[data-replay-hand='{alice}'] .name").text_content().startswith("小明")
            assert f"小明 [{alice}]" in viewer.text_content("#meta")

            # the viewer reads the export file too
            export = tmp_path / "match.jsonl"
            out = subprocess.run([sys.executable, "-m", "shuangkou", "export", match_id, "--redis", stack["store_url"],
                                  "--out", str(export)], cwd=ROOT, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            viewer.goto(f"{base}/replay/file")
            viewer.set_input_files("#file", str(export))
            viewer.wait_for_selector("#viewer[data-loaded=true]", timeout=30_000)
            viewer.click("[data-action=last]")
            shown = {p: int(viewer.text_content(f"[data-settlement] [data-score='{p}']")) for p in settled.scores}
            assert shown == settled.scores
            assert viewer.get_attribute("[data-ledger]", "data-ledger") == "true"  # the export's stored copy
            viewer_ctx.close()
            player_ctx.close()
        finally:
            browser.close()
    assert console.errors == []


def test_a_named_token_is_shown_to_the_opponent(stack) -> None:
    """Issue 25: a token minted with a display name (``shuangkou token PLAYER --name 小明``) is
    what the opponent's page shows in ``[data-opponent-name]`` -- never the player id."""
    from playwright.sync_api import sync_playwright

    from gateway.tokens import mint

    base = stack["base"]
    console = Console()
    token = mint(stack["secret"], "p-xiaoming", name="小明", ttl_seconds=600)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            a_ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
            b_ctx = browser.new_context(viewport={"width": 375, "height": 800}, locale="en-US")
            a, b = a_ctx.new_page(), b_ctx.new_page()
            console.watch(a, "小明")
            console.watch(b, "bob")
            a.goto(f"{base}/?token={token}")
            b.goto(base + "/")
            b.fill("#login-name", "Bob")
            b.click("[data-action=login]")
            for page in (a, b):
                page.wait_for_selector("#lobby:not([hidden]) input[name=room][value=quick]")
                page.check("input[name=room][value=quick]")
            a.click("[data-action=join]")
            b.click("[data-action=join]")  # at once: two waiting players are paired before any bot
            b.wait_for_function("() => document.querySelector('[data-opponent-name]').textContent === '小明'",
                                timeout=60_000)
            a.wait_for_function("() => document.querySelector('[data-opponent-name]').textContent === 'Bob'",
                                timeout=60_000)
            assert "p-xiaoming" not in b.text_content("#table")
            assert a.get_attribute("html", "lang") == "zh-Hans" and b.get_attribute("html", "lang") == "en"
            a_ctx.close()
            b_ctx.close()
        finally:
            browser.close()
    assert console.errors == []


def test_a_tab_another_tab_replaced_says_so_and_offers_no_lobby(stack) -> None:
    """The same player opens the table in a second tab: the first one's socket is closed 4409
    (docs/PROTOCOL.md "Close codes").  Its page says why in the player's language and hides
    the lobby's buttons, which a closed socket could not send; before, it read "Session
    closed: ✕ closed" over a lobby that still looked usable."""
    from playwright.sync_api import sync_playwright

    from gateway.tokens import mint

    base = stack["base"]
    console = Console()
    token = mint(stack["secret"], "p-twin", name="Twin", ttl_seconds=600)
    words = {"zh-CN": "已在另一个标签页或窗口打开牌桌", "en-US": "opened in another tab or window"}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            for locale, said in words.items():
                ctx = browser.new_context(viewport={"width": 375, "height": 812}, locale=locale)
                first, second = ctx.new_page(), ctx.new_page()
                console.watch(first, f"first {locale}")
                console.watch(second, f"second {locale}")
                first.goto(f"{base}/?token={token}")
                first.wait_for_selector("#lobby:not([hidden]) [data-action=join]")
                second.goto(f"{base}/?token={token}")
                second.wait_for_selector("#lobby:not([hidden]) [data-action=join]")
                first.wait_for_function("() => document.querySelector('[data-status]').dataset.code === '4409'",
                                        timeout=30_000)
                assert said in first.text_content("[data-status]")
                assert first.locator("#lobby").is_hidden()
                ctx.close()
        finally:
            browser.close()
    assert console.errors == []
