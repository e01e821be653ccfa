"""The nemesis in CI (issue 35 §7): one fault of each kind on the whole stack on a real Redis
Cluster (3 masters, 2 replicas each, in a private network namespace made for the run), on the
product's defaults, then the checker (tests/nemesis/checker.py) over what the clients were told.

``bench/nemesis.py --rounds 1 --json`` runs once for the module (about 2.5 minutes); each fault
kind is then a test of its own.  On the defaults (replica acks 1 whenever every master has a
replica: serve's gauge ``shuangkou_replica_acks``) every kind is asserted strictly.  Only a
stack with no replica acks in force (a build or a machine where the default is 0) carries
marks: a partition of a master ``xfail(strict)`` (it loses, measured), the other master faults
``xfail(strict=False)`` (losses found only in some runs).  The reasons carry what was measured
(docs/RELIABILITY.md).  Network faults need root (CAP_NET_ADMIN) and ip/nft: without them the tests skip
with the reason, except in CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gateway_support import ROOT
from tests.nemesis import netns
from tests.nemesis.harness import KINDS

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]

#: what the checker must find nothing of, for a fault the product survives: nothing acknowledged
#: lost or applied twice, nothing read that the log does not hold, the bank
DATA = ("acked_lost", "duplicates_applied", "updates_not_in_store", "ledger_mismatches")
#: each player's versions never go back, every match ends in time after the heal
ORDER = ("version_backwards", "late_ends")
#: what a player is told and charged: no version skipped, no timeout for an outage
PLAYER = ("version_gaps", "outage_timeouts_charged")

#: measured on main b6ca468, the defaults (no replica acks), in each of 4 runs: a master cut off
#: from the others with clients still writing to it keeps acknowledging writes that its promoted
#: replica never had (479, 177, 137, 136 acknowledged commands lost; 927, 335, 265, 258 updates
#: read that the log does not hold; ledger entries for matches the log leaves unfinished)
PARTITION_LOSES = ("partition_master: acknowledged writes on the isolated master are lost at the heal "
                   "(replica acks 0: nothing waits for a replica)")
#: measured on main b6ca468, the defaults: a SIGKILLed master had acknowledged writes its replica
#: did not have yet in 1 of 5 short runs (6 commands lost, 20 updates read then rewritten), a
#: SIGSTOPped one once in 10 stops (1 command); a lost master is the same race, not met yet
MASTER_MAY_LOSE = ("a master that dies or stops may take acknowledged writes not yet replicated with it "
                   "(replica acks 0): found in some runs only")
#: the master faults: on replica acks 0 the data promise holds only by luck
MASTER_FAULTS = ("kill_master", "stop_master", "lose_master")

#: a kind whose order rules (versions read back, late ends) are a known gap: none (the late ends
#: found so far and their fixes: docs/RELIABILITY.md "Findings")
ORDER_SEEN: dict[str, str] = {}
#: a kind whose timeouts charged are a known gap (none: the last, an update a gateway handed to
#: the socket and was SIGKILLed before the client read it, is closed by the clients' ``Seen``)
CHARGED: dict[str, str] = {}


def _run(logs: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "SK_REDIS_URL", "SK_REPLICA_ACKS")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "nemesis.py"), "--rounds", "1", "--json",
                          "--logs", str(logs)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def nemesis(tmp_path_factory) -> dict[str, Any]:
    """One run for the whole session: pytest-xdist workers share it through a file under the
    session's common temporary folder, the first one to take its lock runs it.  Its logs go
    beside that file, so pytest's own clean-up of old temporary folders removes them."""
    import fcntl

    reason = netns.unavailable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the nemesis must run in CI: {reason}", pytrace=False)
        pytest.skip(reason)
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of one session
    base = tmp_path_factory.getbasetemp()
    shared = base.parent / f"nemesis-{run}.json" if run else base / "nemesis.json"
    with open(str(shared) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if shared.exists():
                return json.loads(shared.read_text())
            result = _run(shared.with_name(shared.stem + "-logs"))
            shared.write_text(json.dumps(result))
            return result
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _row(nemesis: dict[str, Any], kind: str) -> dict[str, Any]:
    row = nemesis["kinds"][kind]
    assert row["faults"] == 1, row
    assert row["acked"] > 0, f"{kind}: no acknowledgement near the fault: the load did not run through it"
    return row


def _explain(nemesis: dict[str, Any], kind: str, row: dict[str, Any]) -> str:
    return (f"{kind}: {row}\nfindings: {json.dumps(nemesis['findings'][:20], indent=1)}\n"
            f"notes: {nemesis['notes']}\nclient errors: {nemesis.get('client_error_samples')}\n"
            f"gave up: {nemesis.get('gave_up')}\nlogs: {nemesis.get('logs')}\n"
            f"the history of the matches found: {nemesis.get('history')}")


def _waits_for_replicas(nemesis: dict[str, Any]) -> bool:
    """Whether the run's serve waited for a replica (gauge ``shuangkou_replica_acks`` ≥ 1)."""
    return bool(nemesis.get("replica_acks_in_force"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_loses_nothing_acknowledged_read_or_booked(nemesis, kind, request):
    """Every acknowledged command in the log once, every update read in the log, no version
    going back, every match ended in time, the ledger equal to the log's settlements: for each
    fault kind (issue 35 "Done when")."""
    row = _row(nemesis, kind)
    if not _waits_for_replicas(nemesis):
        if kind == "partition_master":
            request.applymarker(pytest.mark.xfail(strict=True, reason=PARTITION_LOSES))
        elif kind in MASTER_FAULTS:
            request.applymarker(pytest.mark.xfail(strict=False, reason=MASTER_MAY_LOSE))
    broken = {k: row[k] for k in DATA if row[k]}
    assert not broken, _explain(nemesis, kind, row)


@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_sends_no_version_back_and_ends_every_match(nemesis, kind, request):
    """No player reads a version of a match older than one already read (redeliveries aside),
    and every match live at a heal ends within the bound (issue 35 §2)."""
    row = _row(nemesis, kind)
    if not _waits_for_replicas(nemesis) and kind in (*MASTER_FAULTS, "partition_master"):
        request.applymarker(pytest.mark.xfail(strict=False, reason=MASTER_MAY_LOSE))
    elif kind in ORDER_SEEN:
        request.applymarker(pytest.mark.xfail(strict=False, reason=ORDER_SEEN[kind]))
    broken = {k: row[k] for k in ORDER if row[k]}
    assert not broken, _explain(nemesis, kind, row)


@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_skips_no_version_and_charges_no_timeout(nemesis, kind, request):
    """No player skips a version of a match, and no player is charged a timeout for a turn whose
    update reached them after its deadline, or never, nor removed by the ready clock before
    their seat's update reached them (issue 35 §4: the clocks pause)."""
    row = _row(nemesis, kind)
    if not _waits_for_replicas(nemesis) and kind in (*MASTER_FAULTS, "partition_master"):
        request.applymarker(pytest.mark.xfail(strict=False, reason=MASTER_MAY_LOSE))
    elif kind in CHARGED:
        request.applymarker(pytest.mark.xfail(strict=False, reason=CHARGED[kind]))
    broken = {k: row[k] for k in PLAYER if row[k]}
    assert not broken, _explain(nemesis, kind, row)


def test_the_run_met_every_fault_kind_and_settled_its_matches(nemesis):
    assert sorted(nemesis["kinds"]) == sorted(KINDS)
    assert nemesis["finished"] > 0 and nemesis["booked"] > 0
    logs = Path(nemesis["logs"])  # under pytest's temporary folder, which pytest cleans up
    assert logs.is_dir() and logs.name.startswith("nemesis") and logs.name.endswith("-logs"), logs
