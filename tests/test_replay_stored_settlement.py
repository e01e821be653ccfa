"""``shuangkou replay --events FILE`` and ``replay --all --archive DIR`` compare every
stored settlement form of a file (the header's ``settlement`` and an archive's
``settlement_record``) with the settlement recomputed from the events (R-8.6,
R-12): exit 1 naming the differing keys, exit 0 when they agree.

One function does it, :func:`engine.tools.export.settlement_differences`."""

from __future__ import annotations

import json

import pytest

from shuangkou.cli import main
from engine.tools.export import export_text, parse_events_text, settlement_differences
from projections.settlement import settle
from tests.strategies import MatchSpec, play_match


@pytest.fixture(scope="module")
def finished():
    """A match that ended normally (R-8.6), with its settlement."""
    for seed in range(40):
        mid = f"st{seed}"
        events = play_match(MatchSpec(seed=seed, chaos=0.0), match_id=mid).store.load(mid)
        s = settle(events)
        if s is not None and s.kou != "escape":
            return mid, events, s
    raise AssertionError("no normal finish among 40 seeds")


def _archive_text(events, s) -> str:
    """An archive file as ``shuangkou archive`` writes it: both stored forms in the header."""
    text = export_text(events, s.to_json(), 1)
    header, _, rest = text.partition("\n")
    head = json.loads(header)
    head["settlement_record"] = json.loads(s.model_dump_json())
    return json.dumps(head) + "\n" + rest


def _tamper(text: str, form: str, key: str, value) -> str:
    header, _, rest = text.partition("\n")
    head = json.loads(header)
    if key == "scores":
        loser = min(head[form]["scores"], key=head[form]["scores"].get)
        head[form]["scores"] = {**head[form]["scores"], loser: value}
    elif key == "kou" and head[form]["kou"] == value:  # the deal is random: make it a real edit
        head[form]["kou"] = "flat" if value != "flat" else "single"
    else:
        head[form][key] = value
    return json.dumps(head) + "\n" + rest


TAMPERED = [  # (stored form, key, new value)
    ("settlement", "scores", -9999),
    ("settlement", "kou", "double"),
    ("settlement", "winner", "nobody"),
    ("settlement", "burned", 7),
    ("settlement", "cards_left", {}),
    ("settlement_record", "scores", -9999),
    ("settlement_record", "kou", "double"),
    ("settlement_record", "burned", 7),
]


@pytest.mark.parametrize("form,key,value", TAMPERED)
def test_replay_events_refuses_an_edited_stored_settlement(finished, tmp_path, capsys, form, key, value):
    mid, events, s = finished
    f = tmp_path / "t.jsonl"
    f.write_text(_tamper(_archive_text(events, s), form, key, value))
    assert main(["replay", "--events", str(f)]) == 1
    out = capsys.readouterr().out
    assert f"stored settlement differs from the replay: {key}: replayed " in out
    assert f"(stored form: {form})" in out
    assert "check: ok" not in out
    assert main(["replay", "--events", str(f), "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert len(problems) == 1 and problems[0].startswith(f"stored settlement differs from the replay: {key}: ")
    assert problems[0].endswith(f"(stored form: {form})")


@pytest.mark.parametrize("form,key,value", TAMPERED)
def test_replay_all_archive_refuses_an_edited_stored_settlement(finished, tmp_path, capsys, form, key, value):
    mid, events, s = finished
    folder = tmp_path / "arch"
    folder.mkdir()
    (folder / "x.jsonl").write_text(_tamper(_archive_text(events, s), form, key, value))
    assert main(["replay", "--all", "--archive", str(folder), "--json"]) == 1
    [rep] = json.loads(capsys.readouterr().out)
    assert [p for p in rep["problems"] if p.startswith(f"stored settlement differs from the replay: {key}: ")
            and p.endswith(f"(stored form: {form})")]


@pytest.mark.parametrize("archive", [False, True])
def test_an_untouched_file_checks_ok(finished, tmp_path, capsys, archive):
    mid, events, s = finished
    f = tmp_path / "t.jsonl"
    f.write_text(_archive_text(events, s) if archive else export_text(events, s.to_json(), 1))
    assert main(["replay", "--events", str(f)]) == 0
    out = capsys.readouterr().out
    assert "stored settlement: matches the replay" in out and "check: ok" in out
    assert main(["replay", "--all", "--archive", str(f)]) == 0


def test_both_forms_edited_gives_two_problems_and_names_every_key(finished, tmp_path, capsys):
    mid, events, s = finished
    text = _tamper(_tamper(_archive_text(events, s), "settlement", "scores", 1), "settlement_record", "kou", s.kou)
    text = _tamper(text, "settlement", "burned", s.burned + 3)
    parsed = parse_events_text(text)
    problems = settlement_differences(s.to_json(), parsed.stored_forms(mid))
    assert len(problems) == 2, problems
    assert problems[0].startswith("stored settlement differs from the replay: scores: ")
    assert f"; burned: replayed {s.burned} != stored {s.burned + 3} (stored form: settlement)" in problems[0]
    assert problems[1].startswith("stored settlement differs from the replay: kou: ")
    assert problems[1].endswith("(stored form: settlement_record)")


def test_a_stored_form_that_is_not_an_object_is_a_problem(finished):
    assert settlement_differences(finished[2].to_json(), {"settlement": [1]}) == [
        "stored settlement (settlement) is not an object: list"]
    assert settlement_differences(finished[2].to_json(), {}) == []
