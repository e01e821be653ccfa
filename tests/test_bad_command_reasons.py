"""``bad_command`` reasons from pydantic validation are readable: ``field: message`` for
the first few problems, no documentation URL, no input echoed, at most 300 characters
(both the engine's own parse, :func:`engine.match.commands.parse_command`, and
:func:`engine.match.commands.command_of`, what a gateway builds player commands with)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.match import commands
from engine.match.commands import MAX_REASON, command_of, parse_command
from engine.match.errors import BadCommand

BASE = {"command_id": "c1", "match_id": "m1", "player": "alice"}

# (command fields, what the reason must say)
CASES = [
    ({"type": "Ready", "client_seed": "\u0000bad"}, "client_seed: a client seed holds printable characters only"),
    ({"type": "Ready", "client_seed": "x" * 65}, "client_seed: a client seed has 1-64 characters, got 65"),
    ({"type": "Pass", "expected_version": 2**70}, "expected_version: integer out of the 64-bit range"),
    ({"type": "Pass", "expected_version": -1}, "expected_version: Input should be greater than or equal to 0"),
    ({"type": "Play", "cards": [999]}, "cards.0: a card id is 0–107 (R-1.1"),   # 108 cards
    ({"type": "Play", "cards": [-1]}, "cards.0: a card id is 0–107 (R-1.1"),
    ({"type": "Play", "cards": []}, "cards: Tuple should have at least 1 item"),
    ({"type": "Play", "cards": [5, 5]}, "the same card id is named twice"),
    ({"type": "Play", "cards": ["x" * 5000]}, "cards.0: Input should be a valid integer"),
    ({"type": "Play", "text": "ZZ" * 190}, "bad card token"),
    ({"type": "Sit", "player": "p" * 50_000, "extra1": 1, "extra2": 2, "extra3": 3, "extra4": 4, "extra5": 5},
     "extra1: Extra inputs are not permitted"),
]


def _check_readable(reason: str, fields: dict) -> None:
    assert "http" not in reason and "pydantic" not in reason and "For further information" not in reason
    assert "\n" not in reason and len(reason) <= MAX_REASON + len("bad command: ")
    assert "Value error," not in reason
    assert "xxxxxxxxxx" not in reason and "ppppppppppppppp" not in reason  # large input never echoed
    if fields.get("type") == "Play" and fields.get("cards") and fields["cards"] != []:
        assert "at least 1 item" not in reason  # the confusing follow-on clause is gone


@pytest.mark.parametrize("fields, says", CASES, ids=[str(i) for i in range(len(CASES))])
def test_parse_command_reason_is_readable(fields, says):
    data = {**BASE, **fields}
    with pytest.raises(BadCommand) as caught:
        parse_command(data)
    reason = str(caught.value)
    assert says in reason, reason
    _check_readable(reason, fields)


GATEWAY_CASES = [  # what the gateway builds after its own message check (no 64-bit pre-check)
    ("Ready", {"client_seed": "\u0000bad"}, "client_seed: a client seed holds printable characters only"),
    ("Ready", {"client_seed": "y" * 65}, "client_seed: a client seed has 1-64 characters, got 65"),
    ("Pass", {"expected_version": 2**70}, "expected_version: Input should be less than or equal to "),
    ("Play", {"cards": (999,)}, "cards.0: a card id is 0–107"),
    ("Play", {"text": "Q" * 400 + "Z"}, "text: "),
]


@pytest.mark.parametrize("ctype, fields, says", GATEWAY_CASES, ids=[c[0] + str(i) for i, c in enumerate(GATEWAY_CASES)])
def test_command_of_reason_is_readable(ctype, fields, says):
    with pytest.raises(BadCommand) as caught:
        command_of(getattr(commands, ctype), **BASE, **fields)
    reason = str(caught.value)
    assert reason.startswith(says) or says in reason, reason
    _check_readable(reason, fields)
    assert "QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ"\
        not in reason


def test_many_problems_are_capped_and_counted():
    data = {**BASE, "type": "Sit", **{f"extra{i}": i for i in range(40)}}
    with pytest.raises(BadCommand) as caught:
        parse_command(data)
    reason = str(caught.value)
    assert reason.count("Extra inputs are not permitted") == 4 and "and 36 more" in reason


def test_commands_doctests():
    import doctest

    assert doctest.testmod(commands).failed == 0


ROOM_CASES = [  # a CreateMatch with a full config record the engine refuses (R-14 bounds)
    ("turn_seconds", 0.3, "bad room config: @turn_seconds: must be 1..3600 s, got 0.3 s"),
    ("mode", "gold", "bad room config: mode: Input should be 'points' or 'wealth'"),
    ("kou", {"flat": -1}, "bad room config: kou.flat: Input should be greater than or equal to 0"),
]


@pytest.mark.parametrize("key, value, says", ROOM_CASES, ids=[c[0] for c in ROOM_CASES])
def test_a_bad_room_config_reason_is_readable(key, value, says):
    from engine.config import load_config
    from engine.match.commands import CreateMatch
    from engine.match.decide import Context, decide
    from engine.match.state import MatchState

    record = {**load_config("points").to_record(), key: value}
    with pytest.raises(BadCommand) as caught:
        decide(MatchState(match_id="m1"), CreateMatch(command_id="c1", match_id="m1", config=record),
               Context(now_ms=0))
    reason = str(caught.value)
    assert reason == says, reason
    _check_readable(reason, {})


# ---- the quick plain check agrees with the walk that explains ------------------------------

_leaves = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-2**70, max_value=2**70), st.sampled_from([2**63 - 1, 2**63, -2**63, -2**63 - 1]),
    st.text(max_size=6), st.sampled_from(["\ud800", "é", "ok"]),
    st.binary(max_size=3))
_nested = st.recursive(_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(st.one_of(st.text(max_size=3), st.integers(-3, 3)), inner, max_size=3)), max_leaves=20)


def _deep(depth: int, leaf: object) -> object:
    for k in range(depth):
        leaf = {"k": leaf} if k % 2 else [leaf]
    return leaf


@settings(max_examples=400, deadline=None)
@given(st.one_of(_nested, st.builds(_deep, st.integers(commands.MAX_NESTING - 1, commands.MAX_NESTING + 2),
                                   _leaves)))
def test_the_quick_plain_check_passes_only_what_check_plain_passes(data) -> None:
    """``_is_plain`` (no paths built: a CreateMatch's config is checked quickly) never passes
    what the walk that names the problem refuses, and passes what it passes when only plain
    types are in it."""
    try:
        commands._explain(data, "", 0)
        refused = False
    except BadCommand:
        refused = True
    if commands._is_plain(data):
        assert not refused
    elif not refused:  # passed by the walk: only a type the quick check leaves to it (bytes)
        assert _holds_bytes(data)


def _holds_bytes(data: object) -> bool:
    if isinstance(data, bytes):
        return True
    if isinstance(data, dict):
        return any(_holds_bytes(k) or _holds_bytes(v) for k, v in data.items())
    if isinstance(data, (list, tuple)):
        return any(_holds_bytes(v) for v in data)
    return False
