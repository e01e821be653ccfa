"""Regenerate tests/vectors/update_bytes.json (run once; the file is checked in and
tests/test_update_bytes.py reads it): the digest of every stream entry the publisher builds
for each step of some reproducible random matches.

    python tests/vectors/make_update_bytes.py > tests/vectors/update_bytes.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from engine.service.publish import Publisher  # noqa: E402
from engine.store.base import Write  # noqa: E402
from tests.strategies import MatchSpec, Step, play_match  # noqa: E402

#: (seed, mode, escape policy, reclaim, chaos, snapshot_every): plain and chaotic matches,
#: both modes, both escape policies
SPECS = [
    (1, "points", "forfeit", False, 0.0, 50), (2, "wealth", "trustee", True, 0.0, 7),
    (3, "points", "trustee", False, 0.3, 5), (4, "wealth", "forfeit", True, 0.3, 13),
    (5, "points", "forfeit", True, 0.15, 1), (6, "wealth", "trustee", False, 0.15, 20),
    (7, "points", "trustee", True, 0.25, 3), (8, "wealth", "forfeit", False, 0.05, 9),
]


def steps() -> list[tuple[str, list[Step]]]:
    """Each spec's match, played under the match id ``m<seed>`` (both matches' players are
    ``a`` and ``b``)."""
    out = []
    for seed, mode, policy, reclaim, chaos, snap in SPECS:
        spec = MatchSpec(seed=seed, mode=mode, escape_policy=policy, reclaim=reclaim, chaos=chaos,
                         snapshot_every=snap)
        out.append((f"m{seed}", play_match(spec, match_id=f"m{seed}", reproducible=True).steps))
    return out


def encode(write: Write) -> bytes:
    """One entry, every part of it, as bytes (the fields in the order built)."""
    parts: list[Any] = [write.stream, write.maxlen, write.ttl, write.notice]
    for k, v in write.fields.items():
        parts += [k, v.hex() if isinstance(v, bytes) else repr(v)]
    return json.dumps(parts).encode()


def digests(publisher: Publisher, runs: list[tuple[str, list[Step]]]) -> dict[str, str]:
    """Per match: the sha256 of every entry of every step, each step published as it was,
    as a re-publication (``duplicate``) and with a ``reply_to``; the matches' steps
    interleaved, so a publisher keeping anything between commands sees both matches' players."""
    h = {mid: hashlib.sha256() for mid, _ in runs}
    longest = max(len(s) for _, s in runs)
    for k in range(longest):
        for mid, run in runs:
            if k >= len(run):
                continue
            step = run[k]
            out = step.outcome
            dup = out.__class__(**{**out.__dict__, "duplicate": True})
            for o, reply in ((out, None), (dup, None), (out, "sk:reply:x")):
                for w in publisher.outputs(step.command, o, reply, "1-0" if reply else None):
                    h[mid].update(encode(w))
    return {mid: d.hexdigest() for mid, d in h.items()}


def main() -> None:
    runs = steps()
    print(json.dumps({"specs": SPECS, "digests": digests(Publisher(None, consumer="t"), runs)}, indent=1))


if __name__ == "__main__":
    main()
