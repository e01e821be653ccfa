"""What the publisher builds once per command (issue 13 §4) is what it built per player:
the player-independent part of a view (projections.views.view_common) and each event's
public fields (redact_event's ``public``), over every state of a played match."""

from __future__ import annotations

from engine.config import load_config
from engine.match.commands import CreateMatch, Pass, Play, Ready, Sit
from engine.match.events import public_event_dict
from engine.match.replay import replay
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random, seeded_server_seeds
from engine.store.memory import InMemoryEventStore
from projections.views import redact_event, view_common, view_for


def played_events(moves: int = 40) -> list:
    clock = iter(range(1_000_000, 10**12, 1000))
    svc = MatchService(InMemoryEventStore(), lambda: next(clock), seeded_random(3),
                       server_seeds=seeded_server_seeds(3))
    for c in (CreateMatch(command_id="c", match_id="m", config=load_config("points").to_record()),
              Sit(command_id="sa", match_id="m", player="a"), Sit(command_id="sb", match_id="m", player="b"),
              Ready(command_id="ra", match_id="m", player="a"), Ready(command_id="rb", match_id="m", player="b")):
        assert svc.execute(c).rejection is None
    for i in range(moves):
        st = svc.load_state("m")
        if st.phase != "playing":
            break
        if st.to_beat is None:
            cmd = Play(command_id=f"p{i}", match_id="m", player=st.current_player, cards=(st.seat(st.turn).hand[0],))
        else:
            cmd = Pass(command_id=f"p{i}", match_id="m", player=st.current_player)
        assert svc.execute(cmd).rejection is None
    return svc.store.load("m")


def test_a_view_from_the_shared_part_is_the_view_built_alone_and_the_shared_part_holds_no_hand() -> None:
    events = played_events()
    for n in range(1, len(events) + 1):
        state = replay(events[:n])
        common = view_common(state)
        for player in ("a", "b", None, "stranger"):
            assert view_for(state, player, common) == view_for(state, player)
        # nothing of a player's own in the shared part: no hand, no "you"
        assert not {"hand", "opponent", "you", "your_turn"} & set(common)


def test_an_event_redacted_from_its_public_fields_is_the_same_and_leaves_them_unchanged() -> None:
    events = played_events()
    final = replay(events)
    for e in events:
        public = public_event_dict(e)
        before = repr(public)
        for player in ("a", "b", None):
            seat = final.seat_of(player) if player else None
            assert redact_event(e, player, seat=seat, public=public) == redact_event(e, player, seat=seat)
        assert repr(public) == before
