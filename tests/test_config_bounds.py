"""Every config number has a sane range and no settlement can overflow (issue 11 §3/§7):
checked by ``shuangkou config check`` and by CreateMatch; a recorded config replays as it was."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from shuangkou.cli import main as cli_main
from engine.config import CONFIG_DIR, MAX_SETTLEMENT, ConfigError, RoomConfig, parse_config, worst_settlement
from engine.match.commands import CreateMatch
from engine.match.decide import Context, decide
from engine.match.errors import BadCommand
from engine.match.state import MatchState


def points() -> dict:
    return tomllib.loads((CONFIG_DIR / "points.toml").read_text(encoding="utf-8"))


def with_(path: str, value) -> dict:
    data = points()
    node = data
    *parents, last = path.split(".")
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


BAD = [
    ("turn_seconds", float("inf"), "turn_seconds"),
    ("turn_seconds", float("nan"), "turn_seconds"),
    ("turn_seconds", 1e-9, "turn_seconds: must be 1..3600 s"),
    ("turn_seconds", 3601, "turn_seconds: must be 1..3600 s"),
    ("ready_seconds", 0.5, "ready_seconds: must be 1..3600 s"),
    ("trustee_delay_seconds", 11, "trustee_delay_seconds: must be 0..10 s"),
    ("trustee_delay_seconds", float("inf"), "trustee_delay_seconds"),
    ("escape_transfer_ratio", float("nan"), "escape_transfer_ratio"),
    ("escape_penalty_multiple", 10**6, "escape_penalty_multiple"),
    ("timeouts_before_trustee", 10**9, "timeouts_before_trustee"),
    ("kou.double", 10**9, "kou.double"),
    ("doubling.12", 10**12, "doubling.12"),
    ("contribution.12", 10**12, "contribution.12"),
]


@pytest.mark.parametrize("path, value, expected", BAD, ids=[f"{p}={v}" for p, v, _ in BAD])
def test_each_out_of_range_number_is_refused(path, value, expected):
    with pytest.raises(ConfigError) as info:
        parse_config(with_(path, value))
    assert any(expected in p for p in info.value.problems), info.value.problems


def test_the_base_that_overflowed_the_ledger_is_refused():
    data = points()
    data["levels"][-1]["base"] = 3 * 2**61  # issue 11 §3
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert any("levels[16].base" in p for p in info.value.problems)


def test_the_worst_case_settlement_is_bounded_even_when_each_number_is_in_range():
    data = points()
    for lv in data["levels"]:
        lv["base"] = 10**9  # in range alone
    data["doubling"] = {str(x): 10**6 for x in range(4, 13)}  # in range alone
    data["kou"]["double"] = 1_000  # in range alone
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert any("worst settlement" in p for p in info.value.problems)
    assert worst_settlement(parse_config(points())) <= MAX_SETTLEMENT


def test_the_shipped_configs_are_within_the_bounds():
    for name in ("points", "wealth"):
        cfg = parse_config(tomllib.loads((CONFIG_DIR / f"{name}.toml").read_text(encoding="utf-8")))
        assert worst_settlement(cfg) < 10**7


def test_create_match_refuses_an_unbounded_config():
    record = parse_config(points()).to_record()
    record["turn_seconds"] = 1e-9
    cmd = CreateMatch(command_id="c", match_id="m", config=record)
    with pytest.raises(BadCommand, match="turn_seconds"):
        decide(MatchState(match_id="m"), cmd, Context(now_ms=0))


def test_a_recorded_config_replays_as_it_was():
    record = parse_config(points()).to_record()
    record["turn_seconds"] = 0.3  # recorded before the bounds
    assert RoomConfig.from_match_record(record).turn_seconds == 0.3
    with pytest.raises(ValueError):
        RoomConfig.from_record(record)


def test_config_check_reports_the_bounds(tmp_path: Path, capsys):
    text = (CONFIG_DIR / "points.toml").read_text(encoding="utf-8")
    f = tmp_path / "room.toml"
    f.write_text(text.replace("turn_seconds = 15", "turn_seconds = inf"), encoding="utf-8")
    assert cli_main(["config", "check", str(f)]) == 2
    assert "turn_seconds" in capsys.readouterr().err
