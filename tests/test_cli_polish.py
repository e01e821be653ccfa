"""Command-line polish: a closed output pipe ends any command quietly (no traceback);
a usage error is one line naming the command and a pointer to its ``--help``; the replay
of an escape is headed by its own rule (R-12), not the normal-end formula (R-8.6), with a
readable doubling term; "1 card", not "1 cards" (R-7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shuangkou.cli import EXIT_BROKEN_PIPE, main

ROOT = Path(__file__).resolve().parent.parent


def _to_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """Run ``shuangkou ARGS`` with stdout a pipe nobody reads (what ``| head -c 300`` leaves)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        return subprocess.run([sys.executable, "-m", "shuangkou", *args], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)


@pytest.fixture(scope="module")
def escape_events(tmp_path_factory) -> Path:
    """run-script --json of the escape example (R-12.2 points forfeit)."""
    out = subprocess.run([sys.executable, "-m", "shuangkou", "run-script", "examples/escape_forfeit.json", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         timeout=120)
    assert out.returncode == 0, out.stderr
    f = tmp_path_factory.mktemp("esc") / "escape.json"
    f.write_text(out.stdout, encoding="utf-8")
    return f


@pytest.mark.parametrize("args", [
    ["run-script", "examples/normal_win.json"],
    ["run-script", "examples/normal_win.json", "--json"],
    ["classify", "3 3 4 4 5 5"],
    ["replay", "--events", "ESCAPE"],
    ["--help"],
], ids=lambda a: " ".join(a[:2]))
def test_a_closed_output_pipe_ends_quietly(args, escape_events):
    args = [str(escape_events) if a == "ESCAPE" else a for a in args]
    out = _to_closed_pipe(*args)
    assert "Traceback" not in out.stderr and "BrokenPipeError" not in out.stderr, out.stderr
    assert "Exception ignored" not in out.stderr
    assert out.returncode in (0, EXIT_BROKEN_PIPE)
    if args[0] != "--help":  # argparse swallows the write error of --help itself (exit 0)
        assert out.returncode == EXIT_BROKEN_PIPE


def test_escape_replay_has_its_own_heading_and_a_readable_doubling_term(escape_events, capsys):
    assert main(["replay", "--events", str(escape_events)]) == 0
    text = capsys.readouterr().out
    assert "settlement (R-12 escape:" in text
    assert "R-8.6: W gets" not in text  # the normal-end formula does not apply
    assert "b_O = 1 → 0 = 0" not in text and "D = 0 (b_O = 1: no doubling)" in text


def test_normal_end_keeps_the_r86_heading(tmp_path, capsys):
    assert main(["run-script", "examples/normal_win.json", "--json"]) == 0
    f = tmp_path / "n.json"
    f.write_text(capsys.readouterr().out, encoding="utf-8")
    assert main(["replay", "--events", str(f)]) == 0
    text = capsys.readouterr().out
    assert "settlement (R-8.6: W gets X·a·b + X·(c_W − c_L); L the negation):" in text
    assert "R-12 escape" not in text


@pytest.mark.parametrize("left, says", [(1, "holds 1 card → "), (0, "holds 0 cards"), (7, "holds 7 cards"),
                                        (None, "holds ? cards")])
def test_kou_source_counts_cards_in_good_english(left, says):
    from projections import settlement

    assert f"holds {settlement._cards_count(left)}" == says.split(" → ")[0]


def test_settlement_doctests():
    import doctest

    from projections import settlement, timeline

    assert doctest.testmod(settlement).failed == 0 and doctest.testmod(timeline).failed == 0


@pytest.mark.parametrize("left, says", [(1, "R-7: b holds 1 card → flat"), (2, "R-7: b holds 2 cards → flat"),
                                        (9, "R-7: b holds 9 cards → single")])
def test_the_kou_source_of_a_settlement_counts_cards(left, says):
    from projections.settlement import settle
    from tests.test_settlement import build

    assert settle(build(left=left)).breakdown["a_from"] == says


def test_replay_prints_the_cards_of_a_bomb_with_the_notations_separators(tmp_path, capsys):
    """Issue 36: "played 10 10 10 10 SJ (5-xiang)", never "10101010+SJ" (R-3.7, R-4.3)."""
    import json

    script = {"title": "a bomb of 10s with a wild joker", "config": "points",
              "players": [{"id": "a", "points": 0}, {"id": "b", "points": 0}],
              "deal": {"hands": ["10 10 10 10 SJ 3", "4 5 6 BJ BJ"], "first": 0},
              "actions": [{"player": "a", "play": "10 10 10 10 SJ"}, {"player": "a", "play": "3"}]}
    (tmp_path / "s.json").write_text(json.dumps(script), encoding="utf-8")
    assert main(["run-script", str(tmp_path / "s.json"), "--json"]) == 0
    (tmp_path / "e.json").write_text(capsys.readouterr().out, encoding="utf-8")
    assert main(["replay", "--events", str(tmp_path / "e.json")]) == 0
    text = capsys.readouterr().out
    assert "effective xiang of a: 5 (played 10 10 10 10 SJ (5-xiang))" in text
    assert "a plays 10 10 10 10 SJ -- 5-xiang bomb of 10" in text
    assert "1010" not in text and "+SJ" not in text


@pytest.mark.parametrize("argv, command, says", [
    (["serve", "--bogus"], "shuangkou serve", "unrecognized arguments: --bogus"),
    (["simulate", "-n", "x"], "shuangkou simulate", "argument -n/--matches: invalid int value: 'x'"),
    (["gateway", "--port", "1"], "shuangkou gateway", "the following arguments are required: --secret-file"),
    (["integrity", "scan", "--nope"], "shuangkou integrity scan", "unrecognized arguments: --nope"),
    (["room", "list", "--x"], "shuangkou room list", "unrecognized arguments: --x"),
    (["bogus"], "shuangkou", "argument COMMAND: invalid choice: 'bogus'"),
    ([], "shuangkou", "the following arguments are required: COMMAND"),
])
def test_a_usage_error_is_one_line_that_names_the_command(argv, command, says, capsys):
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert refused.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"{command}: {says}"), lines
    assert lines[1:] == [f"Try '{command} --help'."]


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5", "::", "example.com"])
def test_dev_tokens_are_refused_on_a_reachable_host(tmp_path, capsys, host):
    """``--dev`` lets anyone who reaches the port mint an operator token: the gateway refuses
    to start with it on anything but a loopback address (the security review of 2026-12-06),
    before it reads its secret or connects to Redis."""
    assert main(["gateway", "--dev", "--host", host, "--redis", "redis://127.0.0.1:1/0",
                 "--secret-file", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "--dev" in err and "loopback" in err and repr(host) in err


@pytest.mark.parametrize("flags, says", [
    (["--token-max-lifetime", "0"], "must be positive"),
    (["--token-max-lifetime", "-5"], "must be positive"),
    (["--token-audience", " "], "audience must not be empty"),
    (["--token-issuer", ""], "issuer must not be empty"),
])
def test_a_token_policy_that_takes_nothing_is_refused_at_start(tmp_path, capsys, flags, says):
    """--token-max-lifetime, --token-audience and --token-issuer (docs/SECURITY.md): a value
    that no token could meet stops the gateway before it reads its secret or connects."""
    assert main(["gateway", "--redis", "redis://127.0.0.1:1/0", "--secret-file", str(tmp_path / "none"),
                 *flags]) == 2
    err = capsys.readouterr().err
    assert says in err and "--token-max-lifetime" in err
