"""Per-player views never leak the opponent's cards (R-1.3), walking whole random matches."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings

from engine.match.events import HandDealt
from projections.views import brief, brief_of_view, redact_event, view_for
from tests.strategies import MatchSpec, Step, match_specs, play_match


def _ids_in(obj: object) -> set[int]:
    """Every int anywhere in a JSON-like structure (a superset of card ids shown)."""
    out: set[int] = set()
    if isinstance(obj, bool):
        return out
    if isinstance(obj, int):
        out.add(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            out |= _ids_in(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            out |= _ids_in(v)
    return out


def _hidden_from(state, me: int | None) -> set[int]:
    """Cards the viewer must not see: the other hands and the set-aside cards."""
    hidden = set(state.set_aside)
    for i, s in enumerate(state.seats):
        if s is not None and i != me:
            hidden |= set(s.hand)
    return hidden


def _card_fields(view: dict) -> set[int]:
    # the ids a view exposes as cards: hand, table, last play (version/ms/counts are not cards)
    ids = set(view["table_ids"])
    if view["hand"] is not None:
        ids |= set(view["hand"]["ids"])
    if view["last_play"] is not None:
        ids |= set(view["last_play"]["cards"])
    return ids


def _check(step: Step) -> None:
    s = step.outcome.state
    if s.phase == "new":
        return
    for viewer in [*s.players(), None]:
        me = s.seat_of(viewer) if viewer else None
        v = view_for(s, viewer)
        json.dumps(v)  # plain data
        hidden = _hidden_from(s, me)
        assert not (_card_fields(v) & hidden), f"view of {viewer} shows hidden cards"
        if viewer is None:
            assert v["hand"] is None
        # the brief (issue 36): the viewer's own hand, the trick's plays; nothing hidden
        b = brief(s, viewer)
        assert b == brief_of_view(v)
        shown = set(b["hand"] or ()) | {c for p in b["trick_plays"] for c in p["cards"]}
        assert not (shown & hidden), f"brief of {viewer} shows hidden cards"
        assert b["hand"] == (None if me is None else v["hand"]["ids"])
        if me is not None:  # the positive control: the check above can fail
            assert set(b["hand"]) == set(s.seat(me).hand)
        # the history: the cards on the table, in the order played, and nothing else
        assert [c for p in v["history"] for c in p["cards"]] == list(s.table)
        text = json.dumps(v)
        assert "set_aside" not in text
        for e in step.outcome.events:
            r = redact_event(e, viewer, state=s)
            if isinstance(e, HandDealt):
                assert r["set_aside"] is None
                shown = _ids_in(r["hands"]) | ({r["lead_card"]} if r["lead_card"] is not None else set())
                assert not (shown & (set(e.set_aside) | (set(e.hands[1 - me]) if me is not None else set(e.hands[0]) | set(e.hands[1])))), \
                    f"redacted HandDealt leaks to {viewer}"
                if me is not None:
                    assert r["hands"][me] == list(e.hands[me])
                    assert r["hands"][1 - me] is None
                else:
                    assert r["hands"] == [None, None]
            json.dumps(r, default=str)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(match_specs())
def test_views_never_show_opponent_cards(spec: MatchSpec) -> None:
    play_match(spec, on_step=_check)


def test_view_contents_mid_match() -> None:
    run = play_match(MatchSpec(seed=3, chaos=0.0), max_steps=6)
    s = run.state
    a, b = s.players()
    va = view_for(s, a)
    assert va["you"] == a and len(va["hand"]["ids"]) == len(s.seat(0).hand)
    assert va["opponent"] == {"player": b, "cards_left": len(s.seat(1).hand)}
    assert va["turn"] == s.current_player and va["deadline"]["kind"] == "turn"
    assert set(va["contribution"]) == {a, b}  # standing contribution
    assert va["hand"]["text"].split()[0][0] in "345678910JQKA2SB"
    spectator = view_for(s, None)
    assert spectator["hand"] is None and spectator["you"] is None


def test_finished_view_has_result() -> None:
    run = play_match(MatchSpec(seed=11, chaos=0.0))
    v = view_for(run.state, None)
    assert v["phase"] == "finished" and v["result"]["winner"] == run.state.finished.winner
    assert v["deadline"] is None


def test_standing_contribution_is_shown_as_soon_as_a_bomb_is_played() -> None:
    from engine.tools.script import run_script

    script = {"config": "points", "players": [{"id": "a", "points": 100}, {"id": "b", "points": 0}],
              "deal": {"hands": ["3 3 3 3 3 3 4", "5 6"], "first": 0}, "actions": []}
    before = view_for(run_script(script).state, "a")["contribution"]
    assert {p: (x["xiang"], x["c"], x["net"]) for p, x in before.items()} == {"a": (0, 0, 0), "b": (0, 0, 0)}
    script["actions"] = [{"player": "a", "play": "3 3 3 3 3 3"}]
    state = run_script(script).state
    assert state.phase == "playing"  # b auto-passed, a leads again: the match is still on
    for viewer in ("a", "b", None):
        standing = view_for(state, viewer)["contribution"]
        # a's 6-xiang bomb: c = 2; X = 5, the base of the lower level (b, level 0), not a's 10
        assert {p: (x["xiang"], x["c"], x["net"]) for p, x in standing.items()} == {
            "a": (6, 2, 10), "b": (0, 0, -10)}
