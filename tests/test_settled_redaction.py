"""The ``settled`` message never shows a player the opponent's balance (issue 12, issue 14).

A settlement's breakdown records the balances both players were seated with
(R-8.2 levels, the R-11.2 cap).  :func:`projections.views.breakdown_for` is what
the gateway's lobby sends each player: only their own balance, on every random
wealth and points match (finishes, escapes, timeouts, trusteeship).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.settlement import settle
from projections.views import breakdown_for
from tests.strategies import match_specs, play_match


def balances_shown(breakdown: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Where a ``balance`` appears in ``breakdown``: the path of each dict holding one."""
    found: list[tuple[str, ...]] = []
    if isinstance(breakdown, dict):
        if "balance" in breakdown:
            found.append(path)
        for k, v in breakdown.items():
            found += balances_shown(v, (*path, str(k)))
    elif isinstance(breakdown, list):
        for i, v in enumerate(breakdown):
            found += balances_shown(v, (*path, str(i)))
    return found


def allowed(path: tuple[str, ...], breakdown: dict[str, Any], player: str | None) -> bool:
    if path == ("X_from", "levels", str(player)):
        return True
    return path == ("cap",) and breakdown["cap"].get("payer") == player


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(match_specs(max_chaos=0.3), st.sampled_from(["a", "b", None]))
def test_a_player_sees_only_their_own_balance_in_the_settlement(spec, player):
    run = play_match(spec)
    s = settle(run.store.load(run.match_id))
    if s is None:
        return
    full = s.breakdown
    mine = breakdown_for(full, player)
    assert [p for p in balances_shown(mine) if not allowed(p, mine, player)] == []
    # positive control: the stored breakdown does hold the opponent's balance
    assert [p for p in balances_shown(full) if not allowed(p, full, player)] != []
    # nothing but balances is taken away
    assert mine["X"] == full["X"] and mine.get("xiang") == full.get("xiang") and mine.keys() == full.keys()
