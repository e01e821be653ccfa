"""The table page's catalogues (issue 25): gateway/static/i18n/{zh-Hans,zh-Hant,en}.json hold the
same keys and the same placeholders; every rejection code the engine or the gateway can send
has a message; no message a player reads shows a rule id (R-x.y) or an internal code; and the
page's language choice from ``navigator.languages`` (i18n.js ``pickLang``), run in node."""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import engine.match.errors as engine_errors
from gateway import protocol

ROOT = Path(__file__).resolve().parent.parent
I18N = ROOT / "gateway" / "static" / "i18n"
LANGS = ("zh-Hans", "zh-Hant", "en")
CATALOGUES = {lang: json.loads((I18N / f"{lang}.json").read_text(encoding="utf-8")) for lang in LANGS}
CJK = re.compile(r"[\u3400-\u9fff]")


def test_the_catalogues_have_equal_key_sets() -> None:
    keys = {lang: set(c) for lang, c in CATALOGUES.items()}
    assert keys["zh-Hans"] == keys["zh-Hant"] == keys["en"], {
        lang: sorted(keys[lang] ^ keys["en"]) for lang in LANGS}
    assert len(keys["en"]) > 150


def test_each_message_has_the_same_placeholders_in_every_language() -> None:
    differ = {}
    for key in CATALOGUES["en"]:
        holes = {lang: sorted(set(re.findall(r"\{(\w+)\}", c[key]))) for lang, c in CATALOGUES.items()}
        if not holes["zh-Hans"] == holes["zh-Hant"] == holes["en"]:
            differ[key] = holes
    assert not differ


def _codes() -> set[str]:
    engine = {cls.code for _, cls in inspect.getmembers(engine_errors, inspect.isclass)
              if issubclass(cls, engine_errors.Rejected)}
    gateway = {v for k, v in vars(protocol).items() if k.isupper() and isinstance(v, str) and re.fullmatch(r"[a-z_]+", v)}
    import engine.lobby.errors as lobby_errors

    lobby = {cls.code for _, cls in inspect.getmembers(lobby_errors, inspect.isclass)
             if issubclass(cls, engine_errors.Rejected)}  # the lobby's and the private tables' (issue 39)
    return engine | lobby | gateway | {"internal_error", "bad_name"}


def test_every_rejection_code_has_a_message() -> None:
    codes = _codes()
    assert {"does_not_beat", "not_a_combination", "stale", "seat_refused", "unknown_room"} <= codes
    missing = [(lang, code) for lang, c in CATALOGUES.items() for code in sorted(codes) if f"refusal.{code}" not in c]
    assert not missing


@pytest.mark.parametrize("lang", LANGS)
def test_no_message_shows_a_rule_id_or_an_internal_code(lang: str) -> None:
    for key, text in CATALOGUES[lang].items():
        assert not re.search(r"\bR-\d", text), (key, text)
        assert not re.search(r"\b[a-z]+_[a-z_]+\b", text), (key, text)  # does_not_beat, c_alice


@pytest.mark.parametrize("lang", ["zh-Hans", "zh-Hant"])
def test_chinese_catalogues_hold_no_english_words(lang: str) -> None:
    """One language at a time: only symbols, digits, the formula's letters (X, a, b, c) and card
    ranks (J Q K A) beside the Chinese."""
    for key, text in CATALOGUES[lang].items():
        words = [w for w in re.findall(r"[A-Za-z]{2,}", re.sub(r"\{\w+\}", "", text))]
        assert not words, (key, text, words)


def test_a_seats_badge_never_addresses_the_reader() -> None:
    """A badge shows on every seat (the opponent's, and both on a spectator's page), so none says
    "you": a spectator read "auto-play (your choice)" on both players' seats."""
    words = {k: v for k, v in CATALOGUES["en"].items() if k.startswith("badge.")}
    assert words and not [k for k, v in words.items() if re.search(r"\byour?\b", v, re.I)], words


def test_english_holds_chinese_only_in_the_glossary() -> None:
    for key, text in CATALOGUES["en"].items():
        assert key.startswith("glossary.") or not CJK.search(text), (key, text)


def test_the_two_chinese_catalogues_differ_where_the_scripts_do() -> None:
    hans, hant = CATALOGUES["zh-Hans"], CATALOGUES["zh-Hant"]
    assert hans["app.title"] == "火拼双扣" and hant["app.title"] == "火拼雙扣"
    assert hans["btn.play"] == hant["btn.play"] == "出牌" and CATALOGUES["en"]["btn.play"] == "Play"
    same = [k for k in hans if hans[k] == hant[k] and CJK.search(hans[k])]
    assert len(same) < len(hans) // 2, same


LANG_CASES = [
    (["zh-CN"], "zh-Hans"), (["zh-SG"], "zh-Hans"), (["zh"], "zh-Hans"), (["zh-Hans-CN"], "zh-Hans"),
    (["zh-TW"], "zh-Hant"), (["zh-HK"], "zh-Hant"), (["zh-MO"], "zh-Hant"), (["zh-Hant"], "zh-Hant"),
    (["en-US"], "en"), (["fr-FR", "zh-CN"], "en"), (["de"], "en"), ([], "en"),
]


def test_the_language_comes_from_navigator_languages() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is needed for the page's JavaScript tests (.ci/run installs it)")
    script = f"""
        const {{ pickLang }} = await import({json.dumps((ROOT / "gateway/static/js/i18n.js").as_uri())});
        const cases = {json.dumps(LANG_CASES)};
        console.log(JSON.stringify(cases.map(([tags]) => pickLang(tags))));
    """
    out = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [want for _, want in LANG_CASES]


STATIC = ROOT / "gateway" / "static"


def _keys_used(page: str, script: str) -> set[str]:
    """The catalogue keys a page names literally: data-i18n, data-i18n-attr and t("...") / has("...")."""
    html = (STATIC / page).read_text(encoding="utf-8")
    js = (STATIC / "js" / script).read_text(encoding="utf-8")
    keys = set(re.findall(r'data-i18n="([^"]+)"', html))
    for attrs in re.findall(r'data-i18n-attr="([^"]+)"', html):
        keys |= {pair.split(":")[1].strip() for pair in attrs.split(";") if ":" in pair}
    keys |= set(re.findall(r'\b(?:t|has)\("([\w.]+)"', js))
    keys |= set(re.findall(r'dataset\.i18n = "([\w.]+)"', js))
    return keys


@pytest.mark.parametrize("page, script", [("replay.html", "replay.js"), ("leaderboard.html", "leaderboard.js"),
                                          ("index.html", "table.js")])
def test_every_key_a_page_names_is_in_every_catalogue(page: str, script: str) -> None:
    used = _keys_used(page, script)
    assert len(used) > 10
    missing = sorted((lang, k) for lang, c in CATALOGUES.items() for k in used if k not in c)
    assert not missing


def test_the_replay_viewer_has_a_word_for_every_value_it_words() -> None:
    """The replay viewer words actors, phases, trusteeship reasons and clocks by key
    (``replay.actor.<actor>`` ...): each value the engine can send has its key everywhere."""
    from typing import get_args

    from engine.match import events, state

    values = {"replay.actor": set(get_args(events.Actor)) | set(get_args(events.PassActor)) | {"system"},
              "replay.phase": set(get_args(state.Phase)),
              "replay.why": set(get_args(events.TrusteeReason)) | set(get_args(events.TrusteeEndReason)),
              "replay.clock": set(get_args(events.ClockExtended.model_fields["kind"].annotation)),
              "removed": set(get_args(events.PlayerRemoved.model_fields["reason"].annotation))}
    missing = sorted((lang, f"{prefix}.{v}") for lang, c in CATALOGUES.items() for prefix, vs in values.items()
                     for v in vs if f"{prefix}.{v}" not in c)
    assert not missing
    js = (STATIC / "js" / "replay.js").read_text(encoding="utf-8")
    assert all(f"`{prefix}.${{" in js or prefix == "removed" for prefix in values)
