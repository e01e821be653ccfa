"""What a spectator may see, derived from a seated player's update (the gateway never reads a
match stream).

The player's view differs from the spectator's (``projections.views.view_for(state, None)``)
only in what belongs to the player: ``you``, ``your_turn``, ``hand`` and ``opponent``.
:func:`spectator_view` resets exactly those, so the result equals the engine's own spectator
view (tests/test_gateway_unit.py checks it on whole matches); :func:`spectator_event`
removes every hand from ``HandDealt`` (and the lead card, which would show a card of one).

>>> spectator_event({"type": "HandDealt", "hands": [[1, 2], None], "lead_card": 1, "set_aside": None})
{'type': 'HandDealt', 'hands': [None, None], 'lead_card': None, 'set_aside': None}
"""

from __future__ import annotations

from typing import Any

#: the view keys that hold something of the receiving player's own
PRIVATE_VIEW_KEYS = ("you", "your_turn", "hand", "opponent")


def spectator_view(view: dict[str, Any] | None) -> dict[str, Any] | None:
    if view is None:
        return None
    out = {k: v for k, v in view.items() if k not in PRIVATE_VIEW_KEYS}
    out["you"] = None
    out["your_turn"] = False
    out["hand"] = None
    return out


def spectator_event(event: dict[str, Any]) -> dict[str, Any]:
    if event.get("type") != "HandDealt":
        return dict(event)
    out = dict(event)
    hands = event.get("hands") or []
    out["hands"] = [None for _ in hands]
    out["set_aside"] = None
    out["lead_card"] = None
    return out
