"""Operator config validation (R-14) and ``shuangkou config check``."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from shuangkou.cli import main as cli_main
from engine.config import CONFIG_DIR, ConfigError, RoomConfig, load_config, parse_config


def raw(name: str) -> dict:
    return tomllib.loads((CONFIG_DIR / f"{name}.toml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name,mode,ratio,cap", [("points", "points", 1.0, False), ("wealth", "wealth", 0.7, True)])
def test_shipped_files_validate(name, mode, ratio, cap):
    cfg = load_config(name)
    assert (cfg.name, cfg.mode, cfg.escape_transfer_ratio, cfg.cap_loss_at_balance) == (name, mode, ratio, cap)
    assert RoomConfig.from_record(cfg.to_record()) == cfg          # the MatchCreated record round-trips


def test_shipped_tables_match_rules():
    """R-7.2, R-8 tables, R-11 levels (defaults)."""
    p, w = load_config("points"), load_config("wealth")
    assert (p.kou.flat, p.kou.single, p.kou.double, p.kou.single_from, p.kou.double_from) == (1, 2, 4, 7, 12)
    assert [p.contribution[x] for x in range(4, 13)] == [0, 0, 2, 4, 8, 16, 32, 64, 128]
    assert [p.doubling[x] for x in range(4, 13)] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert [w.contribution[x] for x in range(4, 13)] == [0, 0, 2, 4, 8, 16, 32, 64, 128]
    assert [w.doubling[x] for x in range(4, 13)] == [1, 1, 2, 4, 8, 16, 32, 64, 128]
    assert len(p.levels) == 17 and (p.levels[0].need, p.levels[-1].base) == (0, 800)
    assert len(w.levels) == 11 and (w.levels[0].need, w.levels[4].base) == (100, 1000)


def _mutate(name, path, value):
    data = raw(name)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


# (what is wrong, mutation path, value, expected "key.path: fragment")
PROBLEMS = [
    ("missing table row", ("contribution", "9"), KeyError, "contribution.9: missing row"),
    ("negative multiplier", ("doubling", "6"), -4, "doubling.6: negative multiplier"),
    ("zero doubling", ("doubling", "4"), 0, "doubling.4: a doubling multiplier must be at least 1"),
    ("decreasing table", ("contribution", "8"), 3, "contribution.8: must not be below the 7-xiang row"),
    ("no such xiang", ("contribution", "13"), 1, "contribution.13: no such xiang"),
    ("not an xiang", ("doubling", "big"), 1, "doubling.big: not an xiang number"),
    ("unknown key", ("escape_polcy",), "trustee", "escape_polcy: unknown key"),
    ("unknown nested key", ("kou", "triple"), 8, "kou.triple: unknown key"),
    ("bad type", ("turn_seconds",), "fast", "turn_seconds: Input should be a valid number"),
    ("bad literal", ("escape_policy",), "run", "escape_policy: Input should be 'trustee' or 'forfeit'"),
    ("missing key", ("escape_transfer_ratio",), KeyError, "escape_transfer_ratio: missing"),
    ("ratio above 1", ("escape_transfer_ratio",), 1.5, "escape_transfer_ratio: Input should be less than or equal to 1"),
    ("kou thresholds", ("kou", "double_from"), 5, "kou.double_from: must be greater than single_from (7)"),
    ("kou threshold range", ("kou", "single_from"), 1, "kou.single_from: must be 2..27"),
    ("kou multipliers decrease", ("kou", "single"), 8, "kou.double: kou multipliers must not decrease"),
    ("level base zero", ("levels", 3, "base"), 0, "levels[3].base: Input should be greater than 0"),
    ("levels not ascending", ("levels", 4, "need"), 150, "levels[4].need: need must ascend"),
    ("points first level needs 0", ("levels", 0, "need"), 10, "levels[0].need: a points room's first level must need 0"),
    ("unknown bot level", ("bot_level",), "expert", "bot_level: Input should be 'easy', 'normal' or 'hard'"),
]


@pytest.mark.parametrize("what,path,value,expected", PROBLEMS, ids=[p[0] for p in PROBLEMS])
def test_each_problem_reported_with_key_path(what, path, value, expected):
    with pytest.raises(ConfigError) as exc:
        parse_config(_mutate("points", path, value), "room.toml")
    assert any(p.startswith(expected) for p in exc.value.problems), exc.value.problems


def test_every_problem_is_listed():
    data = _mutate("wealth", ("mode",), "coins")
    data["colour"] = "red"
    data["kou"]["flat"] = -1
    del data["levels"]
    with pytest.raises(ConfigError) as exc:
        parse_config(data, "room.toml")
    paths = sorted(p.split(":")[0] for p in exc.value.problems)
    assert paths == ["colour", "kou.flat", "levels", "mode"]


def test_bot_level_is_a_room_key():
    """``bot_level`` (issue 27): the level of a bot seated in the room; unset in the shipped rooms."""
    assert load_config("points").bot_level is None
    assert parse_config({**raw("points"), "bot_level": "hard"}, "room.toml").bot_level == "hard"


def test_wealth_first_level_may_need_coins():
    """R-11.1: a wealth room's first level may need coins (a player below it cannot sit)."""
    assert load_config("wealth").levels[0].need == 100


def test_missing_file_and_bad_toml(tmp_path: Path):
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path / "nope.toml")
    assert exc.value.problems == ["(file): file not found"]
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nmode = \n', encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_config(bad)
    assert exc.value.problems[0].startswith("(file): not valid TOML") and "line 2" in exc.value.problems[0]


# ---- shuangkou config check ----------------------------------------------------------------


def test_cli_ok(capsys):
    assert cli_main(["config", "check", "points", str(CONFIG_DIR / "wealth.toml")]) == 0
    assert capsys.readouterr().out.splitlines() == ["ok: points (points)", "ok: wealth (wealth)"]


def test_cli_problems_one_per_line(tmp_path: Path, capsys):
    text = (CONFIG_DIR / "points.toml").read_text(encoding="utf-8")
    text = text.replace("escape_transfer_ratio = 1.0", "escape_transfer_ratio = 2.0")
    text = text.replace("[doubling]", "colour = 1\n[doubling]")
    f = tmp_path / "room.toml"
    f.write_text(text, encoding="utf-8")
    assert cli_main(["config", "check", str(f)]) == 2
    out = capsys.readouterr()
    lines = out.err.splitlines()
    assert out.out == ""
    assert len(lines) == 2
    assert f"{f}: contribution.colour: not an xiang number (rows are 4..12)" in lines
    assert any(line.startswith(f"{f}: escape_transfer_ratio: ") for line in lines)


@pytest.mark.parametrize("content,fragment", [(None, "(file): file not found"),
                                               ("mode = [", "(file): not valid TOML"),
                                               ("", "name: missing")])
def test_cli_bad_files_exit_2_without_traceback(tmp_path: Path, capsys, content, fragment):
    f = tmp_path / "room.toml"
    if content is not None:
        f.write_text(content, encoding="utf-8")
    assert cli_main(["config", "check", str(f)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_cli_subprocess_exit_codes(tmp_path: Path):
    """The installed entry point: exit 0 / 2, never a traceback."""
    ok = subprocess.run([sys.executable, "-m", "shuangkou", "config", "check", "wealth"],
                        capture_output=True, text=True, timeout=60)
    assert (ok.returncode, ok.stdout.strip()) == (0, "ok: wealth (wealth)")
    bad = subprocess.run([sys.executable, "-m", "shuangkou", "config", "check", str(tmp_path / "x.toml")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "file not found" in bad.stderr and "Traceback" not in bad.stderr
