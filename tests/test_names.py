"""Display names (issue 25, gateway/names.py): the one cleaning rule, the token's ``name`` claim,
``shuangkou token --name``, the bots' moves from their own view (gateway/bots.py) and
``gateway --bot-think`` bounds.  Every refusal has a case."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jwt
import pytest

from gateway.bots import BotTable, bot_move
from gateway.names import BadName, clean_name
from gateway.tokens import TokenError, mint, verify

SECRET = b"n" * 32
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("raw, name", [
    ("小明", "小明"), ("  小明  ", "小明"), ("Ann Lee", "Ann Lee"), ("a\t\nb", "a b"),
    ("x\u200by", "xy"),            # zero-width space (Cf) dropped
    ("\u202eevil", "evil"),        # right-to-left override (Cf) dropped
    ("a\x00\x07b", "ab"),          # control characters (Cc) dropped
    ("李" * 24, "李" * 24), ("😀 ok", "😀 ok"), ("e\u0301", "é"),  # NFC
])
def test_clean_name_keeps_letters_of_any_script(raw: str, name: str) -> None:
    assert clean_name(raw) == name


@pytest.mark.parametrize("raw", ["", "   ", "\u200b\u202e", "李" * 25, None, 7, ["小明"]])
def test_clean_name_refuses_what_is_not_a_name(raw) -> None:
    with pytest.raises(BadName):
        clean_name(raw)


def test_a_token_carries_the_cleaned_name() -> None:
    ident = verify(SECRET, mint(SECRET, "u1", name=" 小明\u200b "))
    assert (ident.player, ident.name) == ("u1", "小明")
    assert verify(SECRET, mint(SECRET, "u1")).name is None
    with pytest.raises(ValueError, match="1–24"):
        mint(SECRET, "u1", name="\u202e")


@pytest.mark.parametrize("claim", ["", "x" * 25, 5, "\u200b"])
def test_a_token_whose_name_claim_is_not_a_name_is_refused(claim) -> None:
    token = jwt.encode({"sub": "u1", "role": "player", "exp": 4_000_000_000, "name": claim}, SECRET, algorithm="HS256")
    with pytest.raises(TokenError, match="name claim"):
        verify(SECRET, token)


def test_shuangkou_token_name(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    out = subprocess.run([sys.executable, "-m", "shuangkou", "token", "p1", "--secret-file", str(secret),
                          "--name", "小明"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert verify(SECRET, out.stdout.strip()).name == "小明"
    bad = subprocess.run([sys.executable, "-m", "shuangkou", "token", "p1", "--secret-file", str(secret),
                          "--name", "\u200b"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "1–24" in bad.stderr and "Traceback" not in bad.stderr


def test_gateway_bot_think_is_bounded(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    out = subprocess.run([sys.executable, "-m", "shuangkou", "gateway", "--redis", "redis://127.0.0.1:1/0",
                          "--secret-file", str(secret), "--bots", "--bot-think", "11"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "--bot-think must be 0..10" in out.stderr


def _folded(*updates) -> BotTable:
    t = BotTable("m")
    for version, events, view in updates:
        t.fold("bot-1", version, events, view)
    return t


def test_a_bot_follows_its_turn_from_its_own_events() -> None:
    """The bot's picture comes from what a player receives: its seat, its hand (HandDealt keeps
    only its own), each play and pass; on its turn it plays the trustee's choice (R-13.3)."""
    seated = [{"type": "PlayerSeated", "player": "a", "seat": 0}, {"type": "PlayerSeated", "player": "bot-1", "seat": 1}]
    dealt = {"type": "HandDealt", "hands": [None, [0, 1, 4, 40]], "first": 0}
    t = _folded((3, seated, None), (6, [dealt], None))
    assert (t.seat, t.hand, t.turn, t.playing) == (1, [0, 1, 4, 40], "?", True)
    played = {"type": "CardsPlayed", "player": "a", "cards": [8], "reading": {"kind": "single", "top": 2}}
    t.fold("bot-1", 7, [played], None)
    assert t.turn == "bot-1" and t.version == 7
    assert bot_move(t) == {"type": "Play", "cards": [40], "reading_kind": "single", "reading_rank": "K"}
    mine = {"type": "CardsPlayed", "player": "bot-1", "cards": [40], "reading": {"kind": "single", "top": 10}}
    t.fold("bot-1", 8, [mine], None)
    assert t.hand == [0, 1, 4] and t.turn == "?"
    t.fold("bot-1", 9, [{"type": "Passed", "player": "a"}], None)
    assert t.last is None and t.turn == "bot-1"
    assert bot_move(t)["cards"] == [0]  # leading: the lowest single
    t.fold("bot-1", 12, [{"type": "MatchFinished", "winner": "a"}], None)
    assert not t.playing


def test_a_bot_takes_a_full_view_when_one_comes_and_passes_when_nothing_beats() -> None:
    view = {"phase": "playing", "turn": "bot-1", "hand": {"ids": [0, 1]},
            "seats": [{"player": "a", "trustee": None}, {"player": "bot-1", "trustee": None}],
            "last_play": {"player": "a", "cards": [48], "reading": {"kind": "single", "rank": "2"}}}
    t = _folded((20, [], view))
    assert (t.seat, t.turn, t.hand) == (1, "bot-1", [0, 1])
    assert bot_move(t) == {"type": "Pass"}
    assert bot_move(BotTable("m")) is None  # no hand known: the bot hands its seat to the trustee


def test_the_name_book_reads_once_sees_its_own_renames_at_once_and_others_after_its_ttl() -> None:
    """gateway/names.py NameBook: one HMGET for the names it has not read lately, none for the
    fresh ones; a rename this gateway remembers is seen at once, another gateway's after ttl_s."""
    import asyncio

    import fakeredis

    from gateway.names import NAMES_KEY, NameBook

    class Counting(fakeredis.FakeAsyncRedis):
        hmgets = 0

        async def hmget(self, *a, **kw):  # type: ignore[override]
            Counting.hmgets += 1
            return await super().hmget(*a, **kw)

    async def main() -> None:
        r = Counting(server=fakeredis.FakeServer())
        here, there = NameBook(r, ttl_s=60.0), NameBook(r, ttl_s=0.0)
        await here.remember("p1", "小明")
        await r.hset(NAMES_KEY, "p2", "Ann")
        assert await here.names_of(["p1", "p2", "p3", None]) == {"p1": "小明", "p2": "Ann"}
        assert Counting.hmgets == 1  # p2 and p3 only: p1 was remembered here
        assert await here.names_of(["p2", "p3", "p1"]) == {"p1": "小明", "p2": "Ann"}
        assert Counting.hmgets == 1  # all fresh: no round trip
        await here.remember("p1", "阿明")  # a reconnection under a new name, on this gateway
        assert (await here.names_of(["p1"]))["p1"] == "阿明"
        await there.remember("p2", "Annie")  # ... and on another one: this one knows after its ttl
        assert (await here.names_of(["p2"]))["p2"] == "Ann"
        assert (await NameBook(r, ttl_s=0.0).names_of(["p2"]))["p2"] == "Annie"
        assert await there.names_of([]) == {}

    asyncio.run(main())
