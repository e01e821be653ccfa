"""``shuangkou ledger`` against the names an operator sees.

The browser shows display names, never player ids.  ``ledger credit 小李 100`` used to open an
account named 小李 (balance 100) while the player who goes by 小李 kept 0, and ``ledger show``
of any name printed "0 coins, 0 points, no entries" with exit 0 (found by a new user's play
of 2026-12-06).  A display name is refused for a credit or debit, naming the ids that go by
it and ``--new-player``; ``show`` of an unknown id is exit 1, and ``show --by-name`` shows the
players who go by a name.  An id is never resolved from a display name: any player may take
another's id as their display name (the security review of 2026-12-06: a player going by
``vip_0042`` blocked the deposit to that new account, and ``show vip_0042`` showed theirs).
"""

from __future__ import annotations

import json

import pytest

from engine.store import keys
from projections.ledger import LedgerEntry, RedisLedger
from shuangkou.cli import main

pytestmark = pytest.mark.redis


@pytest.fixture
def named(real_redis, redis_server):
    """u-1 goes by 小李 and holds a credit of 300 points; u-2 and u-3 both go by Sam."""
    real_redis.hset(keys.NAMES_KEY, mapping={"u-1": "小李", "u-2": "Sam", "u-3": "Sam"})
    RedisLedger(real_redis).record_entry(
        LedgerEntry("credit", "u-1", "points", 300, "dep-1", 1_796_573_590_598, "welcome", "op-7"))
    return redis_server.url


# (the command after ``ledger``, exit code, what stderr says)
REFUSED = [
    (["credit", "小李", "100", "--reason", "x"], 2,
     "no player id '小李' is known here, but u-1 goes by it as a display name: name an existing player by id, "
     "or pass --new-player"),
    (["debit", "Sam", "5", "--reason", "x"], 2, "but u-2, u-3 go by it as a display name"),
    (["show", "nobody-known"], 1, "no player 'nobody-known' is known here"),
    (["show", "Sam"], 1, "no player 'Sam' is known here (no display name, balance or entry); u-2, u-3 go by it as "
                         "a display name (--by-name shows them)"),
    (["show", "nobody-known", "--by-name"], 1, "nobody goes by the display name 'nobody-known' here"),
    (["show", "Sam", "--json", "--by-name"], 2, "'Sam' is the display name of u-2, u-3: name the player by id"),
]


@pytest.mark.parametrize("args,code,words", REFUSED, ids=[" ".join(a[:2]) for a, _c, _w in REFUSED])
def test_a_display_name_or_nobody_is_refused_and_says_who(named, capsys, args, code, words):
    assert main(["ledger", *args, "--redis", named]) == code
    err = capsys.readouterr().err
    assert words in err, err
    import redis

    with redis.Redis.from_url(named) as r:  # nothing was sent to the engine, no account opened
        assert r.hget("sk:{ledger}:bal:wealth", "小李") is None and not r.exists(keys.OPS)


def test_show_by_name_shows_the_players_who_go_by_it(named, capsys):
    assert main(["ledger", "show", "小李", "--by-name", "--redis", named]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "u-1 (小李): 0 coins, 300 points"
    assert out[1].split() == ["2026-12-06", "16:13:10Z", "credit", "+300", "points", "entry", "dep-1", "by",
                              "op-7:", "welcome"]
    assert main(["ledger", "show", "u-1", "--json", "--redis", named]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["player"], shown["name"], shown["balances"]) == ("u-1", "小李", {"points": 300, "wealth": 0})
