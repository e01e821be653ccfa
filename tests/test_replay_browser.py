"""The operator's replay viewer speaks the page's language (issue 25): a real headless Chromium at
375×812 in zh-CN, zh-TW and en opens ``/replay/<id>`` on a real match (played by
:func:`tests.strategies.play_match`, written to a real redis-server with its ledger settlement,
read by a real ``shuangkou gateway --dev``) and every word it shows -- the page, each step of
the timeline, the step on show with its actor and notices, the hands and the settlement -- is
from that language's catalogue: no English word in Chinese, no Chinese in English, no
Traditional-only character in Simplified Chinese and no Simplified-only one in Traditional.
Player ids, the match id and the card faces are data, not words, and are left out.  Two escaped
matches' settlements are read the same way: a points forfeit (R-12.2) and a coin room's escape
capped at what the escaper held (R-12.3, R-11.2), its cap row between the owed and the received.

The dev-token form is offered only to a tab that holds no operator token: one the table page
kept in the tab (``shuangkou-token``) is used, as the table page uses it.

Screenshots (``SK_REPLAY_SHOTS`` or artifacts/screenshots/): ``replay-<locale>-375.png``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, Console, browser_stack

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.redis]

ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(os.environ.get("SK_REPLAY_SHOTS") or ROOT / "artifacts" / "screenshots")
I18N = ROOT / "gateway" / "static" / "i18n"
CATALOGUES = {lang: json.loads((I18N / f"{lang}.json").read_text(encoding="utf-8")) for lang in ("zh-Hans", "zh-Hant", "en")}
CJK = re.compile(r"[\u3400-\u9fff]")
MATCH = "r1"
ESCAPED = "r2"  # a points match a player escaped from, settled by its own rule
CAPPED = "r3"  # a coin room's escape costing more than the escaper holds
ABANDONED = "r4"  # a bot and a left a table before its deal: nothing to settle
PLAYERS = ("a", "b")  # tests.strategies' player ids
NAMES = {"a": "小明"}  # a's display name (sk:{names}:display): the viewer names a by it
LOCALES = {"zh-CN": "zh-Hans", "zh-TW": "zh-Hant", "en-US": "en"}

# every visible text node outside the card faces, the command line (<code>) and a quotation of what
# the engine sent the player (<q>: its own words, word for word), every option,
# and each visible element's
# title / aria-label / placeholder
VISIBLE_TEXT = """() => {
  const out = [document.title];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const p = n.parentElement;
    if (!p || p.closest('.card, code, q, script, style') || !n.textContent.trim()) continue;
    if (p.tagName === 'OPTION' ? p.closest('select').checkVisibility() : p.checkVisibility()) out.push(n.textContent.trim());
  }
  for (const e of document.querySelectorAll('[title], [aria-label], [placeholder]')) {
    if (!e.checkVisibility() || e.closest('.card')) continue;
    for (const a of ['title', 'aria-label', 'placeholder']) if (e.getAttribute(a)) out.push(e.getAttribute(a));
  }
  return out;
}"""


def _only_in(lang: str, other: str) -> set[str]:
    """The CJK characters of ``lang``'s catalogue that ``other``'s never uses (雙 in zh-Hant)."""
    mine = set(CJK.findall("".join(CATALOGUES[lang].values())))
    return mine - set(CJK.findall("".join(CATALOGUES[other].values())))


def wrong_words(texts: list[str], lang: str) -> list[str]:
    """The texts that are not ``lang``'s: English words (two letters or more) or another
    script's characters in Chinese, Chinese in English.  Ids are removed first."""
    bad = []
    for text in texts:
        bare = re.sub(r"\b(%s)\b" % "|".join(map(re.escape, (MATCH, ESCAPED, CAPPED, *PLAYERS, *NAMES.values()))), " ", text)
        if lang == "en":
            if CJK.search(bare):
                bad.append(text)
            continue
        other = "zh-Hant" if lang == "zh-Hans" else "zh-Hans"
        if re.search(r"[A-Za-z]{2,}", bare) or set(bare) & _only_in(other, lang):
            bad.append(text)
    return bad


def test_wrong_words_finds_the_mixed_texts() -> None:
    assert wrong_words(["Replay 回放", "b 剩 3 張", "a — 3"], "zh-Hans") == ["Replay 回放", "b 剩 3 張"]
    assert wrong_words(["回放", "b wins"], "en") == ["回放"]
    assert wrong_words(["剩 3 张", "X·a·b = 60·1·1"], "zh-Hant") == ["剩 3 张"]


@pytest.fixture
def replay_stack(redis_server, tmp_path):
    """A finished match with timeouts, trusteeship and bombs in the store and its settlement in
    the ledger, and a ``gateway --dev`` that reads it: the base URL.  The viewer reads the
    store only, so one deployment (serve alone) is enough."""
    import redis

    from engine.store.redis_store import RedisEventStore
    from projections.ledger import RedisLedger
    from projections.settlement import settle
    from tests.strategies import MatchSpec, play_match

    with browser_stack(redis_server, tmp_path, "serve-alone", {"quick": {}}, "replay", "--dev") as (s, gw):
        client = redis.Redis.from_url(s.store_url)
        events = play_match(MatchSpec(seed=23), match_id=MATCH).store.load(MATCH)
        types = {e.type for e in events}
        assert {"TurnTimedOut", "TrusteeshipStarted", "PlayerDisconnected", "MatchFinished"} <= types
        escaped = play_match(MatchSpec(seed=4), match_id=ESCAPED).store.load(ESCAPED)
        assert "PlayerEscaped" in {e.type for e in escaped}
        capped = _capped_escape()
        abandoned = _abandoned_with_a_bot()
        store = RedisEventStore(client)
        for mid, evs in ((MATCH, events), (ESCAPED, escaped), (CAPPED, capped), (ABANDONED, abandoned)):
            for e in evs:
                store.append(mid, e.seq - 1, f"c{e.seq}", [e], None)
            if mid != ABANDONED:
                RedisLedger(client).apply_settlement(mid, settle(evs))
        from engine.store import keys

        client.hset(keys.NAMES_KEY, mapping=NAMES)
        client.close()
        yield gw.http


def _capped_escape() -> list:
    """b escapes a coin room whose escape costs 100·X (500) with 150 coins: R-11.2 caps it."""
    from engine.config import load_config
    from engine.match.commands import CreateMatch, Escape, Pass, Play, Ready, Sit
    from engine.rules.moves import trustee_choice
    from engine.service.service import FixedBalances, MatchService
    from engine.service.shuffle import seeded_random
    from engine.store.memory import InMemoryEventStore

    svc = MatchService(InMemoryEventStore(), lambda: 1_800_000_000_000, seeded_random(7),
                       balances=FixedBalances({"a": 5000, "b": 150}))
    cfg = load_config("wealth").model_copy(update={"escape_penalty_multiple": 100}).to_record()
    cmds = [CreateMatch(command_id="c0", match_id=CAPPED, config=cfg)]
    cmds += [Sit(command_id=f"s{p}", match_id=CAPPED, player=p) for p in PLAYERS]
    cmds += [Ready(command_id=f"r{p}", match_id=CAPPED, player=p) for p in PLAYERS]
    for cmd in cmds:
        state = svc.execute(cmd).state
    for i in range(6):  # a few of the trustee's moves, then b leaves
        seat = state.seats[state.turn]
        play = trustee_choice(list(seat.hand), state.to_beat.combo if state.to_beat is not None else None)
        cmd = (Pass(command_id=f"m{i}", match_id=CAPPED, player=seat.player) if play is None else
               Play(command_id=f"m{i}", match_id=CAPPED, player=seat.player, cards=tuple(play.cards)))
        state = svc.execute(cmd).state
    svc.execute(Escape(command_id="bye", match_id=CAPPED, player="b"))
    return list(svc.store.load(CAPPED))


def _abandoned_with_a_bot() -> list:
    """A bot and a sat; the bot left, then a: the match ended before its deal."""
    from engine.config import load_config
    from engine.match.commands import CreateMatch, Leave, Sit
    from engine.service.service import MatchService
    from engine.service.shuffle import seeded_random
    from engine.store.memory import InMemoryEventStore

    svc = MatchService(InMemoryEventStore(), lambda: 1_800_000_000_000, seeded_random(7))
    for cmd in (CreateMatch(command_id="c0", match_id=ABANDONED, config=load_config("points").to_record()),
                Sit(command_id="s1", match_id=ABANDONED, player="bot-42"),
                Sit(command_id="s2", match_id=ABANDONED, player="a"),
                Leave(command_id="l1", match_id=ABANDONED, player="bot-42"),
                Leave(command_id="l2", match_id=ABANDONED, player="a")):
        assert svc.execute(cmd).rejection is None
    return list(svc.store.load(ABANDONED))


def _operator(base: str) -> str:
    from tests.test_browser import _token

    return _token(base, "op", "operator")


def test_the_replay_viewer_speaks_one_language(replay_stack) -> None:
    from playwright.sync_api import sync_playwright

    base = replay_stack
    console = Console()
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            for locale, lang in LOCALES.items():
                words = CATALOGUES[lang]
                ctx = browser.new_context(viewport={"width": 375, "height": 812}, locale=locale)
                page = ctx.new_page()
                console.watch(page, f"replay {locale}")
                page.goto(f"{base}/replay/{MATCH}?token={_operator(base)}")
                page.wait_for_selector("#viewer[data-loaded=true]", timeout=30_000)
                assert page.get_attribute("html", "lang") == lang
                assert page.locator("#login").is_hidden()  # a token is there: no dev-token offer
                assert page.is_visible(".topbar h1 [data-i18n='replay.title']")  # its title, on a phone too
                assert "小明 [a]" in page.text_content("#meta")  # the display name, the id beside it
                # the status line is a line above the match (not a 200 px box, not at the page's end)
                status, meta = page.locator("[data-status]").bounding_box(), page.locator("#meta").bounding_box()
                assert status and meta and status["height"] < 80 and status["y"] < meta["y"], (locale, status, meta)
                page.set_viewport_size({"width": 1280, "height": 800})
                wide = page.locator("[data-status]").bounding_box()
                assert wide and wide["height"] < 80, (locale, wide)
                page.set_viewport_size({"width": 375, "height": 812})
                page.click("[data-action=last]")
                page.wait_for_selector("[data-settlement]:not([hidden])")
                # each player's contribution c by name, as the table shows it, not c_<id>
                contribution = page.text_content("[data-settlement] [data-term=contribution]") or ""
                assert "c(小明)" in contribution and "c_" not in contribution, (locale, contribution)
                page.screenshot(path=str(SHOTS / f"replay-{locale}-375.png"), full_page=True)
                seen: list[str] = page.evaluate(VISIBLE_TEXT)  # the settlement
                page.click("[data-action=first]")
                seen += page.evaluate(VISIBLE_TEXT)  # no cards dealt yet
                assert not wrong_words(seen, lang), (locale, sorted(set(wrong_words(seen, lang)))[:40])
                for kind in ("TurnTimedOut", "TrusteeshipStarted", "CardsPlayed", "Passed", "HandDealt"):
                    page.locator(f"#steps li[data-step-type={kind}]").first.click()
                    seen += page.evaluate(VISIBLE_TEXT)
                    if kind == "TurnTimedOut":  # the warning the player got, word for word
                        sent = page.text_content("#now [data-notice-sent] q") or ""
                        assert ("超時" if lang != "en" else "timed out") in sent, (locale, sent)
                    if kind == "HandDealt":  # the card that picked the leader
                        assert page.locator("#now [data-lead-card] .card").count() == 1, locale
                    if kind in ("TurnTimedOut", "HandDealt"):
                        page.locator("#now").screenshot(path=str(SHOTS / f"replay-{locale}-{kind}-375.png"))
                page.click("[data-action=autoplay]")  # the button says Pause
                seen += page.evaluate(VISIBLE_TEXT)
                page.click("[data-action=autoplay]")
                bad = wrong_words(seen, lang)
                assert not bad, (locale, sorted(set(bad))[:40])
                body = page.text_content("body") or ""
                for key in ("replay.title", "replay.first", "replay.forward", "replay.autoplay", "settle.title"):
                    assert words[key] in body or words[key] in seen, (locale, key, words[key])
                # an escape's settlement: its rule by id, its words the page's
                page.goto(f"{base}/replay/{ESCAPED}?token={_operator(base)}")
                page.wait_for_selector("#viewer[data-loaded=true]", timeout=30_000)
                page.click("[data-action=last]")
                page.wait_for_selector("[data-settlement]:not([hidden]) [data-term=escape]")
                assert "(R-12.2)" in page.text_content("[data-settlement] [data-term=escape]"), locale
                bad = wrong_words(page.evaluate(VISIBLE_TEXT), lang)
                assert not bad, (locale, sorted(set(bad))[:40])
                # a capped one: the cap between what b owed and what a received
                page.goto(f"{base}/replay/{CAPPED}?token={_operator(base)}")
                page.wait_for_selector("#viewer[data-loaded=true]", timeout=30_000)
                page.click("[data-action=last]")
                page.wait_for_selector("[data-settlement]:not([hidden]) [data-term=cap]")
                terms = page.eval_on_selector_all("[data-settlement] [data-term]", "els => els.map(e => e.dataset.term)")
                assert terms[-3:] == ["escape", "cap", "received"], terms
                assert "(R-12.3)" in page.text_content("[data-term=escape]")
                assert page.text_content("[data-term=received]").startswith("⌊150 × 0.7⌋ = 105"), locale
                bad = wrong_words(page.evaluate(VISIBLE_TEXT), lang)
                assert not bad, (locale, sorted(set(bad))[:40])
                # abandoned before the deal: nothing to settle (not "not settled yet"); a bot by its word
                page.goto(f"{base}/replay/{ABANDONED}?token={_operator(base)}")
                page.wait_for_selector("#viewer[data-loaded=true]", timeout=30_000)
                assert page.text_content("[data-ledger]") == words["replay.ledger.abandoned"], locale
                steps = page.text_content("#steps") or ""
                assert words["lobby.bot"] in steps and "bot-42" not in steps, (locale, steps)
                ctx.close()
        finally:
            browser.close()
    assert console.errors == []


def test_a_tab_holding_an_operator_token_is_not_offered_a_dev_token(replay_stack) -> None:
    """An operator token the table page kept in this tab is used; the dev-token form only shows
    when the tab has none (as on the table page)."""
    from playwright.sync_api import sync_playwright

    base = replay_stack
    token = _operator(base)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            ctx = browser.new_context(viewport={"width": 375, "height": 812}, locale="zh-CN")
            page = ctx.new_page()
            page.add_init_script(f"sessionStorage.setItem('shuangkou-token', {json.dumps(token)})")
            page.goto(f"{base}/replay/{MATCH}")
            page.wait_for_selector("#viewer[data-loaded=true]", timeout=30_000)
            assert page.locator("#login").is_hidden()
            ctx.close()
            fresh = browser.new_context(viewport={"width": 375, "height": 812}, locale="zh-CN")
            page = fresh.new_page()
            page.goto(f"{base}/replay/{MATCH}")
            page.wait_for_selector("#login:not([hidden])", timeout=30_000)  # --dev, no token: offered
            page.fill("#login-name", "olga")
            page.click("[data-action=login]")
            page.wait_for_selector("#viewer[data-loaded=true]", timeout=30_000)
            assert page.locator("#login").is_hidden()
            fresh.close()
        finally:
            browser.close()
