"""What a spectator may see, derived from a seated player's update (the gateway never reads a
match stream): the spectator redaction every event and view a spectator gets goes through.

The player's view differs from the spectator's (``projections.views.view_for(state, None)``)
only in what belongs to the player: ``you``, ``your_turn``, ``hand`` and ``opponent``.
:func:`spectator_view` resets exactly those, so the result equals the engine's own spectator
view; :func:`spectator_brief` drops the brief's ``hand`` likewise.  :func:`spectator_event` turns the player's event into the engine's spectator event
(``projections.views.redact_event(event, None)``): no hand in ``HandDealt`` (nor the lead
card, which would show a card of one), and no ``balance`` in ``PlayerSeated`` -- the seated
player's own PlayerSeated carries their balance; a spectator sees the level and base only
(docs/SECURITY.md threat 8).  tests/test_spectator_redaction.py checks both as properties
over random matches, the Watch that lands before the seating included.

>>> spectator_event({"type": "HandDealt", "hands": [[1, 2], None], "lead_card": 1, "set_aside": None})
{'type': 'HandDealt', 'hands': [None, None], 'lead_card': None, 'set_aside': None}
>>> spectator_event({"type": "PlayerSeated", "player": "bob", "balance": 98765, "level": 3, "base": 20})
{'type': 'PlayerSeated', 'player': 'bob', 'level': 3, 'base': 20}
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


def spectator_brief(brief: dict[str, Any] | None) -> dict[str, Any] | None:
    """A seated player's brief as a spectator gets it: without the player's hand.

    >>> spectator_brief({"version": 7, "hand": [0, 4]})
    {'version': 7, 'hand': None}
    """
    if brief is None:
        return None
    return {**brief, "hand": None}


#: what a seated player's own events hold that nobody else may see, by event type
PRIVATE_EVENT_KEYS = {"PlayerSeated": ("balance",)}


def spectator_event(event: dict[str, Any]) -> dict[str, Any]:
    private = PRIVATE_EVENT_KEYS.get(str(event.get("type")))
    if private:
        return {k: v for k, v in event.items() if k not in private}
    if event.get("type") != "HandDealt":
        return dict(event)
    out = dict(event)
    hands = event.get("hands") or []
    out["hands"] = [None for _ in hands]
    out["set_aside"] = None
    out["lead_card"] = None
    return out
