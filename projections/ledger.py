"""The ledger of player balances: points and coins kept separately (R-11).

A :class:`Ledger` records each finished match's :class:`~projections.settlement.Settlement`
(as JSON), adds its scores to the players' balances in the room's mode and
counts what was burned (R-12.3) — **exactly once**: the settlement, the
balance increments and the "match settled" marker are written in one atomic
step, so applying the same match again (a redelivered feed message, a
runner restarted after a crash) changes nothing and returns False.

Later matches read levels from it (:meth:`Ledger.level_for`).  Operators (or
tests) put coins in with :meth:`Ledger.grant`, idempotent by a reference.

Two implementations share one contract (tests/test_ledger.py):
:class:`InMemoryLedger` and :class:`RedisLedger` (one Lua script per write;
every key carries the hash tag ``{ledger}`` so the script is atomic on a
Redis Cluster too).

Redis keys (prefix from :mod:`engine.store.keys`):

==================================  ======  ===============================================
``sk:{ledger}:settled``             hash    match id → settlement JSON (the marker, too)
``sk:{ledger}:bal:<mode>``          hash    player → balance (``points`` / ``wealth``)
``sk:{ledger}:burned``              hash    mode → total burned
``sk:{ledger}:grants``              hash    grant reference → ``<mode>|<player>|<amount>``
``sk:{ledger}:refs``                hash    operator entry reference (command id) → entry JSON
``sk:{ledger}:journal:<player>``    hash    ``credit:<ref>`` / ``match:<id>`` → entry JSON
==================================  ======  ===============================================

Operator entries (:meth:`Ledger.record_entry`): coins and points enter or leave a
balance only through settlements and audited ``credit``/``debit`` entries, each with
an amount, a reason, the operator's id and a reference (the command id, so a retry
changes nothing).  A debit never takes a balance below 0.  Every entry, and every
settlement a player took part in, is in the player's journal (:meth:`Ledger.entries`,
``shuangkou ledger show``), which disputes read next to the match settlements.
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

from engine.config import Level, RoomConfig
from engine.store.keys import PREFIX
from projections.settlement import Settlement

Mode = Literal["points", "wealth"]
MODES: tuple[Mode, ...] = ("points", "wealth")

TAG = "{ledger}"
SETTLED_KEY = f"{PREFIX}:{TAG}:settled"
BURNED_KEY = f"{PREFIX}:{TAG}:burned"
GRANTS_KEY = f"{PREFIX}:{TAG}:grants"
REFS_KEY = f"{PREFIX}:{TAG}:refs"
MAX_BALANCE = 10**15  # an operator entry never takes a balance above this (exact in Lua's doubles)


def journal_key(player: str) -> str:
    return f"{PREFIX}:{TAG}:journal:{player}"


@dataclass(frozen=True)
class LedgerEntry:
    """One line of a player's journal: an operator ``credit``/``debit`` or a ``settlement``.

    ``amount`` is the signed change of the balance (a debit is negative)."""

    kind: Literal["credit", "debit", "settlement"]
    player: str
    mode: str
    amount: int
    ref: str  # the command id of an operator entry, the match id of a settlement
    at_ms: int = 0
    reason: str = ""
    operator: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> LedgerEntry:
        return cls(**json.loads(text))

    @property
    def journal_field(self) -> str:
        return f"match:{self.ref}" if self.kind == "settlement" else f"{self.kind}:{self.ref}"


#: what :meth:`Ledger.record_entry` reports
ENTRY_APPLIED, ENTRY_DUPLICATE, ENTRY_INSUFFICIENT, ENTRY_OVERFLOW = "applied", "duplicate", "insufficient", "overflow"


def balance_key(mode: str) -> str:
    return f"{PREFIX}:{TAG}:bal:{mode}"


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be 'points' or 'wealth', got {mode!r}")


class Ledger(ABC):
    """Balances per player and mode, settled matches, burned totals."""

    @abstractmethod
    def balance(self, player: str, mode: Mode) -> int:
        """The player's balance in ``mode`` (0 when never seen)."""

    @abstractmethod
    def apply_settlement(self, match_id: str, settlement: Settlement, mode: Mode | None = None) -> bool:
        """Record the settlement and add its scores and burned amount, atomically.
        False (and nothing changes) when ``match_id`` was already applied.
        ``mode`` defaults to the settlement's own mode."""

    @abstractmethod
    def settlement(self, match_id: str) -> Settlement | None:
        """The applied settlement of a match, or None."""

    @abstractmethod
    def burned_total(self, mode: Mode) -> int:
        """Everything burned in ``mode`` so far (R-12.3's 30%)."""

    @abstractmethod
    def grant(self, player: str, mode: Mode, amount: int, ref: str) -> bool:
        """Add ``amount`` (may be negative) to a balance, once per ``ref``; False when ``ref`` was used."""

    @abstractmethod
    def settled_matches(self) -> Iterator[str]:
        """Ids of every applied match."""

    @abstractmethod
    def record_entry(self, entry: LedgerEntry) -> str:
        """Apply an operator credit/debit once per ``entry.ref``, atomically: ``applied``,
        ``duplicate`` (the ref was used; nothing changes), ``insufficient`` (a debit larger
        than the balance) or ``overflow`` (the balance would pass :data:`MAX_BALANCE`)."""

    @abstractmethod
    def entries(self, player: str) -> list[LedgerEntry]:
        """The player's journal: operator entries and settlements, oldest first."""

    def _settlement_entries(self, match_id: str, settlement: Settlement, mode: str) -> list[LedgerEntry]:
        at = int(time.time() * 1000)  # when it was booked (the match's own times are in its events)
        return [LedgerEntry("settlement", p, mode, int(d), match_id, at, reason="match settlement")
                for p, d in settlement.scores.items()]

    def is_settled(self, match_id: str) -> bool:
        return self.settlement(match_id) is not None

    def level_for(self, player: str, config: RoomConfig) -> Level | None:
        """The level a player sits at in a room of ``config`` (R-11).

        **Decision:** in a points room a balance below the first level (a
        player who lost into negative points) sits at the first level; in a
        wealth room it is None — the player cannot sit (R-11.1).
        """
        lv = config.level_of(self.balance(player, config.mode))
        if lv is None and config.mode == "points":
            return config.levels[0]
        return lv


class InMemoryLedger(Ledger):
    """The reference ledger (one lock; one dict update per apply)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._balances: dict[str, dict[str, int]] = {m: {} for m in MODES}
        self._settled: dict[str, str] = {}
        self._burned: dict[str, int] = {m: 0 for m in MODES}
        self._grants: dict[str, tuple[str, str, int]] = {}
        self._refs: dict[str, LedgerEntry] = {}
        self._journal: dict[str, dict[str, LedgerEntry]] = {}

    def balance(self, player: str, mode: Mode) -> int:
        _check_mode(mode)
        with self._lock:
            return self._balances[mode].get(player, 0)

    def apply_settlement(self, match_id: str, settlement: Settlement, mode: Mode | None = None) -> bool:
        mode = mode or settlement.mode
        _check_mode(mode)
        text = settlement.model_dump_json()
        with self._lock:
            if match_id in self._settled:
                return False
            bal = self._balances[mode]
            for player, delta in settlement.scores.items():
                bal[player] = bal.get(player, 0) + delta
            self._burned[mode] += settlement.burned
            self._settled[match_id] = text
            for e in self._settlement_entries(match_id, settlement, mode):
                self._journal.setdefault(e.player, {})[e.journal_field] = e
            return True

    def settlement(self, match_id: str) -> Settlement | None:
        with self._lock:
            text = self._settled.get(match_id)
        return None if text is None else Settlement.model_validate_json(text)

    def burned_total(self, mode: Mode) -> int:
        _check_mode(mode)
        with self._lock:
            return self._burned[mode]

    def grant(self, player: str, mode: Mode, amount: int, ref: str) -> bool:
        _check_mode(mode)
        with self._lock:
            if ref in self._grants:
                return False
            self._grants[ref] = (mode, player, amount)
            bal = self._balances[mode]
            bal[player] = bal.get(player, 0) + amount
            return True

    def settled_matches(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._settled))

    def record_entry(self, entry: LedgerEntry) -> str:
        _check_mode(entry.mode)
        with self._lock:
            if entry.ref in self._refs:
                return ENTRY_DUPLICATE
            bal = self._balances[entry.mode]
            new = bal.get(entry.player, 0) + entry.amount
            if entry.amount < 0 and new < 0:
                return ENTRY_INSUFFICIENT
            if new > MAX_BALANCE:
                return ENTRY_OVERFLOW
            bal[entry.player] = new
            self._refs[entry.ref] = entry
            self._journal.setdefault(entry.player, {})[entry.journal_field] = entry
            return ENTRY_APPLIED

    def entries(self, player: str) -> list[LedgerEntry]:
        with self._lock:
            return sorted(self._journal.get(player, {}).values(), key=lambda e: (e.at_ms, e.kind, e.ref))


_APPLY_LUA = """
-- KEYS[1] settled hash, KEYS[2] balances hash of the mode, KEYS[3] burned hash
-- ARGV[1] match id, ARGV[2] settlement JSON, ARGV[3] mode, ARGV[4] burned,
-- ARGV[5], ARGV[6], ... player, delta pairs
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return 0
end
for i = 5, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1])
end
if tonumber(ARGV[4]) ~= 0 then
  redis.call('HINCRBY', KEYS[3], ARGV[3], ARGV[4])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

_GRANT_LUA = """
-- KEYS[1] grants hash, KEYS[2] balances hash; ARGV ref, player, amount, record
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[4]) == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[2], ARGV[2], ARGV[3])
return 1
"""


_ENTRY_LUA = """
-- KEYS[1] refs hash, KEYS[2] balances hash of the mode, KEYS[3] the player's journal
-- ARGV[1] ref, ARGV[2] player, ARGV[3] signed amount, ARGV[4] entry JSON, ARGV[5] journal field,
-- ARGV[6] max balance.  Everything is checked before anything is written.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return 'duplicate'
end
local amount = tonumber(ARGV[3])
local new = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0') + amount
if amount < 0 and new < 0 then
  return 'insufficient'
end
if new > tonumber(ARGV[6]) then
  return 'overflow'
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
redis.call('HINCRBY', KEYS[2], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[5], ARGV[4])
return 'applied'
"""


def _s(v: bytes | str) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else v


class RedisLedger(Ledger):
    """The ledger on Redis: every write is one Lua script (check marker, write all, set marker)."""

    def __init__(self, client: Any):
        self.client = client
        self._apply = client.register_script(_APPLY_LUA)
        self._grant = client.register_script(_GRANT_LUA)
        self._entry = client.register_script(_ENTRY_LUA)

    def balance(self, player: str, mode: Mode) -> int:
        _check_mode(mode)
        v = self.client.hget(balance_key(mode), player)
        return 0 if v is None else int(v)

    def apply_settlement(self, match_id: str, settlement: Settlement, mode: Mode | None = None) -> bool:
        mode = mode or settlement.mode
        _check_mode(mode)
        args: list[Any] = [match_id, settlement.model_dump_json(), mode, int(settlement.burned)]
        for player, delta in settlement.scores.items():
            args += [player, int(delta)]
        done = self._apply(keys=[SETTLED_KEY, balance_key(mode), BURNED_KEY], args=args)
        self._journal_settlement(match_id, settlement, mode)
        return int(done) == 1

    def _journal_settlement(self, match_id: str, settlement: Settlement, mode: str) -> None:
        """The settlement in each player's journal (idempotent: rewritten on a redelivery)."""
        pipe = self.client.pipeline(transaction=False)
        for e in self._settlement_entries(match_id, settlement, mode):
            pipe.hset(journal_key(e.player), e.journal_field, e.to_json())
        pipe.execute()

    def settlement(self, match_id: str) -> Settlement | None:
        raw = self.client.hget(SETTLED_KEY, match_id)
        return None if raw is None else Settlement.model_validate_json(_s(raw))

    def burned_total(self, mode: Mode) -> int:
        _check_mode(mode)
        v = self.client.hget(BURNED_KEY, mode)
        return 0 if v is None else int(v)

    def grant(self, player: str, mode: Mode, amount: int, ref: str) -> bool:
        _check_mode(mode)
        record = f"{mode}|{player}|{int(amount)}"
        done = self._grant(keys=[GRANTS_KEY, balance_key(mode)], args=[ref, player, int(amount), record])
        return int(done) == 1

    def settled_matches(self) -> Iterator[str]:
        for k in self.client.hkeys(SETTLED_KEY):
            yield _s(k)

    def record_entry(self, entry: LedgerEntry) -> str:
        _check_mode(entry.mode)
        out = self._entry(keys=[REFS_KEY, balance_key(entry.mode), journal_key(entry.player)],
                          args=[entry.ref, entry.player, int(entry.amount), entry.to_json(),
                                entry.journal_field, MAX_BALANCE])
        return _s(out)

    def entries(self, player: str) -> list[LedgerEntry]:
        raw = self.client.hvals(journal_key(player))
        return sorted((LedgerEntry.from_json(v) for v in raw), key=lambda e: (e.at_ms, e.kind, e.ref))
