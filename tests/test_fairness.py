"""Provably fair deals (docs/FAIRNESS.md, engine/match/fairness.py): the construction
against the shipped test vectors and an independent reimplementation from the
document, the commitment/reveal through the service, client seeds, tampering,
and ``shuangkou verify-deal``."""

from __future__ import annotations

import doctest
import hashlib
import hmac
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine.match.fairness as fairness
from engine.config import load_config
from engine.match.commands import CreateMatch, Deal, Escape, Ready, Sit, parse_command
from engine.match.decide import Context, decide
from engine.match.errors import BadCommand
from engine.match.events import HandDealt, MatchCreated, MatchFinished, PlayerReady, event_from_dict
from engine.match.fairness import (
    DealStream,
    check_deal,
    commitment,
    fair_deal,
    verify_match,
)
from engine.match.replay import replay
from engine.match.state import MatchState, decode_state, encode_state
from engine.rules.cards import HAND_SIZE, NUM_CARDS
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random, seeded_server_seeds
from engine.store.memory import InMemoryEventStore
from projections.views import redact_event, view_for

ROOT = Path(__file__).resolve().parent.parent
VECTORS = json.loads((ROOT / "tests" / "vectors" / "fair_deal.json").read_text(encoding="utf-8"))
CONFIG = load_config("points").to_record()


def test_doctests():
    assert doctest.testmod(fairness).failed == 0


# ---- the construction -------------------------------------------------------------------

@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["match_id"][:20])
def test_engine_matches_the_test_vectors(case):
    seed = bytes.fromhex(case["server_seed"])
    seeds = tuple(case["client_seeds"])
    assert commitment(seed, case["match_id"]) == case["commitment"]
    assert fairness.stream_message(seeds, case["match_id"]).hex() == case["message_hex"]
    s = DealStream(seed, seeds, case["match_id"])
    assert (s.block(0).hex(), s.block(1).hex()) == (case["block0_hex"], case["block1_hex"])
    d = fair_deal(seed, seeds, case["match_id"])
    assert list(d.deck) == case["deck"]
    assert (d.lead_index, d.lead_card, d.first, d.words_used) == (
        case["lead_index"], case["lead_card"], case["first"], case["words_used"])
    assert [list(h) for h in d.hands] == case["hands"]


def _independent_deal(seed: bytes, seeds: tuple[str, str], match_id: str) -> tuple[list[int], int]:
    """docs/FAIRNESS.md read by someone else: the whole stream made up front, then consumed."""
    def lp(text: str) -> bytes:
        raw = text.encode("utf-8")
        return len(raw).to_bytes(4, "big") + raw

    msg = b"shuangkou/fair-deal/v1" + lp(match_id) + lp(seeds[0]) + lp(seeds[1])
    stream = b"".join(hmac.new(seed, msg + c.to_bytes(4, "big"), hashlib.sha256).digest() for c in range(40))
    words = iter(int.from_bytes(stream[k:k + 4], "big") for k in range(0, len(stream), 4))

    def below(n: int) -> int:
        for w in words:
            if w < (1 << 32) // n * n:
                return w % n
        raise AssertionError("stream too short")

    deck = list(range(108))
    for i in range(107, 0, -1):
        j = below(i + 1)
        deck[i], deck[j] = deck[j], deck[i]
    return deck, below(54)


@settings(max_examples=60, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32),
       seeds=st.tuples(st.text(min_size=1, max_size=64), st.text(min_size=1, max_size=64)),
       match_id=st.text(min_size=1, max_size=50))
def test_the_document_reimplemented_gives_the_same_deal(seed, seeds, match_id):
    d = fair_deal(seed, seeds, match_id)
    deck, lead = _independent_deal(seed, seeds, match_id)
    assert list(d.deck) == deck and d.lead_index == lead
    assert sorted(d.deck) == list(range(NUM_CARDS))  # a permutation of the 108 cards
    assert d.lead_card in d.hands[d.first]  # the holder of the lead card leads


@pytest.mark.parametrize("case", VECTORS["below"], ids=lambda c: f"n{c['n']}")
def test_rejection_sampling_rule(case, monkeypatch):
    words = iter(case["words"])
    s = DealStream(bytes(32), ("a", "b"), "m")
    monkeypatch.setattr(s, "word", lambda: next(words))
    assert s.below(case["n"]) == case["result"]
    assert next(words, None) is None  # every listed word was read: the rejected ones too


def test_every_input_changes_the_deal():
    base = fair_deal(bytes(32), ("a", "b"), "m")
    assert fair_deal(bytes(31) + b"\x01", ("a", "b"), "m").deck != base.deck
    assert fair_deal(bytes(32), ("a", "c"), "m").deck != base.deck
    assert fair_deal(bytes(32), ("b", "a"), "m").deck != base.deck  # seats are not interchangeable
    assert fair_deal(bytes(32), ("a", "b"), "m2").deck != base.deck
    # the length prefixes keep ("ab", "c") and ("a", "bc") apart
    assert fair_deal(bytes(32), ("ab", "c"), "m").deck != fair_deal(bytes(32), ("a", "bc"), "m").deck


def test_positions_are_uniform_over_many_fixed_deals():
    """Chi-square of where card 0 lands over 3000 deals with fixed seeds (deterministic)."""
    n, cells = 3000, 12  # 108 positions in 12 bins of 9
    counts = [0] * cells
    for k in range(n):
        d = fair_deal(hashlib.sha256(str(k).encode()).digest(), ("a", "b"), "uniform")
        counts[d.deck.index(0) // 9] += 1
    expected = n / cells
    chi2 = sum((c - expected) ** 2 / expected for c in counts)
    assert chi2 < 31.26, counts  # p = 0.001 with 11 degrees of freedom


# ---- client seeds -----------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["", "x" * 65, "a\nb", "tab\there", "\x00", "\u2028"])
def test_bad_client_seed_is_a_bad_command(bad):
    with pytest.raises(BadCommand) as exc:
        parse_command({"type": "Ready", "command_id": "c", "match_id": "m", "player": "a", "client_seed": bad})
    assert exc.value.code == "bad_command" and "client_seed" in exc.value.reason


@pytest.mark.parametrize("good", ["x", "x" * 64, "lucky 7", "種子 🀄", "~!@#$%^&*()"])
def test_good_client_seeds_are_accepted(good):
    cmd = parse_command({"type": "Ready", "command_id": "c", "match_id": "m", "player": "a", "client_seed": good})
    assert cmd.client_seed == good


def _service(seed: int = 1) -> MatchService:
    t = iter(range(1_000_000, 10**12, 1000))
    return MatchService(InMemoryEventStore(), lambda: next(t), seeded_random(seed),
                        server_seeds=seeded_server_seeds(seed))


def _start(svc: MatchService, mid: str = "m", seeds: tuple[str | None, str | None] = (None, None)) -> None:
    cmds = [CreateMatch(command_id="c1", match_id=mid, config=CONFIG),
            Sit(command_id="c2", match_id=mid, player="alice"), Sit(command_id="c3", match_id=mid, player="bob"),
            Ready(command_id="c4", match_id=mid, player="alice", client_seed=seeds[0]),
            Ready(command_id="c5", match_id=mid, player="bob", client_seed=seeds[1])]
    for c in cmds:
        out = svc.execute(c)
        assert out.rejection is None, out.rejection


def test_a_served_match_commits_deals_from_the_seeds_and_reveals_at_the_finish():
    svc = _service()
    _start(svc, seeds=("my own luck", None))
    events = svc.store.load("m")
    created, dealt = events[0], events[-1]
    assert isinstance(created, MatchCreated) and isinstance(dealt, HandDealt)
    seed = bytes.fromhex(created.server_seed)
    assert created.commitment == commitment(seed, "m")
    ready = [e for e in events if isinstance(e, PlayerReady)]
    assert [e.client_seed for e in ready] == ["my own luck", "bob"]  # bob's default: his player id
    expected = fair_deal(seed, ("my own luck", "bob"), "m")
    assert dealt.hands == expected.hands and dealt.lead_card == expected.lead_card
    assert dealt.first == expected.first and dealt.client_seeds == ("my own luck", "bob")
    state = svc.load_state("m")
    for who in ("alice", "bob", None):  # players and a spectator see the commitment, never the seed
        v = view_for(state, who)
        assert v["fair"] == {"commitment": created.commitment, "client_seeds": ["my own luck", "bob"],
                             "server_seed": None}
        assert created.server_seed not in json.dumps(v)
        assert "server_seed" not in redact_event(created, who, state=state)
    out = svc.execute(Escape(command_id="c6", match_id="m", player="alice"))
    [finished] = [e for e in out.events if isinstance(e, MatchFinished)]
    assert finished.server_seed == created.server_seed  # the reveal
    assert view_for(out.state, None)["fair"]["server_seed"] == created.server_seed
    assert verify_match(svc.store.load("m")).status == "ok"


def test_the_seed_survives_a_restart_snapshot_and_a_second_replica():
    """Another service over the same store (a restarted or second serve replica) deals
    from the seed stored at the creation."""
    store = InMemoryEventStore()
    first = MatchService(store, lambda: 1_000, seeded_random(1), snapshot_every=1)
    for c in (CreateMatch(command_id="c1", match_id="m", config=CONFIG),
              Sit(command_id="c2", match_id="m", player="alice"), Sit(command_id="c3", match_id="m", player="bob"),
              Ready(command_id="c4", match_id="m", player="alice")):
        assert first.execute(c).rejection is None
    snap = store.load_snapshot("m")
    assert snap is not None and decode_state(snap.state).server_seed == store.load("m")[0].server_seed
    other = MatchService(store, lambda: 2_000, seeded_random(99))
    assert other.execute(Ready(command_id="c5", match_id="m", player="bob", client_seed="b")).rejection is None
    assert verify_match(store.load("m") + [_finish(store)]).status == "ok"


def _finish(store) -> MatchFinished:
    events = store.load("m")
    return MatchFinished(match_id="m", seq=len(events) + 1, ts=3_000, command_id="end", winner="alice",
                         loser="bob", cards_left={"alice": 27, "bob": 27}, kou="escape", reason="escape",
                         server_seed=events[0].server_seed)


def test_state_codec_keeps_the_fair_fields_and_old_snapshots_still_load():
    svc = _service()
    _start(svc)
    s = svc.load_state("m")
    assert decode_state(encode_state(s)) == s and s.server_seed and s.client_seeds == ("alice", "bob")
    assert s.server_seed not in repr(s)  # never in a log line that prints a state
    from engine.match.state import state_from_dict, state_to_dict

    old = state_to_dict(s)
    for k in ("commitment", "server_seed", "client_seeds"):
        old.pop(k)
    assert state_from_dict(old).server_seed is None


def test_old_matches_without_a_commitment_still_deal_and_replay():
    """decide without a server seed in its context: the shuffle from the context (before fair deals)."""
    s = MatchState(match_id="old")
    evs = []
    deck = tuple(reversed(range(NUM_CARDS)))
    for c, ctx in ((CreateMatch(command_id="1", match_id="old", config=CONFIG), Context(1)),
                   (Sit(command_id="2", match_id="old", player="a"), Context(2)),
                   (Sit(command_id="3", match_id="old", player="b"), Context(3)),
                   (Ready(command_id="4", match_id="old", player="a"), Context(4)),
                   (Ready(command_id="5", match_id="old", player="b"), Context(5, deck=deck, lead_index=0))):
        new = decide(s, c, ctx)
        evs += new
        s = replay(new, s)
    assert evs[0].commitment is None and evs[-1].client_seeds is None
    assert evs[-1].lead_card == deck[0] and all(e.client_seed is None for e in evs if isinstance(e, PlayerReady))
    assert verify_match(evs).status == "predates"


# ---- tampering ----------------------------------------------------------------------------

def _finished_match(seed: int = 3) -> list:
    svc = _service(seed)
    _start(svc, seeds=("alice's", "bob's"))
    svc.execute(Escape(command_id="c6", match_id="m", player="bob"))
    return list(svc.store.load("m"))


def _swap(events, i: int, **changes):
    out = list(events)
    out[i] = out[i].model_copy(update=changes)
    return out


def test_a_card_changed_in_hand_dealt_is_caught():
    evs = _finished_match()
    k = next(i for i, e in enumerate(evs) if isinstance(e, HandDealt))
    dealt = evs[k]
    h0 = list(dealt.hands[0])
    swapped = dealt.set_aside[0]
    h0[0], rest = swapped, (h0[0],) + dealt.set_aside[1:]
    v = verify_match(_swap(evs, k, hands=(tuple(h0), dealt.hands[1]), set_aside=rest))
    assert v.status == "mismatch" and any("hand of seat 0" in p for p in v.problems)


@pytest.mark.parametrize("byte", [0, 17, 31])
def test_one_byte_of_the_seed_changed_is_caught(byte):
    evs = _finished_match()
    fin = evs[-1]
    raw = bytearray(bytes.fromhex(fin.server_seed))
    raw[byte] ^= 0x01
    v = verify_match(_swap(evs, len(evs) - 1, server_seed=raw.hex()))
    assert v.status == "mismatch" and any("commitment mismatch" in p for p in v.problems)


def test_other_tampering_is_caught():
    evs = _finished_match()
    k_ready = next(i for i, e in enumerate(evs) if isinstance(e, PlayerReady))
    k_dealt = next(i for i, e in enumerate(evs) if isinstance(e, HandDealt))
    assert verify_match(evs).status == "ok"  # the untouched record verifies
    cases = {
        "client seed": _swap(evs, k_ready, client_seed="not what alice sent"),
        "lead card": _swap(evs, k_dealt, lead_card=evs[k_dealt].hands[1 - evs[k_dealt].first][0],
                           first=1 - evs[k_dealt].first),
        "fixed hands": _swap(evs, k_dealt, client_seeds=None),
        "commitment": _swap(evs, 0, commitment="0" * 64),
        "stripped commitment": _swap(evs, 0, commitment=None, server_seed=None),
        "no reveal": _swap(evs, len(evs) - 1, server_seed=None),
    }
    for name, tampered in cases.items():
        assert verify_match(tampered).status == "mismatch", name
    # a record stripped of every trace of fair deals looks old, unless the player pins the commitment
    bare = [e.model_copy(update={k: None for k in ("commitment", "server_seed", "client_seed", "client_seeds")
                                 if k in type(e).model_fields}) for e in evs]
    assert verify_match(bare).status == "predates"
    assert verify_match(bare, expected_commitment=evs[0].commitment).status == "mismatch"
    assert verify_match(evs, expected_commitment=evs[0].commitment).status == "ok"


def test_check_deal_reports_a_bad_seed_text():
    assert not check_deal("zz", "0" * 64, ("a", "b"), "m", ((), ()), None, None, None).ok


def test_a_fixed_deal_in_a_fair_match_is_not_called_fair():
    svc = _service()
    svc.deal_on_ready = False
    _start(svc)
    assert svc.execute(Deal(command_id="d", match_id="m", hands=((0,), (1,)), first=0)).rejection is None
    svc.execute(Escape(command_id="e", match_id="m", player="bob"))
    v = verify_match(svc.store.load("m"))
    assert v.status == "mismatch" and "fixed deal" in v.problems[0]


# ---- the command line ---------------------------------------------------------------------

def _cli(*args: str, redis_url: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SK_REDIS_URL"}
    env["PYTHONPATH"] = str(ROOT)
    if redis_url is not None:
        env["SK_REDIS_URL"] = redis_url  # the default of --redis, as for replay/matches/ledger
    return subprocess.run([sys.executable, "-m", "shuangkou", "verify-deal", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)


def _write(tmp_path: Path, events, name: str = "events.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"events": [e.model_dump(mode="json") for e in events]}), encoding="utf-8")
    return p


def test_cli_verifies_an_export_and_catches_tampering(tmp_path):
    evs = _finished_match()
    ok = _cli("m", "--events", str(_write(tmp_path, evs)))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verified" in ok.stdout and evs[0].commitment in ok.stdout
    k = next(i for i, e in enumerate(evs) if isinstance(e, HandDealt))
    h1 = list(evs[k].hands[1])
    h1[-1], rest = evs[k].set_aside[-1], evs[k].set_aside[:-1] + (h1[-1],)
    bad = _cli("--events", str(_write(tmp_path, _swap(evs, k, hands=(evs[k].hands[0], tuple(h1)),
                                                          set_aside=rest), "bad.json")))
    assert bad.returncode == 1 and "VERIFICATION FAILED" in bad.stdout and "seat 1" in bad.stdout
    raw = bytearray(bytes.fromhex(evs[-1].server_seed))
    raw[5] ^= 0x80
    seedbad = _cli("m", "--events", str(_write(tmp_path, _swap(evs, len(evs) - 1, server_seed=raw.hex()),
                                               "seed.json")), "--json")
    assert seedbad.returncode == 1
    assert json.loads(seedbad.stdout)["status"] == "mismatch"


def test_cli_old_match_predates_and_bad_input(tmp_path):
    evs = _finished_match()
    bare = [e.model_copy(update={k: None for k in ("commitment", "server_seed", "client_seed", "client_seeds")
                                 if k in type(e).model_fields}) for e in evs]
    old = _cli("m", "--events", str(_write(tmp_path, bare)))
    assert old.returncode == 0 and "predates fair deals" in old.stdout
    missing = _cli("nope", "--events", str(_write(tmp_path, evs)))
    assert missing.returncode == 1 and "no such match" in missing.stderr  # not found: 1, as replay (README)
    assert _cli("m").returncode == 2  # neither --redis nor --events
    running = [e for e in evs if not isinstance(e, MatchFinished)]
    pending = _cli("m", "--events", str(_write(tmp_path, running, "run.json")))
    assert pending.returncode == 2 and "revealed at the finish" in pending.stdout


@pytest.mark.redis
def test_cli_verifies_a_match_in_redis(real_redis, redis_server):
    from engine.store.redis_store import RedisEventStore

    store = RedisEventStore(real_redis)
    svc = MatchService(store, lambda: 1_000, seeded_random(1))  # secrets: the production seed source
    _start(svc, "fair-1", seeds=("a's", "b's"))
    url = redis_server.url
    early = _cli("fair-1", "--redis", url)
    assert early.returncode == 2 and "not finished" in early.stdout
    svc.execute(Escape(command_id="c9", match_id="fair-1", player="alice"))
    done = _cli("fair-1", "--redis", url, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["status"] == "ok" and verdict["client_seeds"] == ["a's", "b's"]
    assert len(verdict["first_cards"][0]) == 5 and verdict["server_seed"] == store.load("fair-1")[0].server_seed
    from_env = _cli("fair-1", "--json", redis_url=url)  # no --redis: $SK_REDIS_URL
    assert from_env.returncode == 0, from_env.stdout + from_env.stderr
    assert json.loads(from_env.stdout) == verdict
    unset = _cli("fair-1")
    assert unset.returncode == 2 and "SK_REDIS_URL" in unset.stderr


def test_events_from_a_run_script_json_verify(tmp_path):
    script = {"config": "points", "seed": 4, "players": [{"id": "a", "points": 0}, {"id": "b", "points": 0}],
              "actions": [{"player": "b", "escape": True}]}
    sp = tmp_path / "s.json"
    sp.write_text(json.dumps(script))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "shuangkou", "run-script", str(sp), "--json"], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    (tmp_path / "e.json").write_text(out.stdout)
    v = _cli("--events", str(tmp_path / "e.json"))
    assert v.returncode == 0, v.stdout + v.stderr
    evs = [event_from_dict(e) for e in json.loads(out.stdout)["events"]]
    dealt = next(e for e in evs if isinstance(e, HandDealt))
    assert dealt.client_seeds == ("a", "b") and len(dealt.hands[0]) == HAND_SIZE
    assert evs[-1].server_seed == evs[0].server_seed


def test_the_worked_example_in_the_document_runs_and_matches_the_vectors():
    doc = (ROOT / "docs" / "FAIRNESS.md").read_text(encoding="utf-8")
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    case = VECTORS["cases"][0]
    deck = case["deck"]
    assert out.stdout.strip() == f"{case['commitment']} {deck[:5]} {deck[27:32]} {case['lead_index']}"
    assert case["commitment"] in doc and case["block0_hex"] in doc
    from engine.rules.cards import format_cards

    assert format_cards(deck[:5]) in doc and format_cards(deck[27:32]) in doc
