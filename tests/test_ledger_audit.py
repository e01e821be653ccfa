"""Issue 35 §5: ``replay --all`` and ``reconcile`` cross-check the ledger against the log
(projections/audit.py).  A settlement or a journal line for a match the log does not hold
or finish, or whose settlement differs from the log's, is a problem: exit 1, the match
named.  Each rule is shown on a crafted store, each with a sound store beside it (exit 0)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from engine.store.memory import InMemoryEventStore
from engine.store.redis_store import RedisEventStore
from projections.audit import audit_ledger
from projections.ledger import InMemoryLedger, LedgerEntry, RedisLedger, journal_key
from projections.settlement import Settlement, settle
from shuangkou.cli import main
from tests.strategies import MatchSpec, play_match


def _finished_events(mid: str) -> list[Any]:
    """The events of a match that ended normally (a settlement that moves points)."""
    for seed in range(40):
        events = play_match(MatchSpec(seed=seed, chaos=0.0), match_id=mid).store.load(mid)
        s = settle(events)
        if s is not None and s.kou != "escape" and any(s.scores.values()):
            return events
    raise AssertionError("no normal finish among 40 seeds")


def _copy(store: Any, mid: str, events: list[Any]) -> None:
    for e in events:
        store.append(mid, e.seq - 1, f"copy{e.seq}", [e], None)


def _shifted(s: Settlement) -> Settlement:
    """``s`` with one point moved from the winner to the loser (still zero-sum)."""
    scores = dict(s.scores)
    scores[s.winner] -= 1
    scores[s.loser] += 1
    return s.model_copy(update={"scores": scores})


# -- the rules, on the in-memory pair --------------------------------------------------------
def _sound(store: Any, ledger: Any) -> None:
    events = _finished_events("ok")
    _copy(store, "ok", events)
    ledger.apply_settlement("ok", settle(events))


def _settled_not_in_log(store: Any, ledger: Any) -> str:
    ledger.apply_settlement("gone", settle(_finished_events("gone")))
    return "the ledger holds a settlement of a match the log does not hold"


def _settled_not_finished(store: Any, ledger: Any) -> str:
    events = _finished_events("cut")
    _copy(store, "cut", events[: len(events) // 2])  # the finish was lost with its master
    ledger.apply_settlement("cut", settle(events))
    return "the ledger holds a settlement of a match the log does not finish"


def _settlement_differs(store: Any, ledger: Any) -> str:
    events = _finished_events("diff")
    _copy(store, "diff", events)
    ledger.apply_settlement("diff", _shifted(settle(events)))
    return "the ledger's settlement differs from the log's: scores: "


def _journal_without_settlement(store: Any, ledger: Any) -> str:
    entry = LedgerEntry("settlement", "a", "points", 40, "stray", 1, reason="match settlement")
    if isinstance(ledger, RedisLedger):
        ledger.client.hset(journal_key("a"), entry.journal_field, entry.to_json())
    else:
        ledger._journal.setdefault("a", {})[entry.journal_field] = entry
    return "a's journal holds a settlement line of 40 for a match the ledger has not settled"


RULES: list[tuple[str, Callable[[Any, Any], str], str]] = [
    ("settled, not in the log", _settled_not_in_log, "gone"),
    ("settled, the log does not finish it", _settled_not_finished, "cut"),
    ("the settlement differs from the log's", _settlement_differs, "diff"),
    ("a journal line with no settlement", _journal_without_settlement, "stray"),
]


@pytest.mark.parametrize("name, craft, mid", RULES, ids=[r[0] for r in RULES])
def test_each_rule_fails_when_broken_and_only_then(name, craft, mid):
    store, ledger = InMemoryEventStore(), InMemoryLedger()
    _sound(store, ledger)
    assert audit_ledger(store, ledger) == []
    expected = craft(store, ledger)
    found = audit_ledger(store, ledger)
    assert [m.match_id for m in found if m.match_id == mid] and all(m.match_id == mid for m in found), found
    assert any(m.problem.startswith(expected) for m in found), found


def test_a_journal_line_that_differs_from_its_settlement_is_named():
    store, ledger = InMemoryEventStore(), InMemoryLedger()
    _sound(store, ledger)
    s = ledger.settlement("ok")
    assert s is not None
    entry = LedgerEntry("settlement", s.winner, "points", s.scores[s.winner] + 5, "ok", 1, reason="match settlement")
    ledger._journal[s.winner][entry.journal_field] = entry
    [m] = audit_ledger(store, ledger)
    assert (m.match_id, m.player) == ("ok", s.winner)
    assert m.problem == (f"{s.winner}'s journal line of {s.scores[s.winner] + 5} differs from the "
                         f"settlement's {s.scores[s.winner]}")


# -- the commands, on a real Redis -------------------------------------------------------------
@pytest.mark.redis
@pytest.mark.parametrize("name, craft, mid", RULES, ids=[r[0] for r in RULES])
def test_replay_all_and_reconcile_exit_1_naming_the_match(name, craft, mid, real_redis, redis_server, capsys):
    store, ledger = RedisEventStore(real_redis), RedisLedger(real_redis)
    url = redis_server.url
    _sound(store, ledger)
    assert main(["replay", "--all", "--redis", url]) == 0
    assert main(["reconcile", "--redis", url]) == 0
    capsys.readouterr()
    expected = craft(store, ledger)
    assert main(["replay", "--all", "--redis", url]) == 1
    out = capsys.readouterr().out
    assert f"{mid}: " in out and "ok: " in out
    assert "problem: " in out and (expected in out or "stored settlement differs from the replay" in out), out
    assert main(["replay", "--all", "--redis", url, "--json"]) == 1
    reports = {r["match_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert reports[mid]["problems"] and not reports["ok"]["problems"]
    assert main(["reconcile", "--redis", url]) == 1
    out = capsys.readouterr().out
    assert f"ledger mismatch {mid}: {expected}" in out, out
    assert main(["reconcile", "--redis", url, "--json"]) == 1
    mismatches = json.loads(capsys.readouterr().out)["ledger_mismatches"]
    assert {m["match_id"] for m in mismatches} == {mid}
