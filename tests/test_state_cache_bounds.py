"""The per-process state cache is bounded in bytes and drops finished matches (issue 11 §8)."""

from __future__ import annotations

from dataclasses import replace

from engine.match.state import MatchState, Seat
from engine.service.state_cache import STATE_OVERHEAD_BYTES, StateCache, estimated_bytes


def state(mid: str, version: int = 1, cards: int = 0, phase: str = "playing") -> MatchState:
    seat = Seat(player=f"{mid}-a", hand=tuple(range(cards)))
    return MatchState(match_id=mid, version=version, phase=phase, seats=(seat, None))


def test_the_cache_is_bounded_in_bytes():
    one = estimated_bytes(state("m0", cards=27))
    cache = StateCache(size=1_000, max_bytes=10 * one)
    for i in range(50):
        cache.put(state(f"m{i}", cards=27))
    assert len(cache) == 10 and cache.bytes <= cache.max_bytes
    assert cache.get("m49") is not None and cache.get("m0") is None  # least recently used went first


def test_a_finished_match_is_dropped():
    cache = StateCache()
    cache.put(state("m1", version=5))
    assert cache.get("m1") is not None
    cache.put(replace(state("m1", version=6), phase="finished"))
    assert cache.get("m1") is None and len(cache) == 0 and cache.bytes == 0
    cache.replace(state("m2", version=3, phase="finished"))
    assert cache.get("m2") is None


def test_the_byte_count_follows_updates_and_discards():
    cache = StateCache()
    cache.put(state("m1", version=1, cards=27))
    cache.put(state("m1", version=2, cards=20))
    assert cache.bytes == estimated_bytes(state("m1", cards=20)) > STATE_OVERHEAD_BYTES
    cache.discard("m1")
    assert cache.bytes == 0
