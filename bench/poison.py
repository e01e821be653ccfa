"""Poison messages against the inbox consumer: which ones wedge it?

For each hostile inbox entry (issue 11 §1, §7) this XADDs it, then a valid command behind
it, and runs the consumer the way serve does -- a round, and on a failure a restart under
the same consumer name -- for a bounded number of rounds.  The consumer is *wedged* by an
entry when, after those rounds, the valid command behind it is not applied or the entry is
still pending.  Prints one line per entry and the totals (no timing: a functional probe).

    python bench/poison.py [--redis URL] [--rounds 8]

Without ``--redis`` it uses fakeredis.  Run it on two checkouts (PYTHONPATH) to compare.
"""

from __future__ import annotations

import argparse
import json

import msgpack

from engine.config import load_config
from engine.store import keys

CONFIG = load_config("points").to_record()


def entries() -> list[tuple[str, dict]]:
    sit = {"type": "Sit", "command_id": "x", "match_id": "m", "player": "p"}
    return [
        ("lone surrogate in player (the issue's XADD)",
         {"j": '{"type":"Sit","command_id":"x","match_id":"m","player":"\\ud800"}'}),
        ("lone surrogate in command_id", {"j": '{"type":"Pass","command_id":"\\udfff","match_id":"m","player":"p"}'}),
        ("lone surrogate in match_id", {"j": '{"type":"Pass","command_id":"c","match_id":"\\ud800","player":"p"}'}),
        ("integer beyond 64 bits (cards)", {"j": json.dumps({"type": "Play", "command_id": "c", "match_id": "m",
                                                             "player": "p", "cards": [2**70]})}),
        ("integer beyond 64 bits (balance)", {"j": json.dumps({**sit, "balance": 2**70})}),
        ("JSON nested 50,000 deep", {"j": "[" * 50_000}),
        ("unknown extra entry field", {"c": msgpack.packb(sit), "x": "y"}),
        ("1 MB extra entry field", {"c": msgpack.packb(sit), "pad": b"x" * 1_000_000}),
        ("reply_to naming a string key", {"c": msgpack.packb(sit), "reply_to": "sk:reply:wrongtype"}),
        ("CreateMatch with turn_seconds NaN", {"j": json.dumps({"type": "CreateMatch", "command_id": "c",
                                                                "match_id": "nan", "config": {**CONFIG, "turn_seconds": float("nan")}})}),
        ("CreateMatch with turn_seconds Infinity", {"j": json.dumps({"type": "CreateMatch", "command_id": "c",
                                                                     "match_id": "inf", "config": {**CONFIG, "turn_seconds": float("inf")}})}),
        ("not a map", {"c": msgpack.packb([1, 2, 3])}),
        ("no fields we know", {"other": b"1"}),
    ]


def probe(client, make_consumer, label: str, entry: dict, rounds: int, n: int) -> bool:
    client.flushdb()
    client.set("sk:reply:wrongtype", "a string")
    make_consumer()  # creates the group
    poison_id = client.xadd(keys.INBOX, entry)
    good = f"good-{n}"
    client.xadd(keys.INBOX, {"c": msgpack.packb({"type": "CreateMatch", "command_id": "g", "match_id": good,
                                                 "config": CONFIG})})
    consumer = make_consumer()
    for _ in range(rounds):
        try:
            consumer.run_once(block_ms=None, count=10)
        except Exception:
            consumer = make_consumer()  # serve's loop backs off; a restart keeps the name
    pending = {p["message_id"] for p in client.xpending_range(keys.INBOX, keys.SERVICE_GROUP, "-", "+", 100)}
    applied = consumer.service.store.version(good) == 1
    wedged = (poison_id in pending) or not applied
    print(f"{'WEDGED' if wedged else 'ok    '}  {label}")
    return wedged


def main() -> None:
    import logging

    logging.basicConfig(level=logging.CRITICAL)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", help="a Redis URL (default: fakeredis)")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    if args.redis:
        import redis

        client = redis.Redis.from_url(args.redis)
    else:
        import fakeredis

        client = fakeredis.FakeRedis()

    from engine.service.inbox import InboxConsumer
    from engine.service.service import MatchService
    from engine.service.shuffle import seeded_random
    from engine.store.redis_store import RedisEventStore

    def make_consumer():
        service = MatchService(RedisEventStore(client), clock=lambda: 1_000_000, rng=seeded_random(1))
        return InboxConsumer(client, service, "c1")

    tried = entries()
    wedged = sum(probe(client, make_consumer, label, e, args.rounds, i) for i, (label, e) in enumerate(tried))
    print(f"messages tried: {len(tried)}, wedged consumers: {wedged}")


if __name__ == "__main__":
    main()
