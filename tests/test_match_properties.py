"""Properties of whole random matches played through MatchService (strategies.py).

At every step: the 108 cards are accounted for (R-1.1, R-1.3); the turn
belongs to exactly one seated player until the finish (R-6); every event
round-trips through the msgpack codec; a rejection changes neither the state
nor the store.  At the end: replaying the stored events gives the live state,
snapshot + tail gives the full replay, and check_stream finds no problem.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

import msgpack

from engine.match.events import decode_event, encode_event, event_to_dict
from engine.match.replay import check_stream, replay
from engine.match.state import decode_state, encode_state
from tests.strategies import MatchSpec, Step, match_specs, play_match

PROFILE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _step_invariants(step: Step) -> None:
    out = step.outcome
    store_version = out.state.version
    if out.rejection is not None:
        assert out.state == step.before, f"state changed on rejection {out.rejection!r}"
        assert out.events == ()
        assert store_version == step.store_version_before, "something was appended on a rejection"
        return
    s = out.state
    assert s.version == step.store_version_before + len(out.events)
    for e in out.events:
        assert decode_event(encode_event(e)) == e
        # the copied fields are pydantic's dump: the same keys in the same order, the same bytes
        dumped = e.model_dump(mode="python")
        assert list(event_to_dict(e).items()) == list(dumped.items())
        assert encode_event(e) == msgpack.packb(dumped, use_bin_type=True)
        # one decision, one clock reading; time never runs backwards in a stream
        assert e.ts == out.events[0].ts >= step.before.last_ts
        assert e.command_id == step.command.command_id and e.match_id == step.command.match_id
    if s.phase in ("playing", "finished"):
        pools = [x.hand for x in s.seats if x] + [s.table, s.set_aside]
        cards = [c for p in pools for c in p]
        assert len(cards) == 108 and set(cards) == set(range(108)), "R-1.1 card accounting"
    if s.phase == "playing":
        assert s.turn in (0, 1) and all(x is not None for x in s.seats)
        assert s.current_player is not None
        assert s.deadline() is not None and s.deadline().version == s.version
        assert all(x.hand for x in s.seats if x), "a player with an empty hand is still playing (R-6.3)"
    if s.phase == "finished":
        assert s.turn is None and s.current_player is None and s.deadline() is None


@PROFILE
@given(match_specs())
def test_random_matches_keep_every_invariant(spec: MatchSpec) -> None:
    run = play_match(spec, on_step=_step_invariants)
    events = run.store.load(run.match_id)
    assert check_stream(events) == []
    full = replay(events)
    assert full == run.state, "replay(stored events) != live state"
    assert run.service.load_state(run.match_id) == full, "snapshot + tail != full replay"
    assert decode_state(encode_state(full)) == full
    if spec.chaos == 0.0:
        assert run.state.phase == "finished"


@PROFILE
@given(match_specs(max_chaos=0.0))
def test_plain_matches_finish_and_snapshots_match_at_every_version(spec: MatchSpec) -> None:
    run = play_match(spec)
    assert run.state.phase == "finished"
    events = run.store.load(run.match_id)
    for k in range(1, len(events), 5):
        snap = decode_state(encode_state(replay(events[:k])))
        assert replay(events[k:], snap) == run.state
        assert replay(events, snap) == run.state  # events at or below the snapshot are skipped
    f = run.state.finished
    assert f is not None and f.reason == "out"
    loser_left = dict(f.cards_left)[f.loser]
    assert f.kou == run.state.config.kou.kou_of(loser_left)
