"""The nemesis harness's own choices that need no Cluster: where an inbox client's matches live."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine.store import keys
from tests.nemesis.harness import InboxPlayer, slot_of


def _player(home_ranges: list[tuple[int, int]] | None) -> InboxPlayer:
    p = InboxPlayer.__new__(InboxPlayer)  # no Redis: match_id reads only its tag and home
    p.tag = "ib0"
    p.home = None if home_ranges is None else (lambda s: any(a <= s <= b for a, b in home_ranges))
    return p


@given(st.integers(0, 5_000), st.sampled_from([[(0, 5460)], [(5461, 10922)], [(10923, 16383)]]))
def test_a_homed_client_plays_only_matches_whose_bucket_is_on_its_master(k: int, home: list[tuple[int, int]]) -> None:
    mid, nxt = _player(home).match_id(k)
    assert nxt >= k and mid == f"ib0-{nxt}"
    slot = slot_of(keys.feed_key(keys.bucket_of(mid)))
    assert any(a <= slot <= b for a, b in home)


def test_a_client_without_home_or_with_an_empty_one_takes_the_next_id() -> None:
    assert _player(None).match_id(7) == ("ib0-7", 7)
    assert _player([]).match_id(7) == ("ib0-7", 7)
