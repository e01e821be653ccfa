"""The publisher's entries are byte for byte those of tests/vectors/update_bytes.json.

Every stream entry (the updates with their briefs and views, rejections, syncs, says, acks,
replies) built for each step of some reproducible random matches, published as it was, as a
re-publication and with a ``reply_to``, the matches interleaved: whatever the publisher keeps
between commands (e.g. a player's encoded hand), its output is what a publisher that keeps
nothing built.  A change of the wire format regenerates the vector on purpose
(tests/vectors/make_update_bytes.py) and says so in its commit.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.service.publish import Publisher
from tests.vectors.make_update_bytes import SPECS, digests, steps

VECTOR = json.loads((Path(__file__).parent / "vectors" / "update_bytes.json").read_text(encoding="utf-8"))


def test_the_vector_covers_the_specs_it_names():
    assert [list(s) for s in SPECS] == VECTOR["specs"]
    assert sorted(VECTOR["digests"]) == sorted(f"m{s[0]}" for s in SPECS)


def test_every_entry_is_byte_for_byte_the_vectors_even_from_a_publisher_used_before():
    runs = steps()
    publisher = Publisher(None, consumer="t")
    assert digests(publisher, runs) == VECTOR["digests"]  # a fresh publisher
    assert digests(publisher, runs) == VECTOR["digests"]  # the same one again: whatever it kept
    assert digests(publisher, list(reversed(runs))) == VECTOR["digests"]  # the other order
