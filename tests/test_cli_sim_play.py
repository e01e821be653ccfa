"""shuangkou simulate (embedded) and shuangkou play (piped stdin), as subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _run(args, stdin=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "shuangkou", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def test_simulate_embedded_prints_summary_and_exits_0():
    out = _run(["simulate", "-n", "20", "--seed", "7", "--no-progress"])
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    for needle in ("matches/s", "kou", "bombs by xiang", "score transfer", "20/20 matches replay",
                   "0 mismatches"):
        assert needle in text, needle


def test_simulate_json_with_escapes_and_timeouts():
    out = _run(["simulate", "-n", "20", "--seed", "3", "--config", "wealth", "--escape-rate", "0.5",
                "--timeout-rate", "0.2", "--json"])
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert data["finished"] == 20 and data["replayed_ok"] == 20 and data["ledger_checked"] == 20
    assert data["mismatches"] == [] and data["errors"] == []
    assert sum(data["kou"].values()) == 20
    assert data["timeouts"] > 0 and sum(data["escapes"].values()) > 0
    assert data["kou"].get("escape", 0) > 0  # wealth room: escape policy forfeit
    assert 0 < data["cpu_seconds"] and data["seconds"] > 0  # the play's own CPU (bench/pipeline.py's driver)


def test_simulate_escape_rate_one_escapes_in_every_match():
    """``--escape-rate P`` is the share of matches with an escape: the moment is drawn over 80
    turns, and a match that would end before it (most do) escapes before the bot's last play.
    It had been about a fifth of P (9 escapes in 100 matches at 0.5, seed 3)."""
    out = _run(["simulate", "-n", "12", "--seed", "3", "--config", "wealth", "--escape-rate", "1", "--json"])
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert data["finished"] == 12 and data["errors"] == [] and data["mismatches"] == []
    assert sum(data["escapes"].values()) == 12 and data["kou"].get("escape") == 12


@pytest.mark.parametrize("level", ["easy", "normal", "hard"])
def test_simulate_plays_every_bot_level(level):
    """``simulate --bot hard`` (issue 27): the levels play whole matches through the pipeline."""
    out = _run(["simulate", "-n", "2", "--seed", "5", "--bot", level, "--json"])
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert data["finished"] == 2 and data["errors"] == [] and data["mismatches"] == []


@pytest.mark.parametrize("command", ["play", "simulate"])
def test_an_unknown_bot_level_is_refused(command):
    out = _run([command, "--bot", "expert"], stdin="")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "invalid choice: 'expert'" in out.stderr and "'easy', 'normal', 'hard'" in out.stderr


def test_simulate_is_reproducible_with_a_seed():
    a = json.loads(_run(["simulate", "-n", "5", "--seed", "11", "--json"]).stdout)
    b = json.loads(_run(["simulate", "-n", "5", "--seed", "11", "--json"]).stdout)
    for key in ("kou", "bombs_per_match", "transfer", "events"):
        assert a[key] == b[key], key


BAD_SIMULATE = [
    (["-n", "0"], "-n must be at least 1"),
    (["-n", "-3"], "-n must be at least 1"),
    (["--timeout-rate", "2"], "--timeout-rate must be between 0 and 1"),
    (["--config", "/nonexistent.toml"], "file not found"),
    (["--concurrency", "0"], "--concurrency must be at least 1"),
    (["--service-threads", "-1"], "--service-threads must be at least 1"),
    (["--turn-seconds", "-1"], "--turn-seconds must be above 0"),
    (["--turn-seconds", "nan"], "--turn-seconds must be above 0"),
    (["--turn-seconds", "0.3"], "--turn-seconds must be 1..3600 s (a room's turn clock), got 0.3"),
    (["--turn-seconds", "5000"], "--turn-seconds must be 1..3600 s (a room's turn clock), got 5000"),
    (["--redis", "not-a-url"], "is not a Redis URL"),
    (["--redis", "redis://127.0.0.1:1/0"], "cannot reach redis://127.0.0.1:1/0"),
]


@pytest.mark.parametrize("args,message", BAD_SIMULATE, ids=[" ".join(a) for a, _ in BAD_SIMULATE])
def test_simulate_bad_options_exit_2(args, message):
    """Bad options: exit 2 with one readable line, never a traceback."""
    out = _run(["simulate", "-n", "1", *args] if "-n" not in args else ["simulate", *args])
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


BAD_SERVE = [
    (["--redis", "not-a-url"], "is not a Redis URL"),
    (["--redis", "redis://127.0.0.1:1/0"], "cannot reach redis://127.0.0.1:1/0"),
    (["--redis", "redis://127.0.0.1:1/0", "--batch", "0"], "--batch must be at least 1"),
    (["--redis", "redis://127.0.0.1:1/0", "--metrics-port", "70000"], "--metrics-port must be 0..65535"),
]


@pytest.mark.parametrize("args,message", BAD_SERVE, ids=[" ".join(a) for a, _ in BAD_SERVE])
def test_serve_bad_options_exit_2(args, message):
    out = _run(["serve", *args], timeout=60)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr


def test_play_piped_until_the_match_ends():
    out = _run(["play", "--seed", "3"], stdin="help\nhint\n" + "auto\n" * 300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Your hand (27)" in out.stdout
    assert "Settlement" in out.stdout
    assert "You win." in out.stdout or "The bot wins." in out.stdout
    assert "you wins" not in out.stdout.lower() and "{'" not in out.stdout
    assert "the bot's clock ran out" not in out.stdout


def test_play_against_the_hard_bot():
    """``play --bot hard`` (issue 27): the terminal opponent is the same bot as everywhere."""
    out = _run(["play", "--seed", "4", "--bot", "hard"], stdin="auto\n" * 300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "You win." in out.stdout or "The bot wins." in out.stdout
    assert "the bot's move was refused" not in out.stdout


def test_play_shows_rejections_and_exits_cleanly_on_eof():
    out = _run(["play", "--seed", "4"], stdin="3\nfoo\n2 2 2 2 2 2\npass\n")  # seed 4: you lead, one 2
    assert out.returncode == 0, out.stdout + out.stderr
    assert "you play 3" in out.stdout
    assert "bad card token 'foo'" in out.stdout
    assert "Not accepted: you do not hold 2 2 2 2 2 (you named 2 2 2 2 2 2" in out.stdout
    assert "end of input" in out.stdout


def test_play_quit_asks_states_the_price_then_escapes_and_settles():
    out = _run(["play", "--seed", "1", "--config", "wealth"], stdin="quit\nno\nquit\nyes\n")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "escape policy is forfeit (R-12.3" in text and "you pay 1200 coins" in text
    assert "You stay in the match." in text
    assert text.index("You stay in the match.") < text.index("you escaped (escape policy forfeit)")
    assert "Settlement" in text and "You escaped: the match was forfeited" in text
    assert "You: -1200 coins." in text


def test_play_quit_then_end_of_input_does_not_escape():
    out = _run(["play", "--seed", "1"], stdin="quit\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Type 'yes' (or 'y') to escape" in out.stdout and "escaped (escape policy" not in out.stdout
    assert "end of input" in out.stdout


@pytest.mark.parametrize("line", ["pass"])
def test_play_cannot_pass_when_leading(line):
    # seed 3: you lead the first trick (the fair deal of play-3, docs/FAIRNESS.md)
    out = _run(["play", "--seed", "3"], stdin=f"{line}\n")
    assert out.returncode == 0
    assert "Not accepted: you must play" in out.stdout


BAD_PLAY = [
    (["--turn-seconds", "0"], "--turn-seconds must be a number of seconds above 0"),
    (["--turn-seconds", "-1"], "--turn-seconds must be a number of seconds above 0"),
    (["--turn-seconds", "abc"], "got 'abc'"),
    (["--turn-seconds", "nan"], "--turn-seconds must be"),
    (["--turn-seconds", "inf"], "--turn-seconds must be"),
    (["--turn-seconds", "1e12"], "at most 86400"),
    (["--bot-seconds", "-0.5"], "--bot-seconds must be a number of seconds 0 or more"),
    (["--config", "/nonexistent.toml"], "file not found"),
]


@pytest.mark.parametrize("args,message", BAD_PLAY, ids=[" ".join(a) for a, _ in BAD_PLAY])
def test_play_bad_options_exit_2(args, message):
    """Bad options: one readable line on stderr, exit 2, never a traceback (and no game starts)."""
    out = _run(["play", *args], stdin="")
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Your hand" not in out.stdout


@pytest.mark.redis
def test_simulate_against_redis_publishes_the_timer_moves_to_the_players(real_redis, redis_server, tmp_path):
    """``simulate --redis``: the in-process timers' moves (here the trustee's plays after an
    escape, R-12.1) reach the players' ``sk:out:{<player>}`` streams, as serve's do."""
    from gateway import outbox
    from tests.gateway_support import write_room

    room = write_room(tmp_path / "trust.toml", "trust", escape_policy="trustee", trustee_delay_seconds=0.0)
    out = _run(["simulate", "-n", "2", "--seed", "4", "--redis", redis_server.url, "--config", str(room),
                "--escape-rate", "1.0", "--prefix", "simt-", "--json", "--no-progress"], timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    timer_updates = 0
    for raw in real_redis.scan_iter(match="sk:out:*"):
        for entry_id, fields in real_redis.xrange(raw):
            e = outbox.parse_entry(entry_id, fields)
            if e.kind == "update" and e.match.startswith("simt-") and e.command_id.startswith("timer:"):
                timer_updates += 1
    assert timer_updates > 0
