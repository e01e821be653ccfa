"""The nemesis checker (tests/nemesis/checker.py, issue 35 §2) on crafted histories: a clean
history passes, and each rule, broken on its own, is counted under its own name and no other."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.nemesis.checker import (
    COUNTERS,
    Ack,
    Fault,
    Final,
    GaveUp,
    History,
    Limits,
    Read,
    Sent,
    by_fault,
    check,
    others_throughput,
    stall_s_max,
)

LIMITS = Limits(ready_s=5, turn_s=3, grace_s=2, slack_s=30)  # bound: 5 + 6 + 2 + 30 = 43 s
T0 = 1_000_000


def ev(seq: int, type_: str, cid: str, **fields: Any) -> dict[str, Any]:
    return {"seq": seq, "type": type_, "command_id": cid, "ts": T0 + seq * 100, **fields}


def clean() -> tuple[History, Final]:
    """Match m1: created, two seats, both ready (the deal), a play, a pass, a timeout, the finish;
    alice's client sent c-play and c-pass and read every update from version 4 on."""
    log = [ev(1, "MatchCreated", "lobby:c"), ev(2, "PlayerSeated", "lobby:s1", player="alice"),
           ev(3, "PlayerSeated", "lobby:s2", player="bob"), ev(4, "PlayerReady", "c-ready", player="alice"),
           ev(5, "PlayerReady", "b-ready", player="bob"), ev(6, "HandDealt", "b-ready"),
           ev(7, "CardsPlayed", "c-play", player="alice", cards=[0]), ev(8, "Passed", "b-pass", player="bob"),
           ev(9, "TurnTimedOut", "timer:9", player="alice", count=1),
           ev(10, "MatchFinished", "timer:9", winner="bob", loser="alice")]
    reads = [Read("alice", "m1", 4, T0 + 450, (log[3],), turn=None, deadline_ms=T0 + 30_000),
             Read("alice", "m1", 6, T0 + 650, (log[4], {**log[5], "hands": None}), turn="alice",
                  deadline_ms=T0 + 3_600),
             Read("alice", "m1", 7, T0 + 750, (log[6],), turn="bob", deadline_ms=T0 + 3_700),
             Read("alice", "m1", 8, T0 + 850, (log[7],), turn="alice", deadline_ms=T0 + 3_800),
             Read("alice", "m1", 10, T0 + 1_050, (log[8], log[9]), turn=None),
             Read("alice", "m1", 7, T0 + 1_100, (log[6],), duplicate=True)]  # a redelivery, late
    acks = [Ack("alice", "m1", "c-ready", "accepted", T0 + 420, 4), Ack("alice", "m1", "c-play", "update", T0 + 750, 7),
            Ack("alice", "m1", "c-play", "duplicate", T0 + 1_100, 7)]
    faults = [Fault("kill_master", T0 + 500, T0 + 600)]
    final = Final(log={"m1": log}, booked={"m1": {"alice": -10, "bob": 10}},
                  settled={"m1": {"alice": -10, "bob": 10}}, balances={"alice": 90, "bob": 10},
                  opening={"alice": 100})
    return History(acks, reads, faults), final


def counts(history: History, final: Final) -> dict[str, int]:
    return {k: v for k, v in check(history, final, LIMITS).summary().items() if v and k != "acked"}


def test_a_clean_history_passes():
    h, f = clean()
    report = check(h, f, LIMITS)
    assert report.ok, report.findings
    assert report.summary() == {**{k: 0 for k in COUNTERS}, "acked": 2}


def test_an_acknowledged_command_missing_from_the_log_is_lost():
    h, f = clean()
    h.acks.append(Ack("alice", "m1", "c-gone", "accepted", T0 + 550, 11))
    assert counts(h, f) == {"acked_lost": 1}


def test_a_command_that_appended_nothing_is_found_in_the_command_record():
    h, f = clean()
    h.acks.append(Ack("alice", "m1", "c-noop", "accepted", T0 + 550, 10))
    assert counts(h, f) == {"acked_lost": 1}
    f.recorded["m1"] = {"c-noop"}
    assert counts(h, f) == {}


def test_an_acknowledgement_lost_with_its_whole_match_is_lost():
    h, f = clean()
    h.acks.append(Ack("alice", "m2", "c-x", "duplicate", T0 + 550))
    assert counts(h, f) == {"acked_lost": 1}


def test_a_command_applied_twice_is_a_duplicate_applied():
    h, f = clean()
    log = list(f.log["m1"])
    log[8] = ev(9, "CardsPlayed", "c-play", player="alice", cards=[0])  # c-play at 7 and again at 9
    f.log["m1"] = log
    h.reads[4] = dataclasses.replace(h.reads[4], events=(log[8], log[9]))
    assert counts(h, f) == {"duplicates_applied": 1}


def test_an_update_read_at_a_version_the_log_does_not_have_is_not_in_the_store():
    h, f = clean()
    f.log["m1"] = f.log["m1"][:9]  # the finish lost
    f.settled, f.booked, f.balances, f.opening = {}, {}, {}, {}
    assert counts(h, f) == {"updates_not_in_store": 1, "late_ends": 1}  # and so it never ended


def test_an_update_whose_seq_the_log_holds_with_another_event_is_not_in_the_store():
    h, f = clean()
    log = list(f.log["m1"])
    log[6] = ev(7, "CardsPlayed", "c-other", player="alice", cards=[5])  # seq 7 rewritten
    f.log["m1"] = log
    h.acks.pop(1)  # c-play's acknowledgements aside: this test is about the read
    h.acks.pop(1)
    assert counts(h, f) == {"updates_not_in_store": 2}  # the update and its redelivery


def test_redacted_fields_are_not_compared():
    h, f = clean()
    assert h.reads[1].events[1]["hands"] is None and "hands" not in f.log["m1"][5]
    assert counts(h, f) == {}


def test_a_skipped_version_is_a_gap():
    h, f = clean()
    del h.reads[2]  # version 7 never read: 8 comes after 6 (and no redelivery of it)
    del h.reads[-1]
    assert counts(h, f) == {"version_gaps": 1}


def test_a_resync_view_may_skip_versions():
    h, f = clean()
    del h.reads[2]
    h.reads[2] = dataclasses.replace(h.reads[2], view=True, events=())
    assert counts(h, f) == {}


def test_a_version_going_back_is_counted_unless_it_is_a_redelivery():
    h, f = clean()
    h.reads[-1] = dataclasses.replace(h.reads[-1], duplicate=False)
    assert counts(h, f) == {"version_backwards": 1}


def test_a_match_live_at_a_heal_must_end_within_the_bound():
    h, f = clean()
    assert LIMITS.end_bound_ms == 43_000
    late = T0 + 600 + 43_001
    f.log["m1"][-1] = {**f.log["m1"][-1], "ts": late}
    h.reads[-2] = dataclasses.replace(h.reads[-2], events=(h.reads[-2].events[0], f.log["m1"][-1]))
    assert counts(h, f) == {"late_ends": 1}
    f.log["m1"][-1] = {**f.log["m1"][-1], "ts": late - 1}
    h.reads[-2] = dataclasses.replace(h.reads[-2], events=(h.reads[-2].events[0], f.log["m1"][-1]))
    assert counts(h, f) == {}


def test_a_match_that_never_ends_is_late():
    h, f = clean()
    f.log["m1"] = f.log["m1"][:9]
    f.settled, f.booked, f.balances, f.opening = {}, {}, {}, {}
    h.reads.pop(-2)  # the finish's update aside
    assert counts(h, f) == {"late_ends": 1}


def test_a_match_born_after_the_heal_is_not_bound_by_it():
    h, f = clean()
    h.faults[0] = Fault("kill_master", T0 - 2_000, T0 - 1_000)
    assert counts(h, f) == {}


@pytest.mark.parametrize("change, n", [
    ("booked_unfinished", 3),  # booked for a match the log does not finish; both balances moved
    ("booked_differs", 3),  # the match and both balances
    ("never_booked", 3),
    ("booked_twice", 2),  # the balances hold the settlement twice
])
def test_the_ledger_must_equal_the_logs_settlements_each_once(change, n):
    h, f = clean()
    if change == "booked_unfinished":
        f.booked["m9"] = {"alice": 5, "bob": -5}
        f.balances = {"alice": 95, "bob": 5}
    elif change == "booked_differs":
        f.booked["m1"] = {"alice": -20, "bob": 20}
        f.balances = {"alice": 80, "bob": 20}
    elif change == "never_booked":
        f.booked = {}
        f.balances = {"alice": 100}
    else:
        f.balances = {"alice": 80, "bob": 20}
    assert counts(h, f) == {"ledger_mismatches": n}


def test_a_timeout_for_a_turn_whose_update_came_late_or_never_is_charged_to_the_outage():
    h, f = clean()
    late = dataclasses.replace(h.reads[3], at_ms=h.reads[3].deadline_ms + 1)
    h.reads[3] = late
    assert counts(h, f) == {"outage_timeouts_charged": 1}
    del h.reads[3]  # never read (and so a gap in alice's versions too)
    assert counts(h, f) == {"outage_timeouts_charged": 1, "version_gaps": 1}


def test_a_timeout_after_the_update_came_in_time_is_the_players():
    h, f = clean()
    assert h.reads[3].at_ms <= h.reads[3].deadline_ms
    assert counts(h, f) == {}


def test_findings_go_to_the_nearest_fault_and_stalls_are_measured():
    h, f = clean()
    h.acks.append(Ack("alice", "m1", "c-gone", "accepted", T0 + 20_000))
    h.faults.append(Fault("partition_master", T0 + 19_000, T0 + 25_000))
    report = check(h, f, LIMITS)
    rows = by_fault(report, h)
    assert rows["partition_master"]["acked_lost"] == 1 and rows["kill_master"]["acked_lost"] == 0
    assert rows["kill_master"]["acked"] == 2 and rows["partition_master"]["acked"] == 1
    assert rows["kill_master"]["faults"] == rows["partition_master"]["faults"] == 1
    assert stall_s_max([T0 + 1_000, T0 + 4_000], T0, T0 + 5_000) == 3.0
    assert stall_s_max([], T0, T0 + 5_000) == 5.0


def test_a_balance_off_goes_with_its_players_mismatched_match_and_a_double_booking_with_none():
    h, f = clean()
    f.booked["m1"] = {"alice": -20, "bob": 20}
    f.balances = {"alice": 80, "bob": 20}
    report = check(h, f, LIMITS)
    assert {x.at_ms for x in report.findings} == {f.log["m1"][-1]["ts"]}
    assert by_fault(report, h)["kill_master"]["ledger_mismatches"] == 3
    h2, f2 = clean()
    f2.balances = {"alice": 80, "bob": 20}  # m1 booked twice: the match itself agrees
    report = check(h2, f2, LIMITS)
    assert report.summary()["ledger_mismatches"] == 2 and all(x.at_ms is None for x in report.findings)
    assert by_fault(report, h2)["kill_master"]["ledger_mismatches"] == 0


def test_a_booking_for_a_match_the_log_lost_whole_has_its_last_acknowledgements_time():
    h, f = clean()
    h.acks.append(Ack("alice", "m7", "c-7", "accepted", T0 + 20_000))
    h.faults.append(Fault("partition_master", T0 + 19_000, T0 + 25_000))
    f.booked["m7"] = {"alice": 5, "bob": -5}
    f.balances = {"alice": 95, "bob": 5}
    report = check(h, f, LIMITS)
    assert by_fault(report, h)["partition_master"]["ledger_mismatches"] == 3
    assert by_fault(report, h)["partition_master"]["acked_lost"] == 1


def test_a_matchs_later_findings_go_with_the_fault_of_its_first():
    h, f = clean()
    h.faults.append(Fault("lose_master", T0 + 60_000, T0 + 61_000))
    f.log["m1"][-1] = {**f.log["m1"][-1], "ts": T0 + 60_500}  # the finish, near the second fault
    h.reads[-2] = dataclasses.replace(h.reads[-2], events=(h.reads[-2].events[0], f.log["m1"][-1]))
    f.booked["m1"] = {"alice": -20, "bob": 20}  # found at the finish's time ...
    f.balances = {"alice": 80, "bob": 20}
    h.acks.append(Ack("alice", "m1", "c-gone", "accepted", T0 + 550))  # ... after a loss at the first
    rows = by_fault(check(h, f, LIMITS), h)
    assert rows["kill_master"]["ledger_mismatches"] == 3 and rows["kill_master"]["acked_lost"] == 1
    assert rows["lose_master"]["ledger_mismatches"] == 0


def test_a_redelivery_that_fills_a_gap_late_leaves_none():
    h, f = clean()
    seven = h.reads.pop(2)
    h.reads.append(dataclasses.replace(seven, duplicate=True, at_ms=T0 + 2_000))  # 7 after 8, 10: a redelivery
    assert counts(h, f) == {}


def test_without_root_or_nft_the_nemesis_says_why(monkeypatch):
    import shutil

    from tests.nemesis import netns

    real_which = shutil.which
    monkeypatch.setattr(netns.shutil, "which", lambda t: None if t == "nft" else real_which(t) or f"/usr/sbin/{t}")
    assert "nftables" in (netns.unavailable() or "")
    monkeypatch.setattr(netns.shutil, "which", lambda t: f"/usr/sbin/{t}")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert "root" in (netns.unavailable() or "")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    assert netns.unavailable() is None


def test_the_other_masters_throughput_is_their_rate_during_a_partition_over_the_30_s_before():
    """60 commands of m-other in the 30 s before a 6 s partition (2/s), 9 during it (1.5/s):
    0.75; m-cut's stall and a command acknowledged twice do not count (issue 35 §3's target)."""
    fault = Fault("partition_master", T0 + 30_000, T0 + 36_000)
    acks = [Ack("c", "m-other", f"o{i}", "accepted", T0 + 500 * i) for i in range(60)]
    acks += [Ack("c", "m-other", f"d{i}", "accepted", T0 + 30_000 + 600 * i) for i in range(9)]
    acks += [Ack("c", "m-other", "d0", "update", T0 + 30_700)]  # the same command again
    acks += [Ack("c", "m-cut", f"x{i}", "accepted", T0 + 100 * i) for i in range(200)]
    row = others_throughput(acks, fault, lambda m: m == "m-cut")
    assert row == {"before_per_s": 2.0, "during_per_s": 1.5, "before_s": 30.0, "ratio": 0.75}
    # clipped at the previous fault's heal: only the last 10 s before count (20 commands)
    assert others_throughput(acks, fault, lambda m: m == "m-cut", T0 + 20_000)["before_s"] == 10.0
    assert others_throughput(acks[60:], fault, lambda m: m == "m-cut")["ratio"] is None


def unready() -> tuple[History, Final]:
    """Match m2: alice and bob seated at 2, 3; bob is removed by the ready clock at 5 (deadline
    T0 + 10 s, the abandon at T0 + 10.5 s); bob read version 3 (his seat) at T0 + 1 s."""
    log = [{"seq": 1, "type": "MatchCreated", "command_id": "c", "ts": T0},
           {"seq": 2, "type": "PlayerSeated", "command_id": "s1", "ts": T0 + 100, "player": "alice"},
           {"seq": 3, "type": "PlayerSeated", "command_id": "s2", "ts": T0 + 200, "player": "bob"},
           {"seq": 4, "type": "PlayerReady", "command_id": "r1", "ts": T0 + 300, "player": "alice"},
           {"seq": 5, "type": "PlayerRemoved", "command_id": "timer:5", "ts": T0 + 10_500, "player": "bob",
            "reason": "not_ready"},
           {"seq": 6, "type": "MatchAbandoned", "command_id": "timer:5", "ts": T0 + 10_500, "reason": "not_ready"}]
    reads = [Read("bob", "m2", 3, T0 + 1_000, tuple(log[:3]), view=True, deadline_ms=T0 + 10_000),
             Read("bob", "m2", 6, T0 + 10_600, tuple(log[3:]))]
    return History(reads=reads, faults=[Fault("stop_master", T0, T0 + 5_000)]), Final(log={"m2": log})


@pytest.mark.parametrize("how, charged", [
    ("read in time", 0), ("read after the deadline", 1), ("never read, load running", 1),
    ("never read, load stopped", 0), ("removed for another reason", 0)])
def test_the_ready_clock_charges_no_player_whose_seat_update_came_late(how, charged):
    """Issue 35 §4 for the ready clock: removed as not ready while the seat's update had not
    reached the player by the ready deadline is a timeout charged for an outage."""
    h, f = unready()
    if how == "read after the deadline":
        h.reads[0] = dataclasses.replace(h.reads[0], at_ms=T0 + 10_200)
    elif how.startswith("never read"):
        h.reads = h.reads[1:]
        h.load_stop_ms = T0 + (5_000 if how.endswith("stopped") else 60_000)
    elif how == "removed for another reason":
        h.reads[0] = dataclasses.replace(h.reads[0], at_ms=T0 + 10_200)
        f.log["m2"][4] = {**f.log["m2"][4], "reason": "left"}
    assert check(h, f, LIMITS).count("outage_timeouts_charged") == charged


def _late(h: History, f: Final) -> str:
    """The ``late_ends`` detail of ``m1`` with its finish moved past the bound."""
    late = T0 + 600 + LIMITS.end_bound_ms + 1
    f.log["m1"][-1] = {**f.log["m1"][-1], "ts": late}
    h.reads[-2] = dataclasses.replace(h.reads[-2], events=(h.reads[-2].events[0], f.log["m1"][-1]))
    (finding,) = [x for x in check(h, f, LIMITS).findings if x.rule == "late_ends"]
    return finding.detail


@pytest.mark.parametrize("sent_at, read_at, how", [
    (None, None, "1 idle (update read in time, no command sent by the deadline), 0 with a command sent in time, 0 "),
    (T0 + 900, None, "0 idle (update read in time, no command sent by the deadline), 1 with a command sent in time"),
    (T0 + 900, T0 + 3_900, "0 with a command sent in time, 1 with the update late or never read"),
    ((T0 + 900, T0 + 1_000), None, "1 with a command sent in time, 0 with the update late or never read, "
                                   "0 with a command tried in time and stored after the deadline"),
    ((T0 + 900, T0 + 9_000), None, "0 with a command sent in time, 0 with the update late or never read, "
                                   "1 with a command tried in time and stored after the deadline"),
])
def test_a_late_match_says_whose_its_timeouts_were(sent_at, read_at, how):
    """A timeout after the turn's update came in time is the client's when it sent nothing by the
    deadline (idle), the server's when it sent a command in time that the server had by the
    deadline; the outage's when its XADD went through only after the deadline, or its update
    came late."""
    h, f = clean()
    if sent_at is not None:
        at, stored = sent_at if isinstance(sent_at, tuple) else (sent_at, None)
        h.sends.append(Sent("c1", "alice", "m1", "c-late", at, stored))
        h.sends.append(Sent("c1", "bob", "m1", "b-late", at))  # another player's: not alice's
    if read_at is not None:
        h.reads[3] = dataclasses.replace(h.reads[3], at_ms=read_at)
    assert how in _late(h, f)


def test_a_late_match_names_the_client_that_gave_up_on_it_and_the_faults_after_the_heal():
    h, f = clean()
    h.gave_up.append(GaveUp("c1", "m1", T0 + 2_600, "TimeoutError: no reply"))
    h.faults.append(Fault("partition_master", T0 + 30_600, T0 + 37_600))
    detail = _late(h, f)
    assert "the client c1 gave up on it +2.0s from the heal: TimeoutError: no reply" in detail
    assert "then a partition_master +30.0s..+37.0s, ended 6.0s after its heal" in detail
