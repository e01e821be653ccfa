"""Regenerate tests/vectors/fair_deal.json (run once; the file is checked in and tests read it).

    python tests/vectors/make_fair_deal.py > tests/vectors/fair_deal.json
"""

from __future__ import annotations

import hashlib
import json

from engine.match.fairness import DealStream, commitment, fair_deal, stream_message

CASES = [
    ("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", ("alice-seed", "bob-seed"), "m1"),
    ("00" * 32, ("a", "b"), "match-0001"),
    (hashlib.sha256(b"shuangkou example").hexdigest(), ("alice", "bob"), "points-7f3a"),
    ("ff" * 32, ("種子 🀄", "lucky 7 "), "房間-42"),
    (hashlib.sha256(b"another").hexdigest(), ("x" * 64, "!~"), "m" * 200),
]


def case(seed_hex: str, seeds: tuple[str, str], match_id: str) -> dict:
    seed = bytes.fromhex(seed_hex)
    d = fair_deal(seed, seeds, match_id)
    s = DealStream(seed, seeds, match_id)
    return {"server_seed": seed_hex, "client_seeds": list(seeds), "match_id": match_id,
            "commitment": commitment(seed, match_id),
            "message_hex": stream_message(seeds, match_id).hex(),
            "block0_hex": s.block(0).hex(), "block1_hex": s.block(1).hex(),
            "deck": list(d.deck), "lead_index": d.lead_index, "lead_card": d.lead_card, "first": d.first,
            "words_used": d.words_used, "hands": [list(d.hands[0]), list(d.hands[1])]}


def main() -> None:
    out = {
        "about": "test vectors of docs/FAIRNESS.md (shuangkou/fair-deal/v1); deck = card ids after the shuffle",
        "cases": [case(*c) for c in CASES],
        # the rejection rule of below(n): words read in order, the value returned
        "below": [{"n": 3, "words": [4294967295, 7], "result": 1},
                  {"n": 108, "words": [4294967292, 4294967220, 215], "result": 107},
                  {"n": 108, "words": [4294967219], "result": 4294967219 % 108},
                  {"n": 54, "words": [4294967288, 4294967273], "result": 4294967273 % 54},
                  {"n": 1, "words": [4294967295], "result": 0}],
    }
    print(json.dumps(out, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
