"""bench/memory.py sorts each key the engine writes into its kind, by the names
engine/store/keys.py gives them: the command channels and the delivery streams (with their
fences) are never counted as durable bytes of a finished match."""

from __future__ import annotations

import pytest

from engine.store import keys

MATCH = "m-1"
BUCKET = keys.bucket_of(MATCH)

#: (key, its kind, durable)
KEYS = [
    (keys.events_key(MATCH, BUCKET), "match events", True),
    (keys.commands_key(MATCH, BUCKET), "match command ids", True),
    (keys.snapshot_key(MATCH, BUCKET), "match snapshot", True),
    (keys.feed_key(BUCKET), "bucket feed", True),
    (keys.deadlines_key(BUCKET), "bucket deadlines", True),
    (keys.matches_key(BUCKET), "bucket match set", True),
    (keys.ledger_key("settled"), "ledger settlements", True),
    (keys.ledger_key("refs"), "ledger other", True),
    (keys.outbox_key("alice"), "outbox", False),
    (keys.outbox_versions_key("alice"), "outbox fences", False),
    (keys.reply_key("c-1"), "reply", False),
    (keys.INBOX, "command channels", False),
    (keys.OPS, "command channels", False),
    (keys.inbox_key(BUCKET), "command channels", False),
    (keys.ops_key(BUCKET), "command channels", False),
    (keys.lobby_inbox_key(BUCKET), "command channels", False),
    (keys.DEAD_LETTERS, "dead letters", True),
]


@pytest.mark.parametrize(("key", "kind", "durable"), KEYS, ids=[k for k, _, _ in KEYS])
def test_each_key_has_its_kind(key: str, kind: str, durable: bool) -> None:
    from bench.memory import NOT_DURABLE, kind_of

    assert kind_of(key) == kind
    assert (kind not in NOT_DURABLE) is durable
