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

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        from gateway import web

        if self.path.startswith("/api/client-config"):
            return self._json({"dev": False, "bots": False, "rooms": web.room_list(None)})
        if self.path.startswith("/api/rooms"):
            return self._json({"rooms": [{**r, "balance": 0, "admits": True} for r in web.room_list(None)],
                               "balances": {"points": 0}})
        return super().do_GET()

    def do_POST(self) -> None:  # noqa: N802
        from gateway import web

        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"null")
        fn = {"/api/readings": web.readings_for, "/api/hint": web.hint_for,
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

    def __init__(self, mid: str = "page-1") -> None:
        self.svc = MatchService(InMemoryEventStore(), lambda: 1_800_000_000_000, seeded_random(7))
        self.mid = mid
        self.state = None

    def run(self, cmd) -> list[dict]:
        out = self.svc.execute(cmd)
        assert out.rejection is None, out.rejection
        self.state = out.state
        return [{"kind": "update", "match": self.mid, "version": out.state.version,
                 "events": [json.loads(json.dumps(redact_event(e, "alice", state=out.state))) for e in out.events],
                 "view": json.loads(json.dumps(view_for(out.state, "alice"))),
                 "names": {"alice": "小明", "bob": "Bob"}}]

    def start(self) -> list[dict]:
        msgs = self.run(CreateMatch(command_id="c1", match_id=self.mid, config=load_config("points").to_record()))
        msgs += self.run(Sit(command_id="c2", match_id=self.mid, player="alice"))
        msgs += self.run(Sit(command_id="c3", match_id=self.mid, player="bob"))
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
    context = browser.new_context(locale=locale, viewport={"width": 1280, "height": 900}, **ctx)
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
        m = Match()
        _seat(page, m)
        if m.state.seats[m.state.turn].player != "alice":
            _feed(page, m.step(1))  # bob leads: now it is alice's turn, to follow
        page.wait_for_selector("#table[data-your-turn=true]")
        hand = sorted(m.state.seats[0].hand)
        from engine.rules.cards import rank_of

        by_rank: dict[int, list[int]] = {}
        for c in hand:
            if rank_of(c) < 13:  # no joker: a joker beside a natural card is a wild pair
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


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (375, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(150)  # one layout pass at the new width before the picture
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


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
        _feed(page, m.run(Disconnect(command_id="t3", match_id=m.mid, player="alice"))
              + m.run(Reconnect(command_id="t4", match_id=m.mid, player="alice")))
        page.wait_for_selector("[data-explain='disconnect']")
        text = page.text_content("[data-explain]")
        assert text == words["explain.disconnect"].replace("{s}", "10") and "R-" not in text
        assert page.is_hidden("[data-action=cancel-trustee]")  # the points room: reclaim_after_reconnect = false
        page.wait_for_function("() => !document.querySelector('[data-notice]')")  # transient: they go by themselves
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
