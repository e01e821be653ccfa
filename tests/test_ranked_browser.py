"""Ranked play in the browser (issue 40 §5; docs/RANKED.md): a tier badge beside each name, the
rating change on the settlement panel, the leaderboard page (top 100, me with my neighbours) in the
three languages, with screenshots at the table's three viewports in ``artifacts/screenshots/``.
The page talks to a fake socket and a static site whose ``/api/leaderboard`` is a fixed ladder."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import pytest

from tests.test_fair_browser import FAKE_SOCKET, _feed, _token, chromium, serve_static
from tests.test_table_browser import CATALOGUES, SHOTS, Match, _Site

pytestmark = [pytest.mark.browser]

SIZES = ((375, 812), (812, 375), (1280, 800))
LOCALES = {"zh-CN": "zh-Hans", "zh-TW": "zh-Hant", "en-US": "en"}
TIERS = ["master", "diamond", "platinum", "gold", "silver", "bronze"]
LADDER = [{"rank": i + 1, "player": f"p{i:03d}", "name": None if i == 3 else f"玩家{i}", "rating": 2300 - 12 * i,
           "tier": TIERS[min(i // 20, 5)], "bot": False} for i in range(120)]
LADDER[41] = {**LADDER[41], "player": "alice", "name": "小明"}
LADDER[5] = {**LADDER[5], "player": "bot-5", "name": None, "bot": True}  # a room with rate_bots


def _rooms() -> list[dict]:
    from gateway import web

    return [*web.room_list(None), {"name": "ranked", "mode": "points", "ranked": True, "base": 5, "need": 0}]


class _RankedSite(_Site):
    def do_GET(self) -> None:  # noqa: N802
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/api/client-config":
            return self._json({"dev": False, "bots": False, "rooms": _rooms()})
        if url.path == "/api/rooms":
            return self._json({"rooms": [{**r, "balance": 0, "admits": True} for r in _rooms()],
                               "balances": {"points": 0}})
        if url.path == "/api/leaderboard":
            limit = int(q.get("limit", 100))
            out: dict = {"room": q.get("room"), "season": q.get("season", "2026-12"), "entries": LADDER[:limit]}
            if "players" in q:
                out["players"] = {p: next((e for e in LADDER if e["player"] == p), None) for p in q["players"].split(",")}
            if q.get("around") == "me":
                pos = next(i for i, e in enumerate(LADDER) if e["player"] == "alice")
                out["me"] = {**LADDER[pos], "neighbours": LADDER[pos - 5:pos + 6]}
            return self._json(out)
        return super().do_GET()


@pytest.fixture(scope="module")
def site():
    yield from serve_static(_RankedSite)


@pytest.fixture(scope="module")
def browser():
    yield from chromium()


def _shots(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        # nothing wider than the screen once the layout (and any card's motion) has settled
        page.wait_for_function(f"() => document.documentElement.scrollWidth <= {width + 1}", timeout=5000)
        page.screenshot(path=str(SHOTS / f"{name}-{width}x{height}.png"))


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_tier_badges_and_the_rating_change_on_the_settlement(browser, site, locale: str) -> None:
    lang = LOCALES[locale]
    words = CATALOGUES[lang]
    context = browser.new_context(locale=locale, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script(FAKE_SOCKET)
    page.goto(f"{site}/?token={_token('alice')}")
    page.wait_for_function("() => !!window.__ws && window.__ws.readyState === 1 && !!document.documentElement.lang")
    m = Match("ranked-1")
    _feed(page, [{"kind": "welcome", "player": "alice", "role": "player", "name": "小明"},
                 {"kind": "lobby", "state": "seated", "room": "ranked", "table": "t1", "match": m.mid,
                  "names": {"alice": "小明", "bob": "Bob"}}] + m.start())
    page.wait_for_selector("#hand [data-card]")
    page.wait_for_selector("#mine-badges [data-tier]")
    assert page.get_attribute("#mine-badges [data-tier]", "data-tier") == "platinum"  # alice is 42nd
    assert page.inner_text("#mine-badges [data-tier]") == words["tier.platinum"]
    assert page.query_selector("#opp-badges [data-tier]") is None  # bob has no rating yet
    msgs = m.step(400)
    _feed(page, msgs + [m.settled()])
    rating = {"kind": "rating", "match": m.mid, "room": "ranked", "season": "2026-12",
              "before": {"rating": 1796, "tier": "gold"}, "after": {"rating": 1810, "tier": "platinum"},
              "provisional": False}
    _feed(page, [rating])
    page.wait_for_selector("[data-settlement] [data-rating-change]")
    line = page.query_selector("[data-settlement] [data-rating-change]")
    assert line.get_attribute("data-rating-change") == "14" and line.get_attribute("data-rating") == "1810"
    assert "1796" in line.inner_text() and "1810" in line.inner_text()
    assert line.query_selector("[data-tier]").inner_text() == words["tier.platinum"]
    if lang != "en":
        assert "Rating" not in line.inner_text()
    _shots(page, f"ranked-settlement-{lang}")
    assert not errors, errors
    context.close()


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_the_leaderboard_page_in_three_languages(browser, site, locale: str) -> None:
    lang = LOCALES[locale]
    words = CATALOGUES[lang]
    context = browser.new_context(locale=locale, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{site}/static/index.html")  # the token lives in the tab's session storage
    page.evaluate(f"() => sessionStorage.setItem('shuangkou-token', {json.dumps(_token('alice'))})")
    page.goto(f"{site}/static/leaderboard.html?room=ranked")
    page.wait_for_selector("#board[data-loaded=true]")
    rows = page.query_selector_all("[data-board=top] tbody tr")
    assert len(rows) == 100
    assert rows[0].get_attribute("data-rank") == "1" and rows[0].get_attribute("data-tier") == "master"
    assert words["tier.master"] in rows[0].inner_text()
    assert words["board.hidden"] in rows[3].inner_text()  # p003 hides their name
    assert words["lobby.bot"] in rows[5].inner_text() and words["board.hidden"] not in rows[5].inner_text()
    me_rows = page.query_selector_all("[data-board=me] tbody tr")
    assert [r.get_attribute("data-rank") for r in me_rows] == [str(i) for i in range(37, 48)]
    assert page.query_selector("[data-board=me] tr.me").get_attribute("data-player") == "alice"
    assert page.inner_text("h1") == words["board.title"]
    _shots(page, f"leaderboard-{lang}")
    # on a phone: the title stays, and the hide-my-name box sits beside its words, not above them
    page.set_viewport_size({"width": 375, "height": 812})
    assert page.is_visible("h1")
    box, label = page.locator("#board-hide").bounding_box(), page.locator("#hide-row span").bounding_box()
    assert box["x"] + box["width"] <= label["x"] and abs((box["y"] + box["height"] / 2)
                                                         - (label["y"] + label["height"] / 2)) < label["height"]
    assert not errors, errors
    context.close()
