"""The table page as a player meets it (issue 25), in a real headless Chromium (Debian's
``/usr/bin/chromium`` driven by Playwright), fed a real engine match:

* ``zh-CN``, ``zh-TW`` and ``en-US`` browsers get ``<html lang>`` zh-Hans / zh-Hant / en and
  the Play button's text from the catalogue; the ``[data-action=lang]`` switch changes it and
  a reload keeps the choice;
* Play is ``disabled`` with the reason under the hand while the selection is no combination
  or cannot beat the play in front (the page's own ``/api/readings``, served here by the
  gateway's :func:`gateway.web.readings_for`);
* a refusal from the engine (its real code and reason) shows the catalogue's words, with the
  code in ``data-code`` and no rule id or code in sight;
* the mute switch (``aria-pressed``) is remembered across a reload;
* the end of a match stays with the loser's cards face up (``[data-cards-left]``), a verdict
  and the settlement, and the screenshots of each language at 375 and 1280 px go to
  ``artifacts/screenshots/`` beside the others.

The page's socket is replaced by one that feeds it the engine's own per-player messages (as
tests/test_fair_browser.py does), so no gateway process is needed; the JSON endpoints the page
calls are the gateway's functions behind a small HTTP server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.config import load_config
from engine.match.commands import CreateMatch, Pass, Play, Ready, Sit
from engine.rules.moves import trustee_choice
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random
from engine.store.memory import InMemoryEventStore
from projections.settlement import settle
from projections.views import redact_event, view_for
from tests.test_fair_browser import FAKE_SOCKET, STATIC, _feed, _Static, _token, chromium, serve_static

pytestmark = [pytest.mark.browser]

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "artifacts" / "screenshots"
CATALOGUES = {lang: json.loads((STATIC / "i18n" / f"{lang}.json").read_text(encoding="utf-8"))
              for lang in ("zh-Hans", "zh-Hant", "en")}
LOCALES = {"zh-CN": "zh-Hans", "zh-TW": "zh-Hant", "en-US": "en"}


class _Site(_Static):
    """The static files plus the page's JSON endpoints, answered by gateway/web.py's functions."""

    #: rooms a test offers beside the built-in ones (set around one test)
    extra_rooms: list[dict] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        from gateway import web

        if self.path.startswith("/api/client-config"):
            return self._json({"dev": False, "bots": False, "rooms": web.room_list(None) + self.extra_rooms})
        if self.path.startswith("/api/rooms"):
            return self._json({"rooms": [{**r, "balance": 0, "admits": True} for r in web.room_list(None)],
                               "balances": {"points": 0}})
        return super().do_GET()

    def do_POST(self) -> None:  # noqa: N802
        from gateway import web

        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"null")
        fn = {"/api/readings": web.readings_for, "/api/hint": web.hint_for, "/api/arrange": web.arrange_for,
              "/api/standing": lambda d: web.standing_for(d, None)}.get(self.path)
        if fn is None:
            return self._json({"error": "not_found"}, 404)
        try:
            return self._json(fn(body))
        except web.HttpError as exc:
            return self._json({"error": exc.code, "reason": exc.reason}, exc.status)

    def _json(self, data, status: int = 200) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture(scope="module")
def site():
    yield from serve_static(_Site)


@pytest.fixture(scope="module")
def browser():
    yield from chromium()


class Match:
    """A real match in the engine (alice against bob); ``run`` gives alice's socket messages."""

    def __init__(self, mid: str = "page-1", config=None, balances: dict[str, int] | None = None) -> None:
        from engine.service.service import FixedBalances

        self.svc = MatchService(InMemoryEventStore(), lambda: 1_800_000_000_000, seeded_random(7),
                                balances=FixedBalances(balances) if balances else None)
        self.mid = mid
        self.state = None
        self.config = config or load_config("points")

    def run(self, cmd) -> list[dict]:
        out = self.svc.execute(cmd)
        assert out.rejection is None, out.rejection
        self.state = out.state
        return [{"kind": "update", "match": self.mid, "version": out.state.version,
                 "events": [json.loads(json.dumps(redact_event(e, "alice", state=out.state))) for e in out.events],
                 "view": json.loads(json.dumps(view_for(out.state, "alice"))),
                 "names": {"alice": "小明", "bob": "Bob"}}]

    def seat(self) -> list[dict]:
        """The match created and both players seated, neither ready."""
        msgs = self.run(CreateMatch(command_id="c1", match_id=self.mid, config=self.config.to_record()))
        msgs += self.run(Sit(command_id="c2", match_id=self.mid, player="alice"))
        return msgs + self.run(Sit(command_id="c3", match_id=self.mid, player="bob"))

    def start(self) -> list[dict]:
        msgs = self.seat()
        msgs += self.run(Ready(command_id="c4", match_id=self.mid, player="alice"))
        return msgs + self.run(Ready(command_id="c5", match_id=self.mid, player="bob"))

    def step(self, n: int) -> list[dict]:
        """``n`` moves of the trustee's choice (R-13.3) for whoever is on turn."""
        msgs: list[dict] = []
        for i in range(n):
            s = self.state
            if s.phase != "playing":
                break
            seat = s.seats[s.turn]
            prev = s.to_beat.combo if s.to_beat is not None else None
            play = trustee_choice(list(seat.hand), prev)
            cid = f"m{s.version}-{i}"
            msgs += self.run(Pass(command_id=cid, match_id=self.mid, player=seat.player) if play is None else
                             Play(command_id=cid, match_id=self.mid, player=seat.player, cards=tuple(play.cards)))
        return msgs

    def settled(self) -> dict:
        s = settle(self.svc.store.load(self.mid))
        assert s is not None
        return {"kind": "settled", "match": self.mid, "scores": s.scores, "breakdown": s.breakdown,
                "balances": {"alice": 100 + s.scores["alice"]}, "names": {"alice": "小明", "bob": "Bob"}}


def _open(browser, site, locale: str = "en-US", **ctx):
    context = browser.new_context(locale=locale, **{"viewport": {"width": 1280, "height": 900}, **ctx})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script(FAKE_SOCKET)
    page.goto(f"{site}/?token={_token('alice')}")
    page.wait_for_function("() => !!window.__ws && window.__ws.readyState === 1 && !!document.documentElement.lang")
    return context, page, errors


def _seat(page, m: Match) -> None:
    _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                 {"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m.mid,
                  "names": {"alice": "小明", "bob": "Bob"}}] + m.start())
    page.wait_for_selector("#hand [data-card]")


def _at_alices_turn(page) -> Match:
    """A match seated on the page, moved on (bob leads) until alice is on turn."""
    m = Match()
    _seat(page, m)
    if m.state.seats[m.state.turn].player != "alice":
        _feed(page, m.step(1))
    page.wait_for_selector("#table[data-your-turn=true]")
    return m


#: page.evaluate(_RECT, selector): the element's [left, top, right, bottom] in the viewport
_RECT = "s => { const r = document.querySelector(s).getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }"


def _visible_text(page) -> str:
    """What a player reads without opening a details toggle."""
    return page.evaluate("""() => {
        const out = [];
        const walk = (el) => {
            if (el.nodeType === 3) { out.push(el.textContent); return; }
            if (el.nodeType !== 1 || el.hidden || el.closest('details:not([open]) > :not(summary)')) return;
            const st = getComputedStyle(el);
            if (st.display === 'none' || st.visibility === 'hidden') return;
            for (const c of el.childNodes) walk(c);
        };
        walk(document.body);
        return out.join(' ');
    }""")


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_the_browser_language_picks_the_catalogue(browser, site, locale: str) -> None:
    lang = LOCALES[locale]
    context, page, errors = _open(browser, site, locale)
    try:
        page.wait_for_function("l => document.documentElement.lang === l", arg=lang)
        assert page.text_content("[data-action=play]") == CATALOGUES[lang]["btn.play"]
        assert page.title() == CATALOGUES[lang]["app.title"]
        # the switch goes round the three and the choice survives a reload
        nxt = {"zh-Hans": "zh-Hant", "zh-Hant": "en", "en": "zh-Hans"}[lang]
        page.click("[data-action=lang]")
        page.wait_for_function("l => document.documentElement.lang === l", arg=nxt)
        assert page.text_content("[data-action=pass]") == CATALOGUES[nxt]["btn.pass"]
        page.reload()
        page.wait_for_function("l => document.documentElement.lang === l", arg=nxt)
        assert page.text_content("[data-action=play]") == CATALOGUES[nxt]["btn.play"]
        assert not errors, errors
    finally:
        context.close()


def test_play_is_disabled_for_a_non_combination(browser, site) -> None:
    context, page, errors = _open(browser, site, "zh-CN")
    try:
        m = _at_alices_turn(page)
        hand = sorted(m.state.seats[0].hand)
        from engine.rules.cards import rank_of

        by_rank: dict[int, list[int]] = {}
        for c in hand:
            if rank_of(c) < 13:  # no joker: a joker beside a natural card is a wild pair (R-4)
                by_rank.setdefault(rank_of(c), []).append(c)
        ranks = sorted(by_rank)
        lo, hi = by_rank[ranks[0]][0], by_rank[ranks[-1]][0]  # two natural ranks apart: no combination
        page.click(f"#hand [data-card='{lo}']")
        page.click(f"#hand [data-card='{hi}']")
        picked = sorted(int(x) for x in page.eval_on_selector_all("#hand [aria-pressed=true]", "els => els.map(e => e.dataset.card)"))
        assert picked == sorted([lo, hi])
        page.wait_for_function("t => document.querySelector('[data-play-why]').textContent === t",
                               arg=CATALOGUES["zh-Hans"]["reading.notCombo"])
        assert page.is_disabled("[data-action=play]")
        page.click(f"#hand [data-card='{lo}']")  # one card left: a single
        page.wait_for_function("() => document.querySelector('[data-play-why]').textContent !== '"
                               + CATALOGUES["zh-Hans"]["reading.notCombo"] + "'")
        page.wait_for_function("() => !document.querySelector('[data-play-why]').textContent.startsWith('"
                               + CATALOGUES["zh-Hans"]["reading.checking"] + "')")
        why = page.text_content("[data-play-why]")
        lp = m.state.to_beat
        beats = lp is None or any(r.get("beats") for r in __import__("gateway.web", fromlist=["x"]).readings_for(
            {"cards": [hi], "last_cards": list(lp.cards), "last_kind": lp.combo.kind, "last_rank": lp.combo.rank}
            if lp else {"cards": [hi]})["readings"])
        assert page.is_disabled("[data-action=play]") == (not beats)
        assert (why == "") == beats  # a single that cannot beat says so under the hand
        assert not errors, errors
    finally:
        context.close()


def test_cards_chosen_before_the_turn_are_checked_against_the_play_that_comes(browser, site) -> None:
    """A card chosen while the opponent is on turn is checked again once their play arrives:
    Play is enabled (or says why not) without the player touching the cards again."""
    from gateway.web import readings_for

    context, page, errors = _open(browser, site, "zh-CN")
    try:
        m = Match()
        _seat(page, m)
        if m.state.seats[m.state.turn].player == "alice":
            _feed(page, m.step(1))  # alice leads: now bob is on turn
        page.wait_for_selector("#table[data-your-turn=false]")
        top = max(m.state.seats[0].hand)  # the big joker or her highest card
        page.click(f"#hand [data-card='{top}']")
        page.wait_for_function("t => document.querySelector('[data-play-why]').textContent === t",
                               arg=CATALOGUES["zh-Hans"]["reading.notYourTurn"])
        _feed(page, m.step(1))  # bob plays (or passes): alice's turn, her card still chosen
        page.wait_for_selector("#table[data-your-turn=true]")
        page.wait_for_function("() => !document.querySelector('[data-play-why]').textContent.startsWith('"
                               + CATALOGUES["zh-Hans"]["reading.checking"] + "')")
        lp = m.state.to_beat
        ask = {"cards": [top], "last_cards": list(lp.cards), "last_kind": lp.combo.kind,
               "last_rank": lp.combo.rank} if lp else {"cards": [top]}
        beats = any(r.get("beats") for r in readings_for(ask)["readings"])
        assert page.is_disabled("[data-action=play]") == (not beats)
        assert not errors, errors
    finally:
        context.close()


def test_a_double_tap_on_play_sends_one_play_until_its_answer(browser, site) -> None:
    """Play and Pass hold after a Play is sent: a double tap sends it once; a refusal frees them."""
    context, page, errors = _open(browser, site, "zh-CN")
    try:
        m = _at_alices_turn(page)
        s = m.state
        choice = trustee_choice(list(s.seats[0].hand), s.to_beat.combo if s.to_beat is not None else None)
        assert choice is not None
        for c in choice.cards:
            page.click(f"#hand [data-card='{c}']")
        page.wait_for_function("() => !document.querySelector('[data-action=play]').disabled")
        page.dblclick("[data-action=play]")
        page.wait_for_timeout(300)
        plays = page.evaluate("() => window.__sent.filter(m => m.type === 'Play' || m.type === 'Pass')")
        assert len(plays) == 1 and plays[0]["type"] == "Play", plays
        assert page.is_disabled("[data-action=play]")
        _feed(page, [{"kind": "rejected", "command_id": None, "code": "stale", "reason": "stale",
                      "view": None, "match": m.mid}])
        page.wait_for_function("() => !document.querySelector('[data-action=play]').disabled")
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("locale", ["zh-CN", "en-US"])
def test_a_table_closed_by_another_tab_says_it_whole_and_takes_no_move(browser, site, locale: str) -> None:
    """Mid-match, the socket is closed 4409 (the table opened in another tab): on a phone the
    status says why and what to do without being cut, and no action button stays usable."""
    context, page, errors = _open(browser, site, locale, viewport={"width": 390, "height": 844})
    try:
        _at_alices_turn(page)
        page.evaluate("() => window.__ws._emit('close', { code: 4409, reason: '' })")
        page.wait_for_function("() => document.querySelector('[data-status]').dataset.code === '4409'")
        cut = page.eval_on_selector("[data-status]", "e => e.scrollWidth > e.clientWidth + 1 || "
                                                     "e.scrollHeight > e.clientHeight + 1")
        assert not cut, page.text_content("[data-status]")
        usable = page.eval_on_selector_all("#play-actions button", "bs => bs.filter(b => !b.hidden && !b.disabled)"
                                                                  ".map(b => b.dataset.action)")
        assert usable == [], usable
        assert not errors, errors
    finally:
        context.close()


def test_a_table_closed_by_another_tab_before_the_deal_offers_no_ready(browser, site) -> None:
    """Seated before the deal, the socket is closed 4409 (the table opened in another tab): the
    page no longer offers Ready or Leave, which it could not send (found by a new user's play:
    the old tab kept an active Ready under "reload this page to play here")."""
    context, page, errors = _open(browser, site, "en-US", viewport={"width": 375, "height": 812})
    try:
        m = Match("other-tab")
        msgs = m.seat()
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                     {"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m.mid}] + msgs)
        page.wait_for_selector("[data-action=ready]:visible")
        page.evaluate("() => window.__ws._emit('close', { code: 4409, reason: '' })")
        page.wait_for_function("() => document.querySelector('[data-status]').dataset.code === '4409'")
        assert page.locator("[data-action=ready]").is_hidden() and page.locator("[data-action=leave]").is_hidden()
        assert not errors, errors
    finally:
        context.close()


def test_a_refusal_shows_the_catalogue_words_and_keeps_the_code(browser, site) -> None:
    context, page, errors = _open(browser, site, "en-US")
    try:
        m = Match()
        _seat(page, m)
        s = m.state
        off = s.seats[1 - s.turn]  # the player not on turn tries to play: a real engine refusal
        out = m.svc.execute(Play(command_id="x1", match_id=m.mid, player=off.player, cards=(sorted(off.hand)[0],)))
        assert out.rejection is not None
        code, reason = out.rejection.code, out.rejection.reason
        assert re.search(r"R-\d", reason) or "_" in code  # what the page must not show as is
        _feed(page, [{"kind": "rejected", "command_id": "x1", "code": code, "reason": reason, "view": None,
                      "match": m.mid}])
        page.wait_for_selector(f"[data-status][data-code='{code}']")
        text = page.text_content("[data-status]")
        assert text == CATALOGUES["en"][f"refusal.{code}"]
        visible = _visible_text(page)
        assert not re.search(r"\bR-\d", visible), visible
        assert not re.search(r"\b[a-z]+_[a-z_]+\b", visible), visible
        assert reason not in visible
        # the same refusal again is written again (the status line is aria-live: it is said again)
        page.evaluate("""() => { window.__said = 0; new MutationObserver(() => { window.__said += 1; })
            .observe(document.querySelector('[data-status]'), { childList: true, characterData: true, subtree: true }); }""")
        _feed(page, [{"kind": "rejected", "command_id": "x2", "code": code, "reason": reason, "view": None,
                      "match": m.mid}])
        assert page.evaluate("() => window.__said") > 0  # not left as it was
        assert not errors, errors
    finally:
        context.close()


def test_mute_is_remembered_across_a_reload(browser, site) -> None:
    context, page, errors = _open(browser, site, "zh-TW")
    try:
        assert page.get_attribute("[data-action=mute]", "aria-pressed") == "false"
        page.click("[data-action=mute]")
        assert page.get_attribute("[data-action=mute]", "aria-pressed") == "true"
        page.reload()
        page.wait_for_function("() => document.documentElement.lang === 'zh-Hant'")
        assert page.get_attribute("[data-action=mute]", "aria-pressed") == "true"
        page.click("[data-action=mute]")
        page.reload()
        page.wait_for_function("() => document.documentElement.lang === 'zh-Hant'")
        assert page.get_attribute("[data-action=mute]", "aria-pressed") == "false"
        assert not errors, errors
    finally:
        context.close()


#: the screenshot sizes (issue 36): a phone in portrait, the same phone in landscape, a desktop
SIZES = ((375, 812), (812, 375), (1280, 800))


def _no_overflow(page) -> None:
    """Nothing wider than the screen: no sideways scrolling, no hand card off the edge."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    width = page.evaluate("() => window.innerWidth")
    try:  # a resize lays the page out again in the next frames: a busy machine takes longer
        page.wait_for_function("w => document.documentElement.scrollWidth <= w", arg=width, timeout=10_000)
    except PlaywrightTimeout:
        pass
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    edges = page.eval_on_selector_all("#hand [data-card] .card", "els => els.map(e => { const r = e.getBoundingClientRect();"
                                      " return [r.left, r.right]; })")
    assert all(left >= -1 and right <= width + 1 for left, right in edges), (width, edges)


def _shot(page, name: str) -> None:
    """``name-<w>x<h>.png`` at each of SIZES (what the screen shows, no scrolling), each checked
    for overflow."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(200)  # the hand is laid out again after a resize
        _no_overflow(page)
        page.screenshot(path=str(SHOTS / f"{name}-{width}x{height}.png"))
    page.set_viewport_size({"width": 1280, "height": 900})
    page.wait_for_timeout(150)


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_the_end_of_a_match_stays_with_the_losers_cards_and_a_verdict(browser, site, locale: str) -> None:
    lang = LOCALES[locale]
    words = CATALOGUES[lang]
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        m = Match(f"page-{lang}")
        _seat(page, m)
        _feed(page, m.step(9))
        page.wait_for_function("v => document.querySelector('#table').dataset.version === String(v)", arg=m.state.version)
        assert page.text_content("[data-opponent-name]") == "Bob"
        assert "小明" in page.text_content("#mine-name")
        _shot(page, f"table-{lang}-play")
        _feed(page, m.step(400))
        assert m.state.phase == "finished"
        _feed(page, [m.settled()])
        page.wait_for_selector("[data-settlement] [data-score='alice']")
        page.wait_for_timeout(300)  # a bomb notice of the last plays is async (announceBombs)
        assert page.locator("[data-notice=bomb]").count() == 0  # it would cover the result panel
        f = m.state.finished
        loser = f.loser
        assert dict(f.cards_left)[loser] > 0
        page.wait_for_function("p => document.querySelector(`[data-cards-left='${p}']`).dataset.known === 'true'", arg=loser)
        shown = sorted(int(x) for x in page.eval_on_selector_all(
            f"[data-cards-left='{loser}'] [data-card]", "els => els.map(e => e.dataset.card)"))
        assert shown == sorted(m.state.seats[m.state.seat_of(loser)].hand)  # the loser's cards, face up
        assert page.locator(f"[data-cards-left='{f.winner}'] [data-card]").count() == 0
        verdict = page.text_content(".verdict")
        mine = words["settle.win" if f.winner == "alice" else "settle.lose"]
        assert verdict.startswith(mine) and words[f"kou.{f.kou}"] in verdict, verdict
        score = m.settled()["scores"]["alice"]
        assert int(page.get_attribute("[data-score='alice']", "data-score-value")) == score
        # one way to write a signed number on every page: "+5", "-5" (a [data-score] reads back as an int)
        assert int(page.text_content("[data-score='alice']")) == score
        assert "\u2212" not in _visible_text(page)
        assert int(page.text_content("[data-balance='alice']")) == 100 + score
        assert not page.is_visible("[data-term=X]")  # the formula sits behind the details toggle
        page.click("[data-settlement] details summary")
        assert page.is_visible("[data-term=X]")
        page.click("[data-settlement] details summary")
        # the finished match's own deal can be verified in the page
        page.click("[data-action=verify]")
        page.wait_for_selector("[data-fair='verified'], [data-fair='failed']")
        assert page.get_attribute("[data-verify-result]", "data-fair") == "verified"
        assert page.text_content("[data-commitment]") == m.svc.store.load(m.mid)[0].commitment
        # the next match is offered: the finished one stays until Ready
        m2 = Match(f"page-{lang}-2")
        _feed(page, [{"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m2.mid}]
              + m2.run(CreateMatch(command_id="n1", match_id=m2.mid, config=load_config("points").to_record())))
        page.wait_for_timeout(200)
        assert page.get_attribute("#table", "data-match") == m.mid and page.is_visible("[data-settlement]")
        _shot(page, f"table-{lang}-settlement")
        page.click("[data-action=ready]")
        page.wait_for_function("m => document.querySelector('#table').dataset.match === m", arg=m2.mid)
        assert page.is_hidden("[data-settlement]")
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("locale", ["zh-CN", "en-US"])
def test_the_page_says_you_for_the_players_own_plays_and_names_each_in_the_deal_check(browser, site, locale: str) -> None:
    """Before the deal the opponent's seat shows no card count ("0 cards"); in the trick the
    player's own play is "you" (the one in front, the one it beat), the opponent's by name; a
    long negative balance keeps the top bar's tools on the name's row; the deal check names
    whose plays it checked, never a seat number; and when the opponent leaves after the result,
    the status says the player waits again while the result stays."""
    words = CATALOGUES[LOCALES[locale]]
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        page.set_viewport_size({"width": 390, "height": 844})
        m = Match()
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                     {"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}] + m.seat())
        page.wait_for_selector("[data-action=ready]:visible")
        assert page.is_hidden("#opp .count")  # nothing dealt: no "0 cards"
        _feed(page, m.run(Ready(command_id="c4", match_id=m.mid, player="alice"))
              + m.run(Ready(command_id="c5", match_id=m.mid, player="bob")))
        page.wait_for_selector("#hand [data-card]")
        assert page.is_visible("#opp .count")
        seen_mine = seen_prev = False
        for _ in range(80):
            _feed(page, m.step(1))
            page.wait_for_function("v => document.querySelector('#table').dataset.version === String(v)",
                                   arg=m.state.version)
            if m.state.phase != "playing":
                break
            lp = m.state.to_beat
            who = page.text_content("#last-who") if lp is not None else ""
            by = m.state.seats[lp.seat].player if lp is not None else None
            if by == "alice":
                assert who.endswith(words["last.playedYou"]), who
                seen_mine = True
            elif lp is not None:
                assert who.endswith(words["last.played"].replace("{name}", "Bob")), who
            if page.is_visible("#trick-prev[data-player=alice]"):
                prev = page.text_content("#trick-prev .prev-who")
                assert prev.startswith(words["last.prevYou"].split("{what}")[0]), prev
                seen_prev = True
            if seen_mine and seen_prev:
                break
        assert seen_mine and seen_prev
        _feed(page, m.step(400))
        assert m.state.phase == "finished"
        _feed(page, [{**m.settled(), "balances": {"alice": -12345}}])
        page.wait_for_function("() => document.querySelector('#me-balance').textContent.endsWith('-12345')")
        # a long balance cuts the name row short; the tools stay on it
        who, tools = page.evaluate(_RECT, ".topbar .who"), page.evaluate(_RECT, ".topbar .tools")
        assert abs(who[1] - tools[1]) < 12 and who[2] <= tools[0], (who, tools)
        page.click("[data-action=verify]")
        page.wait_for_selector("[data-verify-result][data-fair=verified]")
        played = page.eval_on_selector_all("[data-verify-checks] li[data-check=played]", "els => els.map(e => e.textContent)")
        assert sorted(x.removeprefix("✔ ") for x in played) == sorted(
            [words["fair.check.playedYou"], words["fair.check.played"].replace("{name}", "Bob")]), played
        # Bob leaves the table after the result: alice waits again; the result stays, the status says so
        _feed(page, [{"kind": "lobby", "state": "queued", "room": "points"}])
        queued = words["status.queued"].split("{room}")[0]
        page.wait_for_function("w => document.querySelector('[data-status]').textContent.startsWith(w)", arg=queued)
        assert page.is_visible("[data-settlement] [data-score='alice']")
        assert not errors, errors
    finally:
        context.close()


def test_a_spectator_sees_no_card_count_before_the_deal(browser, site) -> None:
    """As a player's page: neither seat shows "0 cards" to a spectator before the deal, nor in a
    match abandoned before it (the ready clock ran out)."""
    from engine.match.commands import ReadyTimeout

    context, page, errors = _open(browser, site, "en-US")
    try:
        m = Match()
        m.seat()
        state = m.state

        def watched(out_state, events) -> dict:
            return {"kind": "update", "match": m.mid, "version": out_state.version,
                    "events": [json.loads(json.dumps(redact_event(e, None, state=out_state))) for e in events],
                    "view": json.loads(json.dumps(view_for(out_state, None))), "names": {"alice": "小明", "bob": "Bob"}}

        _feed(page, [{"kind": "welcome", "player": "carol", "role": "spectator"},
                     watched(state, m.svc.store.load(m.mid))])
        page.wait_for_function("v => document.querySelector('#table').dataset.version === String(v)", arg=state.version)
        assert page.get_attribute("#table", "data-spectator") == "true"
        assert page.is_hidden("#opp .count") and page.is_hidden("#mine-count-row")
        out_a = m.svc.execute(Ready(command_id="c4", match_id=m.mid, player="alice"))
        out_b = m.svc.execute(Ready(command_id="c5", match_id=m.mid, player="bob"))
        _feed(page, [watched(out_a.state, out_a.events), watched(out_b.state, out_b.events)])
        page.wait_for_function("v => document.querySelector('#table').dataset.version === String(v)",
                               arg=out_b.state.version)
        assert page.is_visible("#opp .count") and page.is_visible("#mine-count-row")
        assert page.text_content("#mine-count") == "27"
        m = Match("page-2")
        m.seat()
        out = m.svc.execute(ReadyTimeout(command_id="rt", match_id=m.mid, version=m.state.version))
        assert out.rejection is None and out.state.phase == "abandoned"
        _feed(page, [watched(out.state, m.svc.store.load(m.mid))])
        page.wait_for_function("m => document.querySelector('#table').dataset.match === m", arg=m.mid)
        assert page.is_hidden("#opp .count") and page.is_hidden("#mine-count-row")
        assert not errors, errors
    finally:
        context.close()


def test_trusteeship_is_a_badge_its_notices_replace_each_other_and_a_disconnect_is_explained(browser, site) -> None:
    """States are badges on the seat; a newer trusteeship notice replaces the older one; after a
    disconnect the page says why and for how long (to the end of this match, R-13.4)."""
    from engine.match.commands import CancelTrustee, Disconnect, Reconnect, RequestTrustee

    context, page, errors = _open(browser, site, "zh-CN")
    try:
        m = Match()
        _seat(page, m)
        words = CATALOGUES["zh-Hans"]
        _feed(page, m.run(RequestTrustee(command_id="t1", match_id=m.mid, player="alice")))
        page.wait_for_selector("#mine-badges [data-badge=trustee]")
        _feed(page, m.run(CancelTrustee(command_id="t2", match_id=m.mid, player="alice")))
        page.wait_for_function("() => !document.querySelector('#mine-badges [data-badge=trustee]')")
        notes = page.eval_on_selector_all("[data-notice='trustee-alice']", "els => els.map(e => e.textContent)")
        assert notes == [words["notice.trusteeOffYou"]]  # "ended" replaced "started"
        _feed(page, m.run(Disconnect(command_id="t3", match_id=m.mid, player="bob")))
        page.wait_for_selector("#opp-badges [data-badge=trustee]")  # "auto-play (disconnected)" says it once
        assert page.locator("#opp-badges [data-badge=offline]").count() == 0
        _feed(page, m.run(Disconnect(command_id="t3a", match_id=m.mid, player="alice"))
              + m.run(Reconnect(command_id="t4", match_id=m.mid, player="alice")))
        page.wait_for_selector("[data-explain='disconnect']")
        text = page.text_content("[data-explain]")
        assert text == words["explain.disconnect"].replace("{s}", "10") and "R-" not in text
        assert page.is_hidden("[data-action=cancel-trustee]")  # the points room: reclaim_after_reconnect = false
        page.wait_for_function("() => !document.querySelector('[data-notice]')")  # transient: they go by themselves
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("size", [(390, 844), (375, 667), (1280, 900)])
@pytest.mark.parametrize("locale", ["zh-CN", "en-US"])
def test_notices_never_cover_a_refusal_or_the_opponents_name(browser, site, locale: str, size: tuple[int, int]) -> None:
    """Notices float over the top of the page for a few seconds: on a phone only the newest shows,
    so they never reach the opponent's name; and a refusal, said in the status line, clears them,
    so it is read whole the moment it comes."""
    from engine.match.commands import Disconnect, RequestTrustee

    context, page, errors = _open(browser, site, locale)
    try:
        width, height = size
        page.set_viewport_size({"width": width, "height": height})
        m = Match()
        _seat(page, m)
        _feed(page, m.run(RequestTrustee(command_id="t1", match_id=m.mid, player="alice"))
              + m.run(Disconnect(command_id="t2", match_id=m.mid, player="bob")))
        page.wait_for_selector("[data-notice]")
        shown = "() => [...document.querySelectorAll('[data-notice]')].filter(n => n.offsetParent !== null)" \
                ".map(n => { const r = n.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })"

        def apart(a, b) -> bool:
            return a[3] <= b[1] or b[3] <= a[1] or a[2] <= b[0] or b[2] <= a[0]

        name = page.evaluate(_RECT, "#opp-name")
        notes = page.evaluate(shown)
        assert notes and all(apart(n, name) for n in notes), (notes, name)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"notices-{LOCALES[locale]}-{width}x{height}.png"))
        s = m.state
        off = s.seats[1 - s.turn]
        out = m.svc.execute(Play(command_id="x1", match_id=m.mid, player=off.player, cards=(sorted(off.hand)[0],)))
        assert out.rejection is not None
        _feed(page, [{"kind": "rejected", "command_id": "x1", "code": out.rejection.code,
                      "reason": out.rejection.reason, "view": None, "match": m.mid}])
        page.wait_for_selector(f"[data-status][data-code='{out.rejection.code}']")
        assert page.evaluate(shown) == []  # the refusal cleared them
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("locale, words", [("zh-CN", "超时两次"), ("en-US", "after 2 timeouts")])
def test_the_trusteeship_words_name_the_rooms_timeouts(browser, site, locale: str, words: str) -> None:
    """R-13.1: a room whose trusteeship starts after 2 timeouts says 2, not the default 3, in
    the timeout notice, the badge and the explanation."""
    from engine.match.commands import TurnTimeout

    quick = {**next(r for r in __import__("gateway.web", fromlist=["x"]).room_list(None) if r["name"] == "points"),
             "name": "quick", "timeouts_before_trustee": 2}
    _Site.extra_rooms = [quick]
    try:
        context, page, errors = _open(browser, site, locale)
        # the room's config has reached the page (the room picker lists it) before any message:
        # a timeout fed before the config answered was worded with the default 3
        page.wait_for_selector(".rooms [data-room=quick]", state="attached")
    finally:
        _Site.extra_rooms = []
    try:
        m = Match(config=load_config("points").model_copy(update={"timeouts_before_trustee": 2}))
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                     {"kind": "lobby", "state": "seated", "room": "quick", "table": "t1", "match": m.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}] + m.start())
        page.wait_for_selector("#hand [data-card]")
        while m.state.seats[m.state.turn].player != "alice":
            _feed(page, m.step(1))
        _feed(page, m.run(TurnTimeout(command_id="to1", match_id=m.mid, version=m.state.version)))
        lang = LOCALES[locale]
        first = CATALOGUES[lang]["notice.timeout.one"].replace("{n}", "1").replace(
            "{limit}", CATALOGUES[lang]["num.2"])
        page.wait_for_function("t => [...document.querySelectorAll('[data-notice]')].some(e => e.textContent === t)",
                               arg=first)
        while m.state.seats[m.state.turn].player != "alice":
            _feed(page, m.step(1))
        _feed(page, m.run(TurnTimeout(command_id="to2", match_id=m.mid, version=m.state.version)))
        assert m.state.seats[0].trusteed  # the engine: after 2
        page.wait_for_selector("[data-explain='timeouts']")
        # the warning "after 2 ..." is gone once auto-play is on: only the trusteeship's notice
        assert page.eval_on_selector_all("#notices [data-notice='timeout']", "els => els.length") == 0
        assert page.text_content("[data-notice='trustee-alice']") == CATALOGUES[lang]["notice.trusteeOnYou"]
        assert words in page.text_content("[data-explain]").replace("超時", "超时")
        badge = page.text_content("#mine-badges [data-badge=trustee]")
        assert CATALOGUES[lang]["num.2"] in badge and CATALOGUES[lang]["num.3"] not in badge
        assert not errors, errors
    finally:
        context.close()


def test_the_lobby_picks_the_room_this_browser_joined_last(browser, site) -> None:
    """The lobby's choice is the room this browser last joined (``shuangkou-room``), else the
    first room that seats the player -- never simply the first name in the list (a room an
    operator adds that sorts first would become everyone's default: a new user's finding)."""
    context = browser.new_context(locale="en-US", viewport={"width": 375, "height": 812})
    try:
        page = context.new_page()
        page.add_init_script(FAKE_SOCKET)
        page.add_init_script("localStorage.setItem('shuangkou-room', 'wealth')")
        page.goto(f"{site}/?token={_token('alice')}")
        page.wait_for_function("() => !!window.__ws && window.__ws.readyState === 1")
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"}])
        page.wait_for_selector("#lobby input[name=room][value=wealth]:checked")
        page.click("#lobby [data-room=points]")
        page.click("[data-action=join]")
        assert page.evaluate("localStorage.getItem('shuangkou-room')") == "points"
        assert [m for m in page.evaluate("window.__sent") if m["type"] == "Join"][-1]["room"] == "points"
    finally:
        context.close()


def test_the_leaderboard_without_a_ranked_room_shows_only_its_words(browser, site) -> None:
    """No room is ranked: the page says so, with no empty room picker, season box or table."""
    context = browser.new_context(locale="zh-CN", viewport={"width": 390, "height": 844})
    try:
        page = context.new_page()
        page.goto(f"{site}/static/leaderboard.html")
        page.wait_for_selector("#board[data-loaded=true]")
        assert page.text_content("[data-status]") == CATALOGUES["zh-Hans"]["board.noRoom"]
        assert page.is_hidden("#board-form") and page.is_hidden("[data-board=top]")
    finally:
        context.close()


# ---- the scene (issue 36) ------------------------------------------------------------------------

NAMES = ("小明", "Bob", "Bo")  # the names and their avatars' initials: the only words of another language


def _box(page, sel: str) -> dict:
    return page.eval_on_selector(sel, "e => { const r = e.getBoundingClientRect();"
                                      " return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; }")


def _to_the_result(page, m: Match) -> None:
    """Alice seated at ``m``, played to its end, and its settlement on show."""
    _seat(page, m)
    _feed(page, m.step(400))
    assert m.state.phase == "finished"
    _feed(page, [m.settled()])
    page.wait_for_selector("[data-settlement] [data-score='alice']")


@pytest.mark.parametrize("room", ["points", "capped-coins"])
@pytest.mark.parametrize("locale", ["zh-CN", "en-US"])
def test_an_escape_is_settled_in_the_pages_words(browser, site, locale: str, room: str) -> None:
    """Bob leaves mid-match (R-12.2 points forfeit; R-12.3 in a coin room whose escape costs
    100·X, more than his 150 coins: R-11.2 caps what he pays): alice's result says what he owes,
    the cap, and what she receives in signs and the page's words, never the command line's
    English ("floor")."""
    from engine.match.commands import Escape

    lang = LOCALES[locale]
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        if room == "points":
            m = Match(f"esc-{lang}")
        else:
            coins = load_config("wealth").model_copy(update={"escape_penalty_multiple": 100})
            m = Match(f"esc-{lang}-cap", coins, {"alice": 5000, "bob": 150})
        _seat(page, m)
        _feed(page, m.step(6) + m.run(Escape(command_id="bye", match_id=m.mid, player="bob")))
        assert m.state.phase == "finished" and m.state.finished.reason == "escape"
        msg = m.settled()
        _feed(page, [msg])
        page.wait_for_selector("[data-settlement] [data-score='alice']")
        page.click("[data-settlement] details summary")
        esc = msg["breakdown"]["escape"]
        owed, got = page.text_content("[data-term=escape]"), page.text_content("[data-term=received]")
        assert owed == esc["formula"], owed
        ratio = f"{esc['transfer_ratio']:g}"
        assert got == f"⌊{esc['paid']} × {ratio}⌋ = {esc['received']}" and "floor" not in got, got
        assert int(page.get_attribute("[data-score='alice']", "data-score-value")) == esc["received"]
        cap = msg["breakdown"].get("cap")
        if room == "points":
            assert cap is None and page.locator("[data-term=cap]").count() == 0
        else:
            assert cap["applied"] and cap["paid"] == esc["paid"] == 150 < cap["owed"] == esc["owed"], cap
            words = CATALOGUES[lang]["settle.capText"].format(payer="Bob", owed=cap["owed"], paid=cap["paid"])
            assert page.text_content("[data-term=cap]") == words
        if lang != "en":
            rows = page.eval_on_selector_all("[data-settlement] details tr", "els => els.map(e => e.textContent)")
            assert not [r for r in rows if re.search(r"[A-Za-z]{2,}", r.replace("Bob", ""))], rows  # names are data
        _shot(page, f"table-{lang}-escape-{room}")
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_the_table_is_a_scene_at_each_size(browser, site, locale: str) -> None:
    """The opponent's seat (avatar, name, level) at the top, the trick in the middle, the hand
    fanned at the bottom with large overlapping cards that lift when selected; in the Chinese
    pages no English word but the names; screenshots at each size."""
    lang = LOCALES[locale]
    words = CATALOGUES[lang]
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        m = Match(f"scene-{lang}")
        _seat(page, m)
        _feed(page, m.step(3))
        if m.state.seats[m.state.turn].player != "alice":
            _feed(page, m.step(1))
        page.wait_for_selector("#table[data-your-turn=true]")
        ids = [int(x) for x in page.eval_on_selector_all("#hand [data-card]", "els => els.map(e => e.dataset.card)")]
        page.click(f"#hand [data-card='{ids[-1]}']")
        page.wait_for_function("() => !document.querySelector('[data-play-why]').textContent")
        for width, height in SIZES:
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_timeout(200)
            _no_overflow(page)
            opp, last, hand = _box(page, "[data-seat=top]"), _box(page, "#last"), _box(page, "#hand")
            assert opp["bottom"] <= last["top"] + 1 and last["bottom"] <= hand["top"] + 1, (width, opp, last, hand)
            assert hand["bottom"] <= height + 1, (width, hand)  # the whole hand on screen, no scrolling
            # each card's corner is in sight: the next card starts after the rank and suit
            face = _box(page, f"#hand [data-card='{ids[0]}'] .card")
            slot = _box(page, f"#hand [data-card='{ids[0]}']")
            assert face["right"] - face["left"] >= 48 and face["bottom"] - face["top"] >= 70  # large cards
            assert slot["right"] - slot["left"] < face["right"] - face["left"]  # they overlap
            lifted, flat = _box(page, f"#hand [data-card='{ids[-1]}']"), _box(page, f"#hand [data-card='{ids[-2]}']")
            assert lifted["top"] < flat["top"] - 8  # the selected card lifts
            play = _box(page, "[data-action=play]")
            assert play["bottom"] <= hand["top"] + 14  # the buttons float above the hand
        for seat, player in (("top", "bob"), ("bottom", "alice")):
            assert page.get_attribute(f"[data-seat={seat}]", "data-player") == player
            assert page.get_attribute(f"[data-seat={seat}] [data-avatar]", "data-avatar") == player
            assert page.locator(f"[data-seat={seat}] [data-avatar] svg text").count() == 1
        assert page.text_content("[data-seat=top] [data-avatar] text") == "Bo"
        assert page.text_content("[data-seat=bottom] [data-avatar] text") == "小"
        level = m.state.seats[m.state.seat_of("bob")].level
        assert page.text_content("#opp-level") == words["level.points"].replace("{level}", str(level))
        # the commitment folds into the info icon
        assert page.is_visible("[data-action=fair-info]") and page.is_hidden("[data-commitment]")
        page.click("[data-action=fair-info]")
        assert page.is_visible("[data-commitment]") and page.is_visible("[data-fair-panel]")
        assert re.fullmatch(r"[0-9a-f]{64}", page.text_content("[data-commitment]"))
        page.keyboard.press("Escape")
        assert page.is_hidden("[data-fair-panel]")
        if lang != "en":
            text = _visible_text(page)
            for name in NAMES:
                text = text.replace(name, "")
            assert not re.findall(r"[A-Za-z]{2,}", text), re.findall(r"[A-Za-z]{2,}", text)
        _shot(page, f"table-{lang}-play")
        page.click("[data-action=fair-info]")
        _shot(page, f"table-{lang}-fair")
        page.keyboard.press("Escape")
        page.click("#opp-level")
        assert page.is_visible("[data-level-table] tr[data-level-row='16']")
        _shot(page, f"table-{lang}-level")
        page.keyboard.press("Escape")
        page.click("[data-action=history]")
        assert page.is_visible("[data-history]")
        assert page.locator("[data-history] [data-history-entry]").count() >= 3
        _shot(page, f"table-{lang}-history")
        assert not errors, errors
    finally:
        context.close()


def _hand_order(page) -> list[int]:
    return [int(x) for x in page.eval_on_selector_all("#hand [data-card]", "els => els.map(e => e.dataset.card)")]


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_arrange_groups_the_hand_and_back(browser, site, locale: str) -> None:
    """理牌 ([data-action=arrange]) shows the hand in the groups of POST /api/arrange (each a
    [data-group=<kind>]), pressed again the rank order; the choice survives a reload."""
    from engine.rules.cards import sort_cards
    from gateway import web

    lang = LOCALES[locale]
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        m = Match(f"arrange-{lang}")
        _seat(page, m)
        hand = list(m.state.seats[m.state.seat_of("alice")].hand)
        assert _hand_order(page) == list(sort_cards(hand))
        assert page.get_attribute("#hand", "data-arranged") == "rank"
        page.click(f"#hand [data-card='{_hand_order(page)[0]}']")
        page.click("[data-action=arrange]")
        page.wait_for_selector("#hand[data-arranged=groups]")
        assert page.get_attribute("[data-action=arrange]", "data-arrange") == "groups"
        assert page.get_attribute("[data-action=arrange]", "aria-pressed") == "true"
        want = web.arrange_for({"cards": hand, "room": "points"})["groups"]
        shown = page.eval_on_selector_all("#hand [data-group]", "els => els.map(g => ({kind: g.dataset.group,"
                                          " cards: [...g.querySelectorAll('[data-card]')].map(c => Number(c.dataset.card))}))")
        assert shown == want
        assert page.locator("#hand [data-card][aria-pressed=true]").count() == 1  # the selection stays
        _no_overflow(page)
        _shot(page, f"table-{lang}-arranged")
        page.reload()  # the choice is remembered
        page.wait_for_function("() => !!window.__ws && window.__ws.readyState === 1")
        _seat(page, m)
        page.wait_for_selector("#hand[data-arranged=groups]")
        page.click("[data-action=arrange]")
        page.wait_for_selector("#hand[data-arranged=rank]")
        assert page.locator("#hand [data-group]").count() == 0
        assert _hand_order(page) == list(sort_cards(hand))
        assert not errors, errors
    finally:
        context.close()


def _drawer(page) -> list[tuple]:
    return [tuple(x) for x in page.eval_on_selector_all(
        "[data-history] [data-history-entry]",
        "els => els.map(e => [e.dataset.historyEntry, e.dataset.player || '',"
        " [...e.querySelectorAll('[data-history-card]')].map(c => Number(c.dataset.historyCard))])")]


def test_the_trick_history_survives_a_reload(browser, site) -> None:
    """The drawer ([data-history]) lists every play so far, the newest first; after a reload the
    page has only the view (its ``history``) and the drawer lists the same plays and passes."""
    context, page, errors = _open(browser, site, "zh-CN", reduced_motion="reduce")
    try:
        m = Match("history-1")
        _seat(page, m)
        for _ in range(60):  # into the third trick: two tricks that ended with a pass
            if m.state.trick >= 3:
                break
            _feed(page, m.step(1))
        assert m.state.phase == "playing" and m.state.trick >= 3
        page.click("[data-action=history]")
        page.wait_for_selector("[data-history]:not([hidden])")
        before = _drawer(page)
        plays = [e for e in before if e[0] in ("play", "bomb")]
        assert len(plays) == len(m.state.history) and any(e[0] == "pass" for e in before)
        newest = m.state.history[-1]
        assert before[0] == ("pass", m.state.seats[1 - newest.seat].player, [])  # the pass that ended trick 2
        assert plays[0][1:] == (m.state.seats[newest.seat].player, sorted(newest.cards))
        page.click("[data-action=history-close]")
        assert page.is_hidden("[data-history]")
        page.reload()
        page.wait_for_function("() => !!window.__ws && window.__ws.readyState === 1")
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                     {"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m.mid},
                     {"kind": "update", "match": m.mid, "version": m.state.version, "events": [],
                      "view": json.loads(json.dumps(view_for(m.state, "alice"))), "names": {"alice": "小明", "bob": "Bob"}}])
        page.wait_for_selector("#hand [data-card]")
        page.click("[data-action=history]")
        assert _drawer(page) == before
        _shot(page, "table-zh-Hans-history-reloaded")
        assert not errors, errors
    finally:
        context.close()


def _answer(data: dict):
    """A Playwright route handler answering ``data`` as JSON."""
    body = json.dumps(data)
    return lambda route: route.fulfill(status=200, content_type="application/json", body=body)


def test_the_level_badge_is_hidden_where_levels_change_nothing(browser, site) -> None:
    """In a room whose R-11 levels all have the same base X the level changes nothing (R-8.2):
    no badge.  The built-in points room's levels do: the badge names itself and shows the table."""
    flat = [{"name": "points", "mode": "points", "levels": [{"level": 0, "need": 0, "base": 5},
                                                          {"level": 1, "need": 50, "base": 5}]}]
    for rooms, shown in ((flat, False), (None, True)):
        context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 800})
        page = context.new_page()
        try:
            if rooms is not None:
                page.route("**/api/client-config", _answer({"dev": False, "bots": False, "rooms": rooms}))
                page.route("**/api/rooms", _answer({"rooms": [{**x, "balance": 0, "admits": True} for x in rooms],
                                                    "balances": {"points": 0}}))
            page.add_init_script(FAKE_SOCKET)
            page.goto(f"{site}/?token={_token('alice')}")
            page.wait_for_function("() => !!window.__ws && window.__ws.readyState === 1 && !!document.documentElement.lang")
            _seat(page, Match(f"levels-{shown}"))
            assert page.is_visible("#opp-level") == shown and page.is_visible("#mine-level") == shown
            if shown:
                assert page.get_attribute("#opp-level", "data-level") == "0"
                assert page.text_content("#opp-level") == "Points level 0"
                assert "16: 2000000 → 800" in page.get_attribute("#opp-level", "title")
        finally:
            context.close()


@pytest.mark.parametrize("size", SIZES[:2], ids=["portrait", "landscape"])
def test_every_card_of_the_fan_takes_a_tap(browser, site, size: tuple[int, int]) -> None:
    """Overlapping (and, in portrait, in rows over each other) every card still takes a tap where
    it shows: Playwright clicks each slot's centre, which fails when another card covers it."""
    context, page, errors = _open(browser, site, "zh-CN", reduced_motion="reduce")
    try:
        page.set_viewport_size({"width": size[0], "height": size[1]})
        m = Match(f"taps-{size[0]}")
        _seat(page, m)
        page.wait_for_timeout(150)
        ids = _hand_order(page)
        assert len(ids) == 27
        for cid in reversed(ids):  # select all from the front row: a lifted card over a flat one behind it
            page.click(f"#hand [data-card='{cid}']", timeout=3_000)
        assert page.locator("#hand [data-card][aria-pressed=true]").count() == 27
        for cid in ids:
            page.click(f"#hand [data-card='{cid}']", timeout=3_000)
        assert page.locator("#hand [data-card][aria-pressed=true]").count() == 0
        assert not errors, errors
    finally:
        context.close()


#: page.evaluate(_WATCH): from now on window.__writes lists each change of the page's nodes as
#: [the nearest id, nodes added, nodes removed] (a text written again is one removed and one added)
_WATCH = """() => {
  window.__writes = [];
  if (window.__watch) window.__watch.disconnect();
  window.__watch = new MutationObserver((rs) => { for (const r of rs) {
    let e = r.target.nodeType === 1 ? r.target : r.target.parentElement;
    while (e && !e.id) e = e.parentElement;
    window.__writes.push([e ? e.id : '', r.addedNodes.length, r.removedNodes.length]);
  } });
  window.__watch.observe(document.body, { subtree: true, childList: true, characterData: true });
}"""


def test_an_update_redraws_only_what_it_changes(browser, site) -> None:
    """Each node an update writes costs the page a layout, on a phone a visible one. The
    opponent's move writes none of the player's cards, no name and nothing of the top bar, and
    takes from the opponent's seat only the backs of the cards played; the player's own play
    redraws the hand. A page that meets the match dealt (a reload) fans the hand over the hand's
    own width, though the match was hidden until that update."""
    context, page, errors = _open(browser, site, "en-US")  # a desktop: one row, as wide as the hand
    try:
        m = Match("writes-1")
        dealt = m.start()[-1]  # the view after the deal, the first the page hears of the match
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                     {"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}, dealt])
        page.wait_for_selector("#hand [data-card]")
        fan = page.evaluate("""() => {
            const h = document.querySelector('#hand').getBoundingClientRect();
            const r = [...document.querySelectorAll('#hand [data-card]')].map((c) => c.getBoundingClientRect());
            return [h.left, h.right, Math.min(...r.map((x) => x.left)), Math.max(...r.map((x) => x.right))];
        }""")
        assert fan[0] - 1 <= fan[2] and fan[3] <= fan[1] + 1, fan  # the fan within the hand's box
        seen = {"bob": 0, "alice": 0}
        for _ in range(80):
            s = m.state
            if s.phase != "playing" or min(seen.values()) >= 3:
                break
            mover = s.seats[s.turn].player
            before = {x.player: len(x.hand) for x in s.seats}
            page.evaluate(_WATCH)
            page.evaluate("(ms) => { for (const m of ms) window.__feed(m); }", m.step(1))
            writes = page.evaluate("() => window.__writes")
            where = {w[0] for w in writes}
            assert not {"me-name", "me-balance", "opp-name", "mine-name"} & where, writes
            after = {x.player: len(x.hand) for x in m.state.seats}
            if m.state.phase != "playing":
                break
            if mover == "bob":
                assert "hand" not in where, writes  # alice's cards as they were
                backs = [w for w in writes if w[0] == "opp-backs"]
                played = min(before["bob"], 27) - min(after["bob"], 27)
                assert (sum(w[1] for w in backs), sum(w[2] for w in backs)) == (0, played), writes
                seen["bob"] += 1
            elif after["alice"] < before["alice"]:
                assert "hand" in where, writes  # her cards played leave the fan
                seen["alice"] += 1
        assert min(seen.values()) >= 3, seen
        assert not errors, errors
    finally:
        context.close()


def test_the_cards_raised_are_the_ones_play_sends_after_taps_and_a_hint(browser, site) -> None:
    """The fan is kept while it shows the same cards, and which of them are raised is the
    selection's: a card tapped down and another tapped up, then Hint choosing what it chose
    before, raise the hint's cards, and Play sends exactly the cards raised."""
    context, page, errors = _open(browser, site, "en-US")
    try:
        _at_alices_turn(page)
        raised = "() => [...document.querySelectorAll('#hand [data-card][aria-pressed=true]')].map((c) => +c.dataset.card)"
        page.click("[data-action=hint]")
        page.wait_for_function(f"() => ({raised})().length > 0")
        chosen = sorted(page.evaluate(raised))
        other = next(c for c in _hand_order(page) if c not in chosen)
        page.click(f"#hand [data-card='{chosen[0]}']")
        page.click(f"#hand [data-card='{other}']")
        assert sorted(page.evaluate(raised)) == sorted([*chosen[1:], other])
        page.click("[data-action=hint]")  # the same hand, the same play in front: the same choice
        page.wait_for_function(f"(want) => JSON.stringify(({raised})().sort((a, b) => a - b)) === JSON.stringify(want)",
                               arg=chosen, timeout=5_000)
        page.wait_for_selector("[data-action=play]:not([disabled])")
        page.click("[data-action=play]")
        plays = [x for x in page.evaluate("window.__sent") if x["type"] == "Play"]
        assert [sorted(p["cards"]) for p in plays] == [chosen]
        assert not errors, errors
    finally:
        context.close()


def test_a_paused_clock_is_shown_and_the_deadline_moves(browser, site) -> None:
    """Issue 35 §4: a ClockExtended update shows the paused-clock notice and the turn clock
    counts down to the moved deadline (the view's and the brief's)."""
    from engine.match.commands import ExtendClock

    context, page, errors = _open(browser, site, "en-US")
    try:
        m = Match()
        _seat(page, m)
        before = m.state.deadline()
        _feed(page, m.run(ExtendClock(command_id="x1", match_id=m.mid, version=m.state.version,
                                      by_ms=60_000, reason="unpublished")))
        page.wait_for_selector("[data-notice='clock']")
        words = CATALOGUES["en"]
        assert page.text_content("[data-notice='clock']") == words["notice.clockPaused"].replace("{s}", "60")
        assert m.state.deadline().at_ms == before.at_ms + 60_000
        # the clock shows the moved deadline: more than the room's 15 s turn is left
        page.wait_for_function("() => /\\d+/.test(document.querySelector('#clock-n').textContent)")
        left = int(re.search(r"\d+", page.text_content("#clock-n")).group())
        assert left > load_config("points").turn_seconds
        assert not errors, errors
    finally:
        context.close()


def test_a_running_clock_repaints_a_few_times_a_second_never_every_frame(browser, site) -> None:
    """A page at a table while its clock runs: the clock starts no transition or animation (one
    would repaint every frame for as long as the player sits there), and its words are written
    again only when they change, once a second."""
    context, page, errors = _open(browser, site, "en-US")  # motion as the player's device has it
    try:
        m = Match()
        _seat(page, m)
        page.wait_for_function("() => /\\d+/.test(document.querySelector('#clock-n').textContent)")
        assert int(re.search(r"\d+", page.text_content("#clock-n")).group()) > 3  # running, not run out
        seen = page.evaluate("""() => new Promise((done) => {
            const words = document.querySelector('#clock-n');
            let writes = 0, looks = 0;
            const moving = new Set();
            const watch = new MutationObserver((ms) => { writes += ms.length; });
            watch.observe(words, { childList: true, characterData: true, subtree: true });
            const look = () => {
              for (const a of document.getAnimations()) {
                const el = a.effect && a.effect.target;
                if (a.playState === 'running' && el && el.closest('#clock')) moving.add(el.id || el.tagName);
              }
              if (++looks < 20) return setTimeout(look, 100);
              watch.disconnect();
              done({ writes, moving: [...moving] });
            };
            look();
        })""")
        assert seen["moving"] == [], seen  # looked at 20 times over 2 s
        assert 1 <= seen["writes"] <= 3, seen  # 2 s of a clock that ticks four times a second
        assert not errors, errors
    finally:
        context.close()


def _overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] - 1 and b["left"] < a["right"] - 1 and a["top"] < b["bottom"] - 1 and b["top"] < a["bottom"] - 1


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_ready_is_a_wide_button_clear_of_the_players_seat(browser, site, locale: str) -> None:
    """Before the deal Ready floats at the bottom as a wide button (not squeezed by the phone's row
    of play buttons) and covers nothing of the player's seat: the name, the level, the "not
    ready" badge stay readable at each size."""
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        m = Match(f"ready-{locale}")
        msgs = m.seat()
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                     {"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}] + msgs)
        page.wait_for_selector("[data-action=ready]:visible")
        page.wait_for_selector("#mine-badges [data-badge]")
        for width, height in SIZES:
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_timeout(200)
            ready, leave = _box(page, "[data-action=ready]"), _box(page, "[data-action=leave]")
            assert ready["right"] - ready["left"] >= 160, (width, ready)
            assert not _overlap(ready, leave), (width, ready, leave)
            for part in ("#mine-avatar", "#mine-name", "#mine-level", "#mine-badges"):
                box = _box(page, part)
                assert not _overlap(ready, box) and not _overlap(leave, box), (width, part, ready, leave, box)
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("reason, noticed", [("left", False), ("not_ready", True)])
def test_a_removal_the_player_did_not_ask_for_is_also_a_notice(browser, site, reason: str, noticed: bool) -> None:
    """The lobby's ``removed`` is said in the status line; a removal the player did not ask for
    (not ready in time) is also a notice, their own Leave only the status line (said once)."""
    cat = CATALOGUES["en"]
    context, page, errors = _open(browser, site, "en-US", reduced_motion="reduce")
    try:
        m = Match(f"removed-{reason}")
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                     {"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}] + m.seat())
        page.wait_for_selector("[data-action=ready]:visible")
        _feed(page, [{"kind": "lobby", "state": "removed", "room": "points", "table": "t1", "match": m.mid,
                      "reason": reason}])
        page.wait_for_selector("#lobby:visible")
        words = cat["status.left"] if reason == "left" else \
            cat["status.removed"].replace("{why}", cat["removed.not_ready"])
        assert page.locator("[data-status]").inner_text() == words
        shown = page.locator("[data-notice=removed]")
        assert (shown.count(), shown.all_inner_texts()) == ((1, [words]) if noticed else (0, []))
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("locale", ["zh-CN", "en-US"])
def test_a_player_stops_waiting_or_leaves_the_table_before_the_deal_never_during_a_hand(
        browser, site, locale: str) -> None:
    """The Leave button (``data-leave``): ``queue`` while the player waits (they stop waiting and
    choose a room again), ``table`` at a table before its deal (beside Ready) until the player is
    ready; none once they are, nor while the hand is played (a Leave then is an escape, R-12.1).  A click sends one Leave and hides the button
    until the answer; the removal's words say which was left."""
    cat = CATALOGUES[LOCALES[locale]]
    lang = LOCALES[locale]
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        leave = page.locator("[data-action=leave]")
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                     {"kind": "lobby", "state": "queued", "room": "points", "table": None, "match": None}])
        leave.wait_for(state="visible")
        assert (leave.get_attribute("data-leave"), leave.inner_text()) == ("queue", cat["btn.leaveQueue"])
        _shot(page, f"leave-queue-{lang}")
        leave.click()
        assert [m["type"] for m in page.evaluate("window.__sent")].count("Leave") == 1
        assert leave.is_hidden() and page.locator("[data-status]").inner_text() == cat["status.leaving"]
        _feed(page, [{"kind": "lobby", "state": "removed", "room": "points", "table": None, "match": None,
                      "reason": "left"}])
        page.wait_for_selector("#lobby:visible")
        assert page.locator("[data-status]").inner_text() == cat["status.leftQueue"] and leave.is_hidden()
        assert page.locator("[data-notice=removed]").count() == 0  # said once, in the status line

        m = Match(f"leave-{locale}")
        # seated, the match's view not here yet (a reload mid-hand looks the same): no Leave, which
        # after the deal would be an escape (R-12.1)
        _feed(page, [{"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}])
        page.wait_for_selector("#lobby", state="hidden")
        assert leave.is_hidden()
        msgs = m.seat()
        _feed(page, [{"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}] + msgs)
        page.wait_for_selector("[data-action=ready]:visible")
        leave.wait_for(state="visible")
        assert (leave.get_attribute("data-leave"), leave.inner_text()) == ("table", cat["btn.leaveTable"])
        _shot(page, f"leave-table-{lang}")
        # ready: bob's Ready deals at once, and a Leave in flight would land after it (an escape)
        _feed(page, m.run(Ready(command_id="c4", match_id=m.mid, player="alice")))
        leave.wait_for(state="hidden")
        assert leave.get_attribute("data-leave") == ""
        _feed(page, m.run(Ready(command_id="c5", match_id=m.mid, player="bob")))
        page.wait_for_selector("#hand [data-card]")
        assert leave.is_hidden()
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("locale", ["zh-CN", "en-US"])
def test_leaving_from_a_result_goes_back_to_the_lobby_and_a_cooldown_says_its_wait(
        browser, site, locale: str) -> None:
    """Found by a new user's play (2026-12-06): a Leave from a result held until Ready left the
    result over the lobby (on a phone Join could not be tapped until a reload), and the leave
    cooldown's refusal never said how long.  Now the removal takes the result off the page, the
    cooldown says its seconds (``retry_after_ms`` rounded up), and a player is never told of their
    own removal as of someone else's ("小明 left the table" on 小明's page)."""
    from engine.match.commands import Leave
    from engine.rules.moves import legal_plays, pick_cards

    cat = CATALOGUES[LOCALES[locale]]
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce",
                                  viewport={"width": 390, "height": 844})
    try:
        m = Match(f"leave-result-{locale}")
        _seat(page, m)
        for i in range(8):  # a play in any order is on the table as the history drawer shows it (by rank)
            st = m.state
            seat = st.seats[st.turn]
            if st.to_beat is None:  # a lead: the longest play the hand has, its cards from the highest
                combo = max(legal_plays(seat.hand), key=lambda c: sum(c.counts))
                cards: tuple[int, ...] | None = pick_cards(seat.hand, combo.counts)
            else:
                play = trustee_choice(list(seat.hand), st.to_beat.combo)
                cards = None if play is None else tuple(play.cards)
            _feed(page, m.run(Pass(command_id=f"o{i}", match_id=m.mid, player=seat.player) if cards is None else
                              Play(command_id=f"o{i}", match_id=m.mid, player=seat.player,
                                   cards=tuple(reversed(cards)))))
            page.wait_for_function("v => document.querySelector('#table').dataset.version === String(v)",
                                   arg=m.state.version)
            table = page.eval_on_selector_all("#last-cards [data-table-card]", "els => els.map(e => e.dataset.tableCard)")
            logged = page.evaluate("() => { const li = [...document.querySelectorAll('#log li')]"
                                   ".find((x) => x.querySelector('[data-history-card]'));"
                                   " return li ? [...li.querySelectorAll('[data-history-card]')]"
                                   ".map((e) => e.dataset.historyCard) : []; }")
            assert not table or table == logged, (table, logged)
        _feed(page, m.step(400))
        nxt = Match("t1-2")  # the table's next match, seated, not dealt without alice's Ready
        msgs = nxt.seat()
        _feed(page, [m.settled(), {"kind": "lobby", "state": "seated", "room": "points", "table": "t1",
                                   "match": nxt.mid, "names": {"alice": "小明", "bob": "Bob"}}] + msgs)
        page.wait_for_selector("[data-settlement] [data-score='alice']")
        leave = page.locator("[data-action=leave]")
        leave.wait_for(state="visible")  # the result held until Ready
        leave.click()
        _feed(page, [{"kind": "lobby", "state": "removed", "room": "points", "table": "t1", "match": nxt.mid,
                      "reason": "left"}])
        page.wait_for_selector("#lobby:visible")
        page.wait_for_selector("[data-settlement]", state="hidden")
        assert page.locator("[data-status]").inner_text() == cat["status.left"]
        assert page.locator("[data-notice=removed]").count() == 0  # said once, in the status line
        assert page.locator("#log li").count() == 0  # the history of the match left goes too
        page.click("[data-action=join]", timeout=5_000)  # nothing lies over it
        assert [x["type"] for x in page.evaluate("window.__sent")].count("Join") == 1
        _feed(page, [{"kind": "rejected", "code": "cooldown", "command_id": None, "reason": "x",
                      "retry_after_ms": 9_200}])
        page.wait_for_function("w => document.querySelector('[data-status]').textContent === w",
                               arg=cat["refusal.cooldownWait"].replace("{s}", "10"))
        assert page.locator("[data-action=join][data-cooldown]").is_disabled()  # Join waits with it
        # it counts down, and says the lobby's words once a Join is taken again
        _feed(page, [{"kind": "rejected", "code": "cooldown", "command_id": None, "reason": "x",
                      "retry_after_ms": 1_200}])
        page.wait_for_function("w => document.querySelector('[data-status]').textContent === w",
                               arg=cat["refusal.cooldownWait"].replace("{s}", "1"))
        page.wait_for_function("w => document.querySelector('[data-status]').textContent === w",
                               arg=cat["status.chooseRoom"])
        page.wait_for_selector("[data-action=join]:not([data-cooldown]):enabled", timeout=5_000)

        # seated again before a deal: alice's own removal is the lobby's to tell, bob's is a notice
        m2 = Match("leave-notice")
        msgs = m2.seat()
        _feed(page, [{"kind": "lobby", "state": "seated", "room": "points", "table": "t2", "match": m2.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}] + msgs)
        page.wait_for_selector("[data-action=ready]:visible")
        _feed(page, m2.run(Leave(command_id="c4", match_id=m2.mid, player="alice"))
              + m2.run(Leave(command_id="c5", match_id=m2.mid, player="bob")))
        page.wait_for_selector("[data-notice='removed-bob']")
        assert page.locator("[data-notice='removed-alice']").count() == 0

        # seated, not dealt, and the other player left: back in the queue, the empty table goes
        m3 = Match("leave-queued")
        _feed(page, [{"kind": "lobby", "state": "seated", "room": "points", "table": "t3", "match": m3.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}] + m3.seat())
        page.wait_for_selector("[data-action=ready]:visible")
        _feed(page, m3.run(Leave(command_id="c5", match_id=m3.mid, player="bob"))
              + [{"kind": "lobby", "state": "queued", "room": "points", "table": None, "match": None,
                  "reason": "opponent_left"}])
        page.wait_for_function("() => document.querySelector('#table').dataset.phase === 'lobby-queued'")
        assert page.locator("#match").is_hidden()
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_the_result_sheet_scrolls_under_the_top_bar_never_behind_it(browser, site, locale: str) -> None:
    """The end of a match is a sheet that scrolls; it starts under the top bar (which wraps to more
    rows on a phone), so nothing scrolled in it shows through behind the bar's status line and
    buttons."""
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        _to_the_result(page, Match(f"sheet-{locale}"))
        page.click("[data-settlement] details summary")  # the formula open: more to scroll
        for width, height in SIZES:
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_timeout(200)
            page.eval_on_selector("#sheet", "s => { s.scrollTop = s.scrollHeight; }")
            sheet, bar, status = _box(page, "#sheet"), _box(page, ".topbar"), _box(page, "[data-status]")
            assert sheet["top"] >= bar["bottom"] - 1, (width, sheet, bar)
            assert status["bottom"] <= sheet["top"] + 1, (width, status, sheet)
        assert not errors, errors
    finally:
        context.close()


#: a phone of 375×812 as it is met: plain (a desktop browser's device mode), with the 34 px home
#: indicator inset of the phones of that size (viewport-fit=cover), and that inset with the
#: browser's text size set to "very large" (a 24 px default: Ready grows with it)
PHONE_CASES = {"plain": (0, 16), "inset": (34, 16), "inset-large-text": (34, 24)}


@pytest.mark.parametrize("case", sorted(PHONE_CASES))
@pytest.mark.parametrize("locale", ["en-US", "zh-CN"])
def test_the_end_of_a_long_result_is_never_under_ready(browser, site, locale: str, case: str) -> None:
    """On a 375×812 phone the result sheet (the settlement with its formula open, Verify's checks
    under it) ends above the floating Ready button, whatever the phone's bottom inset and the text
    size: scrolled to its end, its last line is above Ready and a tap there reaches it."""
    inset, font = PHONE_CASES[case]
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        cdp = context.new_cdp_session(page)
        cdp.send("Emulation.setSafeAreaInsetsOverride", {"insets": {"bottom": inset}})
        cdp.send("Page.setFontSizes", {"fontSizes": {"standard": font}})
        page.set_viewport_size({"width": 375, "height": 812})
        _to_the_result(page, Match(f"end-{locale}-{case}"))
        m2 = Match(f"end-{locale}-{case}-2")  # the next match is offered: Ready floats over the table
        _feed(page, [{"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m2.mid}]
              + m2.run(CreateMatch(command_id="n1", match_id=m2.mid, config=load_config("points").to_record())))
        page.wait_for_selector("[data-action=ready]:visible")
        page.click("[data-settlement] details summary")  # the formula open: a long result
        page.click("[data-action=verify]")
        page.wait_for_selector("[data-verify-checks] li")
        page.wait_for_timeout(200)
        page.eval_on_selector("#sheet", "s => { s.scrollTop = s.scrollHeight; }")
        page.wait_for_timeout(100)
        ready, sheet = _box(page, "[data-action=ready]"), _box(page, "#sheet")
        panel, last = _box(page, "[data-verify]"), _box(page, "[data-verify-result]")  # the sheet's last panel, line
        assert sheet["bottom"] <= ready["top"] + 0.5, (case, sheet, ready)
        assert panel["bottom"] <= ready["top"] and last["top"] >= sheet["top"], (case, panel, last, ready)
        hit = page.evaluate("""() => { const e = document.querySelector('[data-verify-result]');
            const r = e.getBoundingClientRect(); const h = document.elementFromPoint(r.left + 8, r.bottom - 3);
            return !!h && (h === e || e.contains(h)); }""")
        assert hit, "the last line of the result is covered"
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"table-{LOCALES[locale]}-result-end-{case}-375x812.png"))
        assert not errors, errors
    finally:
        context.close()


#: the played cards' fly-in (fx.js flyIn), swept frame by frame: at each moment a card's box
#: overlaps the "… played" label, what a tap at the middle of the overlap reaches
_SWEEP = """() => {
  const who = document.querySelector('#last-who');
  const cards = [...document.querySelectorAll('#last-cards .card')];
  const anims = cards.flatMap((c) => c.getAnimations());
  anims.forEach((a) => a.pause());
  const end = Math.max(0, ...anims.map((a) => a.effect.getComputedTiming().endTime));
  const out = { anims: anims.length, overlaps: 0, covered: [] };
  const check = (t) => {
    const w = who.getBoundingClientRect();
    for (const c of cards) {
      const r = c.getBoundingClientRect();
      const l = Math.max(r.left, w.left), rt = Math.min(r.right, w.right);
      const tp = Math.max(r.top, w.top), b = Math.min(r.bottom, w.bottom);
      if (rt - l < 1 || b - tp < 1) continue;
      out.overlaps += 1;
      const hit = document.elementFromPoint((l + rt) / 2, (tp + b) / 2);
      if (!(hit && (hit === who || who.contains(hit)))) out.covered.push([t, hit ? hit.outerHTML.slice(0, 60) : null]);
    }
  };
  for (let t = 0; t <= end; t += 8) { anims.forEach((a) => { a.currentTime = t; }); check(t); }
  anims.forEach((a) => a.finish());
  const [overlaps, covered] = [out.overlaps, out.covered.length];
  check('settled');
  out.settled = { overlaps: out.overlaps - overlaps, covered: out.covered.length - covered };
  return out;
}"""


@pytest.mark.parametrize("locale", ["en-US", "zh-CN"])
def test_the_cards_played_never_cover_who_played_them(browser, site, locale: str) -> None:
    """On a 375×812 phone the opponent's cards fly in from the seat above, across the trick's
    "… played" label: at no moment of the flight, and not after it, does a card cover the label
    (a tap on it reaches the label)."""
    from engine.rules.moves import trustee_choice

    context, page, errors = _open(browser, site, locale)  # with the motion
    try:
        page.set_viewport_size({"width": 375, "height": 812})
        m = Match(f"fly-{locale}")
        _seat(page, m)
        flights = 0
        for _ in range(40):
            s = m.state
            if s.phase != "playing" or flights == 3:
                break
            seat = s.seats[s.turn]
            follows = s.to_beat.combo if s.to_beat is not None else None
            if seat.player != "bob" or trustee_choice(list(seat.hand), follows) is None:
                _feed(page, m.step(1))
                continue
            msgs = m.step(1)  # bob plays: his cards fly in from his seat
            page.evaluate("(ms) => { for (const m of ms) window.__feed(m); }", msgs)
            got = page.evaluate(_SWEEP)
            assert got["anims"] > 0 and got["overlaps"] > 0, got  # in flight, they do cross the label
            assert got["covered"] == [], got
            assert got["settled"]["overlaps"] == 0, got  # landed, none is over it
            assert "Bob" in page.text_content("#last-who")
            flights += 1
            page.wait_for_timeout(50)
        assert flights == 3
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"table-{LOCALES[locale]}-trick-label-375x812.png"))
        assert not errors, errors
    finally:
        context.close()


def _series(state: str, **kw) -> dict:
    return {"kind": "series", "state": state, "series_id": "s-vote", "command_id": None, **kw}


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_the_outcome_of_a_vote_to_end_stays_said_in_the_tally(browser, site, locale: str) -> None:
    """A private series (js/private.js): when a vote to end is refused or passes, the dialog closes
    and a line of the series tally ([data-vote-result] = refused / passed) says what came of it, in
    the page's language, who answered (you, the friend, or nobody in time); it stays after the
    notices are gone and further plays, until the next vote opens or the series ends."""
    lang = LOCALES[locale]
    words = CATALOGUES[lang]
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        page.set_viewport_size({"width": 375, "height": 812})
        m = Match("s-vote-1")
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                     _series("tally", hand=0, hands=4, totals={"alice": 0, "bob": 0}),
                     {"kind": "lobby", "state": "seated", "room": "points", "table": "s-vote", "match": m.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}] + m.start())
        page.wait_for_selector("#hand [data-card]")
        page.wait_for_selector("[data-series-tally]:not([hidden])")
        result = "[data-series-tally] [data-vote-result]"
        assert page.is_hidden(result) and page.get_attribute(result, "data-vote-result") == ""
        deadline = 1_800_000_060_000

        # alice asks, Bob plays on: refused, said in the tally, and it lasts
        _feed(page, [_series("vote", by="alice", deadline_ms=deadline)])
        page.wait_for_selector("[data-vote-dialog]:not([hidden])")
        _feed(page, [_series("vote_refused", by="bob", timed_out=False)])
        page.wait_for_selector(f"{result}[data-vote-result=refused]:visible")
        assert page.is_hidden("[data-vote-dialog]")
        assert page.text_content(result) == words["series.voteRefused"].replace("{name}", "Bob")
        assert page.get_attribute(result, "data-answered-by") == "bob"
        assert page.is_visible("[data-action=request-end]")  # and one may ask again
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"private-vote-refused-{lang}-375x812.png"))
        _feed(page, m.step(2))
        page.wait_for_timeout(5000)  # longer than a notice lives
        assert page.is_visible(f"{result}[data-vote-result=refused]")
        # its words follow a change of language
        nxt = {"zh-Hans": "zh-Hant", "zh-Hant": "en", "en": "zh-Hans"}[lang]
        page.click("[data-action=lang]")
        page.wait_for_function("l => document.documentElement.lang === l", arg=nxt)
        assert page.text_content(result) == CATALOGUES[nxt]["series.voteRefused"].replace("{name}", "Bob")
        page.click("[data-action=lang]")
        page.click("[data-action=lang]")
        page.wait_for_function("l => document.documentElement.lang === l", arg=lang)

        # Bob asks: a new vote clears the old outcome; alice agrees during the hand: passed
        _feed(page, [_series("vote", by="bob", deadline_ms=deadline)])
        page.wait_for_selector("[data-vote-dialog]:not([hidden]) [data-action=vote-agree]:not([hidden])")
        assert page.is_hidden(result)
        _feed(page, [_series("vote_passed", by="alice", timed_out=False)])
        page.wait_for_selector(f"{result}[data-vote-result=passed]:visible")
        assert page.text_content(result) == words["series.votePassedYou"]
        assert page.is_hidden("[data-action=request-end]")  # passed: nothing left to ask
        page.screenshot(path=str(SHOTS / f"private-vote-passed-{lang}-375x812.png"))
        # nobody answered in time: that counts as yes, and says so
        _feed(page, [_series("vote", by="alice", deadline_ms=deadline),
                     _series("vote_passed", by="bob", timed_out=True)])
        page.wait_for_selector(f"{result}[data-timed-out=true]")
        assert page.text_content(result) == words["series.votePassedTimeout"]

        # the series ends: the standings say why, the tally (and its line) go
        _feed(page, [_series("finished", reason="dissolved", standings={
            "totals": {"alice": 0, "bob": 0}, "per_hand": [], "hands_won": {}, "biggest_bomb": None})])
        page.wait_for_selector("[data-standings]:not([hidden])")
        assert page.is_hidden("[data-series-tally]") and page.is_hidden(result)
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("size", [(390, 844), (375, 667), (844, 390), (1280, 900)])
@pytest.mark.parametrize("locale", ["zh-CN", "en-US"])
def test_a_vote_to_end_during_the_players_turn_hides_no_card_clock_or_action(
        browser, site, locale: str, size: tuple[int, int]) -> None:
    """A vote to end comes while a hand is played, a clock running: the dialog docks under the
    series tally over the opponent's seat (over the top bar on a landscape phone), and the cards
    played, the player's clock (.turn), the actions and the hand stay clear of it and in reach."""
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        width, height = size
        page.set_viewport_size({"width": width, "height": height})
        m = Match("s-vote-1")
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                     _series("tally", hand=1, hands=4, totals={"alice": -40, "bob": 40}),
                     {"kind": "lobby", "state": "seated", "room": "points", "table": "s-vote", "match": m.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}] + m.start())
        page.wait_for_selector("#hand [data-card]")
        assert page.text_content("[data-tally-text]").endswith("小明 -40 · Bob +40")
        if m.state.seats[m.state.turn].player != "alice":
            _feed(page, m.step(1))
        page.wait_for_selector("#table[data-your-turn=true]")
        _feed(page, [_series("vote", by="bob", deadline_ms=int(page.evaluate("Date.now()")) + 60_000)])
        page.wait_for_selector("[data-vote-dialog]:not([hidden]) [data-action=vote-agree]:visible")
        box = page.evaluate(_RECT, "[data-vote-dialog]")
        assert box[0] >= 0 and box[1] >= 0 and box[2] <= width and box[3] <= height, box
        for sel in (".turn", "#last", "#play-actions", "#hand"):
            r = page.evaluate(_RECT, sel)
            apart = box[3] <= r[1] or r[3] <= box[1] or box[2] <= r[0] or r[2] <= box[0]
            assert apart, f"the vote dialog {box} covers {sel} {r} at {width}x{height}"
        for action in ("vote-agree", "vote-refuse"):
            r = page.evaluate(_RECT, f"[data-action={action}]")
            assert r[3] - r[1] >= 34 and r[2] - r[0] >= 44, (action, r)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"private-vote-turn-{LOCALES[locale]}-{width}x{height}.png"))
        page.click("[data-action=vote-refuse]")
        page.wait_for_function("() => window.__sent.some(m => m.type === 'VoteEnd' && m.agree === false)")
        assert not errors, errors
    finally:
        context.close()


def test_two_quick_presses_of_the_language_switch_move_two_steps(browser, site) -> None:
    """The language switch pressed twice before the first catalogue has loaded (both presses in
    one task: no load can finish between them) ends two languages on, zh-Hans → zh-Hant → en,
    and the page is worded in it.  Before, both presses started from the language still shown
    and the page stayed one step on (a test pressing it twice in a row failed now and then)."""
    context, page, errors = _open(browser, site, "zh-CN", reduced_motion="reduce")
    try:
        assert page.evaluate("document.documentElement.lang") == "zh-Hans"
        page.evaluate("() => { const b = document.querySelector('[data-action=lang]'); b.click(); b.click(); }")
        page.wait_for_function("() => document.documentElement.lang === 'en'", timeout=5_000)
        page.wait_for_timeout(500)  # both loads done: the later press stays the one shown
        assert page.evaluate("document.documentElement.lang") == "en"
        assert page.text_content("[data-action=lang]") == CATALOGUES["en"]["lang.name"]
        assert not errors, errors
    finally:
        context.close()


def test_a_reload_after_a_passed_vote_offers_no_ask_to_end(browser, site) -> None:
    """A reload during the last hand of a series a vote ended: the tally it gets again says
    ``dissolving`` and the page offers no Ask to end (the engine would ignore it)."""
    context, page, errors = _open(browser, site, "zh-CN", reduced_motion="reduce")
    try:
        m = Match("s-end-1")
        for dissolving in (False, True):
            _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                         _series("tally", hand=1, hands=4, totals={"alice": 0, "bob": 0}, dissolving=dissolving),
                         {"kind": "lobby", "state": "seated", "room": "points", "table": "s-end", "match": m.mid,
                          "names": {"alice": "小明", "bob": "Bob"}}] + (m.start() if not dissolving else []))
            page.wait_for_selector("[data-series-tally]:not([hidden])")
            assert page.is_hidden("[data-action=request-end]") == dissolving, dissolving
        assert not errors, errors
    finally:
        context.close()


def test_avatar_initials_are_letters_of_the_name() -> None:
    """The avatar's initials (js/avatar.js initialsOf, run in Node): a CJK name's first character,
    the first letters of a Latin name's first two words, never a separator such as the "·" of
    "bot · hard"."""
    import shutil
    import subprocess

    node = shutil.which("node")
    assert node, "node is needed"
    table = {"bot · hard": "BH", "机器人 · 困难": "机", "小明": "小", "Bob": "Bo", "alice_b": "AB",
             "·小明": "小", "Émile Zola": "ÉZ", " x ": "X"}
    script = (f"import({json.dumps((STATIC / 'js' / 'avatar.js').as_uri())}).then(m => console.log(JSON.stringify("
              f"{json.dumps(list(table))}.map(m.initialsOf))))")
    out = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert dict(zip(table, json.loads(out.stdout))) == table


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_a_match_abandoned_before_the_deal_says_the_player_waits_for_an_opponent(browser, site, locale: str) -> None:
    """The opponent was not ready in time (R-13.2): the match is abandoned and the lobby queues the
    player again (``opponent_left``); the status line says so instead of going blank."""
    from engine.match.commands import ReadyTimeout

    lang = LOCALES[locale]
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        m = Match(f"abandoned-{locale}")
        msgs = m.seat()
        msgs += m.run(Ready(command_id="c4", match_id=m.mid, player="alice"))
        _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                     {"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": m.mid,
                      "names": {"alice": "小明", "bob": "Bob"}}] + msgs)
        page.wait_for_selector("#mine-badges [data-badge=ready]")
        _feed(page, m.run(ReadyTimeout(command_id="c5", match_id=m.mid, version=m.state.version)))
        assert m.state.phase == "abandoned"
        _feed(page, [{"kind": "lobby", "state": "queued", "room": "points", "table": None, "match": None,
                      "reason": "opponent_left", "bot_level": None}])
        want = CATALOGUES[lang]["status.queued"].replace("{room}", CATALOGUES[lang]["mode.points"])
        page.wait_for_function("w => document.querySelector('[data-status]').textContent === w", arg=want)
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_the_fairness_panel_is_punctuated_in_the_pages_language(browser, site, locale: str) -> None:
    """The label over the commitment's hex comes whole from the catalogue: 承诺： / 承諾： with the
    full-width colon of the Chinese pages, never an ASCII one added by the page."""
    lang = LOCALES[locale]
    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        _seat(page, Match(f"fair-label-{locale}"))
        page.click("[data-action=fair-info]")
        label = page.text_content("[data-fair-panel] p.muted").strip()
        assert label == CATALOGUES[lang]["fair.commitment"], label
        if lang != "en":
            assert label.endswith("：") and ":" not in page.text_content("[data-fair-panel]")
        assert not errors, errors
    finally:
        context.close()


@pytest.mark.parametrize("viewport", [(375, 812), (812, 375)])
@pytest.mark.parametrize("locale", ["en-US", "zh-CN"])
def test_a_twelve_card_play_fits_the_phone(browser, site, locale: str, viewport: tuple[int, int]) -> None:
    """The opponent's 12-card straight (3 to A, R-3) on a phone, upright and sideways: every card of
    the trick is on the screen, the page does not scroll sideways, and the cards stay in order.
    Before, each card kept 58 % of its width and the straight ran 60 px past a 375 px screen."""
    import copy

    from engine.rules import classify, parse_cards

    context, page, errors = _open(browser, site, locale, reduced_motion="reduce")
    try:
        page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
        m = Match(f"long-{locale}-{viewport[0]}")
        _seat(page, m)
        msgs = m.step(2)
        _feed(page, msgs)
        msg = copy.deepcopy(msgs[-1])
        ids = parse_cards("3S 4S 5S 6S 7S 8S 9S 10S JS QS KS AS")
        combo = classify(ids)
        assert combo is not None and combo.kind == "straight"
        msg["version"] = msg["view"]["version"] = msg["version"] + 1
        msg["events"] = []
        msg["view"]["last_play"] = {"player": "bob", "cards": ids, "text": "", "describe": "",
                                    "reading": {"kind": "straight", "rank": "A", "size": 12, "xiang": None,
                                                "chain": None, "regular": None, "m": None, "bomb_sizes": None,
                                                "jokers_as": []}}
        _feed(page, [msg])
        page.wait_for_selector("#last-cards [data-table-card]")
        got = page.evaluate("""() => ({
          cards: [...document.querySelectorAll('#last-cards [data-table-card]')].map((c) => {
            const b = c.getBoundingClientRect(); return [b.left, b.right]; }),
          width: window.innerWidth, scroll: document.scrollingElement.scrollWidth })""")
        assert len(got["cards"]) == 12
        assert got["cards"][0][0] >= 0 and got["cards"][-1][1] <= got["width"], got
        assert got["scroll"] <= got["width"], got
        lefts = [c[0] for c in got["cards"]]
        assert lefts == sorted(lefts) and len(set(lefts)) == 12, got  # in order, each one showing
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"table-{LOCALES[locale]}-long-play-{viewport[0]}x{viewport[1]}.png"))
        assert not errors, errors
    finally:
        context.close()
