"""engine.service.state_cache and its use by MatchService: the cache never runs ahead of the
store, and what happens after a commit never makes the commit look failed."""

from __future__ import annotations

from engine.service.shuffle import seeded_random
from engine.match.commands import CreateMatch, Sit
from engine.config import load_config
from engine.service.service import MatchService
from engine.service.state_cache import StateCache
from engine.store.memory import InMemoryEventStore

POINTS = load_config("points")


class _SnapshotFails(InMemoryEventStore):
    def save_snapshot(self, match_id, snapshot):
        raise ConnectionError("snapshot write lost")


def test_a_failed_snapshot_never_fails_the_committed_command():
    """The append is the commit; the snapshot after it is an optimisation.  A failure
    there must not report the command as failed (the gateway would dead-letter or
    redeliver an applied command) nor skip on_commit (its deadline would only be found
    by the sweeper)."""
    store = _SnapshotFails()
    committed = []
    cache = StateCache(10)
    svc = MatchService(store, clock=lambda: 1_000, rng=seeded_random(1), snapshot_every=1,
                       on_commit=committed.append, state_cache=cache)
    out = svc.execute(CreateMatch(command_id="c1", match_id="m", config=POINTS.to_record()))
    assert out.accepted and not out.duplicate and store.version("m") == 1
    assert committed == [out]
    assert cache.version("m") == 1 == store.version("m")
    out = svc.execute(Sit(command_id="c2", match_id="m", player="a"))
    assert out.accepted and committed[-1] is out and cache.version("m") == 2 == store.version("m")


def test_put_keeps_the_newest_and_replace_may_go_back():
    store = InMemoryEventStore()
    svc = MatchService(store, clock=lambda: 1_000, rng=seeded_random(1), snapshot_every=0)
    svc.execute(CreateMatch(command_id="c1", match_id="m", config=POINTS.to_record()))
    v1 = svc.load_state("m")
    svc.execute(Sit(command_id="c2", match_id="m", player="a"))
    v2 = svc.load_state("m")
    cache = StateCache(10)
    cache.put(v2)
    cache.put(v1)  # a slower thread's older state
    assert cache.version("m") == 2
    cache.replace(v1)  # a stream found behind the cache
    assert cache.version("m") == 1


class _LostReply(InMemoryEventStore):
    """The append commits, then its reply is lost (once)."""

    lose = False

    def append(self, *a, **kw):
        result = super().append(*a, **kw)
        if self.lose:
            self.lose = False
            raise ConnectionError("reply lost")
        return result


def test_a_commit_whose_reply_was_lost_leaves_the_cache_behind_never_ahead():
    import pytest

    store = _LostReply()
    cache = StateCache(10)
    svc = MatchService(store, clock=lambda: 1_000, rng=seeded_random(1), snapshot_every=0, state_cache=cache)
    svc.execute(CreateMatch(command_id="c1", match_id="m", config=POINTS.to_record()))
    store.lose = True
    sit = Sit(command_id="c2", match_id="m", player="a")
    with pytest.raises(ConnectionError):
        svc.execute(sit)
    assert cache.version("m") == 1 < store.version("m") == 2  # a lower bound, as fire() assumes
    again = svc.execute(sit)  # the redelivery: a duplicate, nothing appended twice
    assert again.duplicate and store.version("m") == 2
    out = svc.execute(Sit(command_id="c3", match_id="m", player="b"))
    assert out.accepted and out.state.version == 3 == store.version("m") == cache.version("m")
