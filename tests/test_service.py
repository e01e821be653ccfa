"""MatchService: idempotent command ids, WrongVersion retries, snapshots, deadlines."""

from __future__ import annotations

import pytest

from engine.service.shuffle import seeded_random, seeded_server_seeds
from engine.match.commands import CreateMatch, Disconnect, Pass, Play, Ready, Reconnect, Sit
from engine.config import load_config
from engine.match.errors import NotInHand, NotYourTurn, WrongPhase
from engine.match.replay import replay
from engine.service.service import MatchService
from engine.store.base import WrongVersion
from engine.store.memory import InMemoryEventStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        self.now += 1000
        return self.now


def new_service(store=None, seed=1, **kw) -> MatchService:
    kw.setdefault("server_seeds", seeded_server_seeds(seed))
    return MatchService(store or InMemoryEventStore(), Clock(), seeded_random(seed), **kw)


def started(svc: MatchService, mid: str = "m") -> None:
    for c in (CreateMatch(command_id="c1", match_id=mid, config=load_config("points").to_record()),
              Sit(command_id="c2", match_id=mid, player="a"), Sit(command_id="c3", match_id=mid, player="b"),
              Ready(command_id="c4", match_id=mid, player="a"), Ready(command_id="c5", match_id=mid, player="b")):
        out = svc.execute(c)
        assert out.rejection is None, out.rejection


def test_second_ready_deals_with_the_services_shuffle() -> None:
    s1, s2 = new_service(seed=9), new_service(seed=9)
    started(s1)
    started(s2)
    d1 = s1.store.load("m")[-1]
    d2 = s2.store.load("m")[-1]
    assert d1.type == "HandDealt" and d1.hands == d2.hands and d1.lead_card == d2.lead_card
    st = s1.load_state("m")
    assert st.phase == "playing" and s1.store.deadline("m") == st.deadline()


def test_rejection_is_returned_not_raised_and_appends_nothing() -> None:
    svc = new_service()
    started(svc)
    v = svc.store.version("m")
    out = svc.execute(Sit(command_id="x", match_id="m", player="c"))
    assert isinstance(out.rejection, WrongPhase) and out.events == () and not out.duplicate
    assert svc.store.version("m") == v and out.state == svc.load_state("m")


def test_duplicate_command_id_returns_the_stored_events() -> None:
    svc = new_service()
    started(svc)
    v = svc.store.version("m")
    again = svc.execute(Sit(command_id="c2", match_id="m", player="a"))  # decide would refuse now
    assert again.duplicate and again.rejection is None
    assert [e.type for e in again.events] == ["PlayerSeated"] and again.events[0].seq == 2
    assert svc.store.version("m") == v
    st = svc.load_state("m")
    player = st.current_player
    other = "b" if player == "a" else "a"
    card = st.seat(st.turn).hand[0]
    first = svc.execute(Play(command_id="p1", match_id="m", player=player, cards=(card,)))
    assert first.rejection is None
    second = svc.execute(Play(command_id="p1", match_id="m", player=player, cards=(card,)))
    assert second.duplicate and second.events == first.events
    # a duplicate that decide would accept again is recognised by the store
    svc.execute(Disconnect(command_id="d1", match_id="m", player=other))
    svc.execute(Reconnect(command_id="r1", match_id="m", player=other))
    v = svc.store.version("m")
    dup = svc.execute(Disconnect(command_id="d1", match_id="m", player=other))
    assert dup.duplicate and dup.events[0].type == "PlayerDisconnected" and svc.store.version("m") == v
    # an unknown command id on a refused command is a plain rejection
    out = svc.execute(Play(command_id="p9", match_id="m", player="zz", cards=(card,)))
    assert out.rejection is not None and not out.duplicate


class RacingStore(InMemoryEventStore):
    """Lets a concurrent writer append just before this service's first append(s)."""

    def __init__(self, races: int) -> None:
        super().__init__()
        self.races = races
        self.on_race = None

    def append(self, match_id, expected_version, command_id, events, deadline):
        if self.races > 0 and self.on_race is not None:
            self.races -= 1
            self.on_race()
        return super().append(match_id, expected_version, command_id, events, deadline)


def test_wrong_version_is_retried_after_a_concurrent_append() -> None:
    store = RacingStore(races=0)
    svc = new_service(store)
    started(svc)
    other = new_service(store, seed=2)
    st = svc.load_state("m")
    player = st.current_player
    opp = "b" if player == "a" else "a"
    n = iter(range(100))
    store.on_race = lambda: other.execute(Disconnect(command_id=f"race{next(n)}", match_id="m", player=opp))
    store.races = 1
    card = st.seat(st.turn).hand[0]
    out = svc.execute(Play(command_id="p1", match_id="m", player=player, cards=(card,)))
    assert out.rejection is None and out.attempts == 2
    events = store.load("m")
    assert [e.type for e in events[-len(out.events) - 2:]][:2] == ["PlayerDisconnected", "TrusteeshipStarted"]
    assert out.events[0].seq == st.version + 3
    assert replay(events) == out.state


def test_a_concurrent_append_can_turn_an_accepted_command_into_a_rejection() -> None:
    store = RacingStore(races=0)
    svc = new_service(store)
    started(svc)
    st = svc.load_state("m")
    player = st.current_player
    card = st.seat(st.turn).hand[0]
    rival = new_service(store, seed=3)
    store.on_race = lambda: rival.execute(Play(command_id="rival", match_id="m", player=player, cards=(card,)))
    store.races = 1
    out = svc.execute(Play(command_id="mine", match_id="m", player=player, cards=(card,)))
    assert isinstance(out.rejection, (NotYourTurn, NotInHand)) and out.attempts == 2
    assert [e.command_id for e in store.load("m")[st.version:]] == ["rival"] * (store.version("m") - st.version)


def test_retries_are_bounded() -> None:
    class AlwaysStale(InMemoryEventStore):
        def append(self, match_id, expected_version, command_id, events, deadline):
            raise WrongVersion(match_id, expected_version, expected_version + 1)

    svc = new_service(AlwaysStale(), retries=3)
    with pytest.raises(WrongVersion):
        svc.execute(CreateMatch(command_id="c1", match_id="m", config=load_config("points").to_record()))


def test_snapshots_are_saved_and_used() -> None:
    svc = new_service(snapshot_every=3)
    started(svc)
    snap = svc.store.load_snapshot("m")
    assert snap is not None and snap.version == 6  # saved when the version crossed 3 and 6
    assert svc.load_state("m") == replay(svc.store.load("m"))


def test_unreadable_snapshot_falls_back_to_the_stream() -> None:
    from engine.store.base import Snapshot

    svc = new_service(snapshot_every=1000)
    started(svc)
    svc.store.save_snapshot("m", Snapshot(version=3, state=b"\x00garbage"))
    assert svc.load_state("m") == replay(svc.store.load("m"))


def test_on_commit_hook_sees_fresh_commits_only() -> None:
    seen = []
    svc = new_service(on_commit=seen.append)
    started(svc)
    assert len(seen) == 5 and all(o.rejection is None and not o.duplicate for o in seen)
    svc.execute(Sit(command_id="c2", match_id="m", player="a"))  # duplicate
    svc.execute(Sit(command_id="zz", match_id="m", player="q"))  # rejection
    assert len(seen) == 5
    assert seen[-1].state.deadline() == svc.store.deadline("m")


def test_a_failing_hook_does_not_undo_the_commit() -> None:
    def boom(outcome):
        raise RuntimeError("scheduler down")

    svc = new_service(on_commit=boom)
    out = svc.execute(CreateMatch(command_id="c1", match_id="m", config=load_config("points").to_record()))
    assert out.rejection is None and svc.store.version("m") == 1


# -- the state cache (engine/service/state_cache.py) ------------------------------------------------------
class CountingStore(InMemoryEventStore):
    def __init__(self) -> None:
        super().__init__()
        self.loads = 0
        self.snapshot_loads = 0

    def load(self, match_id, after=0):
        self.loads += 1
        return super().load(match_id, after)

    def load_snapshot(self, match_id):
        self.snapshot_loads += 1
        return super().load_snapshot(match_id)


def _move(st, command_id: str):
    """A legal move of the player to move: lead one card, or pass when following."""
    if st.to_beat is not None:
        return Pass(command_id=command_id, match_id=st.match_id, player=st.current_player)
    return Play(command_id=command_id, match_id=st.match_id, player=st.current_player,
                cards=(st.seat(st.turn).hand[0],))


def _play_some(svc: MatchService, n: int, prefix: str = "p") -> None:
    for i in range(n):
        out = svc.execute(_move(svc.load_state("m"), f"{prefix}{i}"))
        assert out.rejection is None, out.rejection


def test_cached_service_reads_nothing_before_an_accepted_command_and_agrees_with_the_stream() -> None:
    from engine.service.state_cache import StateCache

    store = CountingStore()
    svc = new_service(store, state_cache=StateCache())
    started(svc)
    st = svc.load_state("m")
    before = (store.loads, store.snapshot_loads)
    card = st.seat(st.turn).hand[0]
    out = svc.execute(Play(command_id="p1", match_id="m", player=st.current_player, cards=(card,)))
    assert out.rejection is None and out.attempts == 1
    assert (store.loads, store.snapshot_loads) == before  # decided on the cached state
    assert out.state == replay(store.load("m")) == svc.load_state("m")
    assert svc.cached_version("m") == out.state.version


def test_a_stale_cache_is_caught_by_the_append_version_check() -> None:
    from engine.service.state_cache import StateCache

    store = InMemoryEventStore()
    mine = new_service(store, state_cache=StateCache())
    other = new_service(store, seed=2, state_cache=StateCache())  # another process
    started(mine)
    stale = mine.load_state("m")
    _play_some(other, 3, prefix="o")  # the match moves on behind mine's cache
    assert store.version("m") > stale.version and mine.cached_version("m") == stale.version
    truth = other.load_state("m")
    out = mine.execute(_move(truth, "late"))
    assert out.rejection is None
    assert out.attempts == 1  # the optimistic attempt on the stale cache does not count
    assert out.events[0].seq == truth.version + 1
    assert replay(store.load("m")) == out.state


def test_a_refusal_on_a_stale_cached_state_is_rechecked_against_the_stream() -> None:
    from engine.service.state_cache import StateCache

    store = InMemoryEventStore()
    mine = new_service(store, state_cache=StateCache())
    other = new_service(store, seed=2)
    started(mine)
    st = mine.load_state("m")
    mover, waiter = st.current_player, ("b" if st.current_player == "a" else "a")
    card = st.seat(st.turn).hand[0]
    assert other.execute(Play(command_id="o1", match_id="m", player=mover, cards=(card,))).rejection is None
    # on mine's cached state it is not the waiter's turn; in truth it is
    out = mine.execute(Pass(command_id="pass", match_id="m", player=waiter))
    assert out.rejection is None, out.rejection
    assert replay(store.load("m")) == out.state
    # and a refusal that holds on the true state is still reported
    out = mine.execute(Pass(command_id="pass2", match_id="m", player=waiter))
    assert out.rejection is not None and out.state == replay(store.load("m"))


def test_a_stream_behind_the_cache_is_reloaded_not_trusted() -> None:
    from engine.service.state_cache import StateCache

    cache = StateCache()
    old = new_service(state_cache=cache)
    started(old)  # cache: match m at version 6 of another (lost) store
    fresh_store = InMemoryEventStore()
    svc = new_service(fresh_store, state_cache=cache)
    out = svc.execute(CreateMatch(command_id="c1", match_id="m", config=load_config("points").to_record()))
    assert out.rejection is None and out.state.version == 1 and fresh_store.version("m") == 1
    assert cache.get("m").version == 1


def test_without_a_cache_every_command_loads_the_match() -> None:
    store = CountingStore()
    svc = new_service(store)
    started(svc)
    n = store.loads
    svc.execute(Disconnect(command_id="d", match_id="m", player="a"))
    assert store.loads > n


# -- a refused retry looks its command id up (issue 13 §6) --------------------------------------------
@pytest.mark.parametrize("which", ["fake_redis", pytest.param("real_redis", marks=pytest.mark.redis)])
def test_a_retried_command_id_is_looked_up_in_the_command_hash_not_scanned(request, which) -> None:
    """A re-sent old command (refused by decide now) is a duplicate found through the
    command-id hash: only its own events are read (XRANGE of its seqs), whatever the
    stream's length."""
    from engine.service.state_cache import StateCache
    from engine.store.redis_store import RedisEventStore

    client = request.getfixturevalue(which)
    svc = new_service(RedisEventStore(client), state_cache=StateCache())  # no state load in the way
    started(svc)
    _play_some(svc, 20)
    first_play = [e for e in svc.store.load("m") if e.command_id == "p0"]
    assert first_play and svc.store.version("m") > 3 * len(first_play) + 5
    reads: list[tuple[str, str, int]] = []
    real_xrange = client.xrange

    def counting_xrange(name, min="-", max="+", count=None):
        page = real_xrange(name, min=min, max=max, count=count)
        reads.append((str(min), str(max), len(page)))
        return page

    from engine.store import wire

    real_trip = wire.round_trip

    def counting_trip(conn, commands):  # the packed XRANGE of a real redis-server (engine/store/wire.py)
        replies = real_trip(conn, commands)
        for c, page in zip(commands, replies):
            args = [a.decode() for a in c.split(b"\r\n")[2::2]]
            if args[0] == "XRANGE":
                reads.append((args[2], args[3], len(page)))
        return replies

    client.xrange = counting_xrange
    wire.round_trip = counting_trip
    retry = Play(command_id="p0", match_id="m", player=first_play[0].player,
                 cards=tuple(first_play[0].cards))
    try:
        out = svc.execute(retry)
    finally:
        client.xrange = real_xrange
        wire.round_trip = real_trip
    assert out.duplicate and out.rejection is None
    assert [e.seq for e in out.events] == [e.seq for e in first_play]
    # the lookup read the duplicate's own entries, never the rest of the stream
    lookup = [r for r in reads if r[0] == f"{first_play[0].seq}-0"]
    assert lookup and sum(n for _, _, n in lookup) == len(first_play)
    assert sum(n for _, _, n in reads) == len(first_play)


@pytest.mark.parametrize("cached", [False, True])
def test_a_redelivered_ready_is_a_duplicate_not_an_ack(cached: bool) -> None:  # issues 36, 13
    """A Ready whose events are stored but whose update was never published (an OOM refused
    the publication) comes back from the inbox with the same command id: it is a duplicate,
    with its stored events to publish again -- an ``ack`` would lose the player's update."""
    from engine.service.state_cache import StateCache

    svc = new_service(state_cache=StateCache() if cached else None)
    for c in (CreateMatch(command_id="c1", match_id="m", config=load_config("points").to_record()),
              Sit(command_id="c2", match_id="m", player="a"), Sit(command_id="c3", match_id="m", player="b")):
        assert svc.execute(c).rejection is None
    ready = Ready(command_id="c4", match_id="m", player="a")
    first = svc.execute(ready)
    assert first.rejection is None and not first.duplicate and first.events
    again = svc.execute(ready)
    assert again.duplicate and again.rejection is None
    assert [e.seq for e in again.events] == [e.seq for e in first.events]
    other = svc.execute(Ready(command_id="c4b", match_id="m", player="a"))  # the control: another command
    assert not other.duplicate and other.events == () and other.rejection is None


def test_a_ready_that_changes_nothing_appends_nothing_and_is_acked() -> None:  # issue 36
    """A second Ready, and a Ready after the deal (a reconnecting client's), are accepted with no
    event; the publisher answers each with an ``ack`` entry on the player's stream."""
    import fakeredis

    from engine.service.publish import Publisher
    from engine.service.state_cache import StateCache
    from engine.store import keys

    svc = new_service(state_cache=StateCache())
    pub = Publisher(fakeredis.FakeRedis(), consumer="t")
    for c in (CreateMatch(command_id="c1", match_id="m", config=load_config("points").to_record()),
              Sit(command_id="c2", match_id="m", player="a"), Sit(command_id="c3", match_id="m", player="b"),
              Ready(command_id="c4", match_id="m", player="a")):
        assert svc.execute(c).rejection is None
    for when in ("ready", "dealt"):
        if when == "dealt":
            assert svc.execute(Ready(command_id="c5", match_id="m", player="b")).events[-1].type == "HandDealt"
        v = svc.store.version("m")
        again = Ready(command_id=f"again-{when}", match_id="m", player="a")
        out = svc.execute(again)
        assert out.rejection is None and out.events == () and svc.store.version("m") == v
        writes = [(w.stream, w.fields) for w in pub.outputs(again, out)]
        assert writes == [(keys.outbox_key("a"), {"kind": "ack", "match": "m", "command_id": again.command_id,
                                                  "version": v})]
    # a player who is not seated is still refused
    assert svc.execute(Ready(command_id="z", match_id="m", player="z")).rejection is not None
