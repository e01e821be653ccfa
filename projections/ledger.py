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
``sk:{ledger}:parked``              hash    match id → JSON ``{"reason", "at_ms"}``: a settlement
                                            refused for good (moved aside, :meth:`Ledger.park`)
``sk:{ledger}:archived``            hash    match id → archive file: settled, then exported
                                            (``shuangkou archive``); still "settled" for apply
==================================  ======  ===============================================

Operator entries (:meth:`Ledger.record_entry`): coins and points enter or leave a
balance only through settlements and audited ``credit``/``debit`` entries, each with
an amount, a reason, the operator's id and a reference (the command id, so a retry
changes nothing).  A debit never takes a balance below 0.  Every entry, and every
settlement a player took part in, is in the player's journal (:meth:`Ledger.entries`,
``shuangkou ledger show``), which disputes read next to the match settlements.

Nothing half-done (issue 11 §3): every check happens before the first write.
A settlement whose scores do not sum to zero with its burned amount, or whose
amounts or resulting balances leave ``[-BALANCE_LIMIT, BALANCE_LIMIT]`` (inside
int64, so ``HINCRBY`` can never overflow half-way through), is refused with
:class:`LedgerRefused` and nothing is written: no partial credit.
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from redis.exceptions import NoScriptError

from engine.config import Level, RoomConfig
from engine.store import keys, replies, wire
from projections.settlement import Settlement

Mode = Literal["points", "wealth"]
MODES: tuple[Mode, ...] = ("points", "wealth")

TAG = keys.LEDGER_TAG
SETTLED_KEY = keys.ledger_key("settled")
BURNED_KEY = keys.ledger_key("burned")
GRANTS_KEY = keys.ledger_key("grants")
REFS_KEY = keys.ledger_key("refs")
MAX_BALANCE = 10**15  # an operator entry never takes a balance above this (exact in Lua's doubles)


def journal_key(player: str) -> str:
    return keys.ledger_key(f"journal:{player}")


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
PARKED_KEY = keys.ledger_key("parked")
ARCHIVED_KEY = keys.ledger_key("archived")

#: the largest |amount| and |balance| the ledger keeps (exactly, in Python and in Lua):
#: inside int64 (2**63 - 1 ≈ 9.22e18), so a checked HINCRBY never overflows
BALANCE_LIMIT = 9_200_000_000_000_000_000
assert BALANCE_LIMIT % 10**9 == 0  # the Lua script compares in units of 1e9 plus a remainder


def same_entry(booked: LedgerEntry, entry: LedgerEntry) -> bool:
    """Whether ``entry`` repeats the ``booked`` one (same kind, player, mode, amount and
    reason; the time and the operator of a retry may differ).

    >>> a = LedgerEntry("credit", "bob", "wealth", 70, "fixed-1", 5, "r", "op")
    >>> same_entry(a, LedgerEntry("credit", "bob", "wealth", 70, "fixed-1", 9, "r", "op2"))
    True
    >>> same_entry(a, LedgerEntry("credit", "bob", "wealth", 90, "fixed-1", 9, "other", "op"))
    False
    """
    return ((booked.kind, booked.player, booked.mode, booked.amount, booked.reason)
            == (entry.kind, entry.player, entry.mode, entry.amount, entry.reason))


class LedgerRefused(ValueError):
    """The ledger refused a write and changed nothing (a permanent error: retrying fails the same way).

    ``code``: ``overflow`` (an amount or a resulting balance beyond :data:`BALANCE_LIMIT`),
    ``not_zero_sum`` (scores + burned != 0), ``bad_amount`` (a grant's or an entry's amount that
    is not an integer; a :class:`Settlement`'s are integers and its burned is never negative by
    its own validation), ``corrupt`` (a stored balance is not an integer).
    """

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


class LedgerEntryConflict(LedgerRefused):
    """:meth:`Ledger.record_entry` with a command id (``ref``) already booked for a
    different entry (:func:`same_entry`); nothing changed.  ``booked`` is the entry on the books.

    >>> booked = LedgerEntry("credit", "bob", "wealth", 70, "fixed-1", 5, "r", "op")
    >>> str(LedgerEntryConflict(booked))
    "command id 'fixed-1' was already used for a different entry: credit for bob (wealth), amount 70, reason r; nothing changed (use a new command id)"
    """

    def __init__(self, booked: LedgerEntry):
        super().__init__("command_id_reused",
                         f"command id {booked.ref!r} was already used for a different entry: {booked.kind} "
                         f"for {booked.player} ({booked.mode}), amount {abs(booked.amount)}, "
                         f"reason {booked.reason}; nothing changed (use a new command id)")
        self.booked = booked


def check_settlement_amounts(settlement: Settlement) -> None:
    """The checks that need no stored balance (raise :class:`LedgerRefused`).

    >>> from projections.settlement import Settlement
    >>> s = Settlement(match_id="m", mode="points", winner="a", loser="b", kou="single",
    ...                cards_left={}, scores={"a": 2**63, "b": -2**63}, breakdown={})
    >>> try:
    ...     check_settlement_amounts(s)
    ... except LedgerRefused as exc:
    ...     print(exc.code)
    overflow
    """
    amounts = list(settlement.scores.items()) + [("burned", settlement.burned)]
    for who, v in amounts:
        if abs(v) > BALANCE_LIMIT:
            raise LedgerRefused("overflow", f"match {settlement.match_id}: the amount of {who} is beyond "
                                f"the ledger's limit of ±{BALANCE_LIMIT}")
    if sum(settlement.scores.values()) + settlement.burned != 0:
        raise LedgerRefused("not_zero_sum", f"match {settlement.match_id}: scores plus burned do not sum to 0")


def balance_key(mode: str) -> str:
    return keys.ledger_key(f"bal:{mode}")


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be 'points' or 'wealth', got {mode!r}")


def _check_amount(amount: int) -> None:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise LedgerRefused("bad_amount", "an amount must be an integer")
    if abs(amount) > BALANCE_LIMIT:
        raise LedgerRefused("overflow", f"the amount is beyond the ledger's limit of ±{BALANCE_LIMIT}")


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
        ``duplicate`` (the ref was used for the same entry, :func:`same_entry`; nothing changes),
        ``insufficient`` (a debit larger than the balance) or ``overflow`` (the balance would
        pass :data:`MAX_BALANCE`).  A ref used for a different entry raises
        :class:`LedgerEntryConflict` (nothing changes)."""

    @abstractmethod
    def entries(self, player: str) -> list[LedgerEntry]:
        """The player's journal: operator entries and settlements, oldest first."""

    def _settlement_entries(self, match_id: str, settlement: Settlement, mode: str) -> list[LedgerEntry]:
        at = int(time.time() * 1000)  # when it was booked (the match's own times are in its events)
        return [LedgerEntry("settlement", p, mode, int(d), match_id, at, reason="match settlement")
                for p, d in settlement.scores.items()]

    def journal_players(self) -> list[str]:
        """Every player with a journal (projections/audit.py reads them all)."""
        return []

    @abstractmethod
    def park(self, match_id: str, reason: str) -> bool:
        """Move a match's settlement aside with its reason (a permanent error: the
        runner goes on with the others); False when it was parked already."""

    @abstractmethod
    def parked(self) -> dict[str, dict[str, Any]]:
        """Parked matches: match id → ``{"reason", "at_ms"}``."""

    @abstractmethod
    def unpark(self, match_id: str) -> bool:
        """Forget a parked match (an operator fixed it; reconcile settles it again)."""

    @abstractmethod
    def mark_archived(self, match_id: str, where: str) -> bool:
        """The match was exported to ``where`` (``shuangkou archive``): its settlement JSON
        leaves Redis, a small marker stays so that it is never applied again."""

    @abstractmethod
    def mark_archived_unsettled(self, match_id: str, where: str) -> None:
        """An abandoned match (MatchAbandoned: nothing was settled) was exported to ``where``:
        the same marker as :meth:`mark_archived`, with no settlement to take out of Redis."""

    @abstractmethod
    def archived(self, match_id: str) -> str | None:
        """Where an archived match was exported, or None."""

    def is_settled(self, match_id: str) -> bool:
        """Applied (its settlement is here, or it was archived after it was applied)."""
        return self.settlement(match_id) is not None or self.archived(match_id) is not None

    def unsettled(self, match_ids: Sequence[str]) -> list[str]:
        """The ids among ``match_ids`` with no applied settlement, in order."""
        return [m for m in match_ids if not self.is_settled(m)]

    def level_for(self, player: str, config: RoomConfig) -> Level | None:
        """The level a player sits at in a room of ``config`` (R-11), None when they cannot
        sit (:meth:`engine.config.RoomConfig.seat_level`)."""
        return config.seat_level(self.balance(player, config.mode))


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
        self._parked: dict[str, dict[str, Any]] = {}
        self._archived: dict[str, str] = {}

    def _checked(self, mode: str, deltas: list[tuple[str, int]]) -> dict[str, int]:
        """New balances for ``deltas`` (under the lock), or LedgerRefused; writes nothing."""
        bal = self._balances[mode]
        new: dict[str, int] = {}
        for player, delta in deltas:
            v = new.get(player, bal.get(player, 0)) + delta
            if abs(v) > BALANCE_LIMIT:
                raise LedgerRefused("overflow", f"the {mode} balance of {player} would leave the ledger's "
                                    f"limit of ±{BALANCE_LIMIT}")
            new[player] = v
        return new

    def balance(self, player: str, mode: Mode) -> int:
        _check_mode(mode)
        with self._lock:
            return self._balances[mode].get(player, 0)

    def apply_settlement(self, match_id: str, settlement: Settlement, mode: Mode | None = None) -> bool:
        mode = mode or settlement.mode
        _check_mode(mode)
        check_settlement_amounts(settlement)
        text = settlement.model_dump_json()
        with self._lock:
            if match_id in self._settled or match_id in self._archived:
                return False
            new = self._checked(mode, list(settlement.scores.items()))
            burned = self._burned[mode] + settlement.burned
            if burned > BALANCE_LIMIT:
                raise LedgerRefused("overflow", f"the burned total of {mode} would leave the ledger's limit")
            self._balances[mode].update(new)
            self._burned[mode] = burned
            self._settled[match_id] = text
            for e in self._settlement_entries(match_id, settlement, mode):
                self._journal.setdefault(e.player, {})[e.journal_field] = e
            self._parked.pop(match_id, None)
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
        _check_amount(amount)
        with self._lock:
            if ref in self._grants:
                return False
            new = self._checked(mode, [(player, amount)])
            self._grants[ref] = (mode, player, amount)
            self._balances[mode].update(new)
            return True

    def settled_matches(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._settled))

    def record_entry(self, entry: LedgerEntry) -> str:
        _check_mode(entry.mode)
        with self._lock:
            booked = self._refs.get(entry.ref)
            if booked is not None:
                if not same_entry(booked, entry):
                    raise LedgerEntryConflict(booked)
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

    def journal_players(self) -> list[str]:
        with self._lock:
            return sorted(self._journal)

    def park(self, match_id: str, reason: str) -> bool:
        with self._lock:
            if match_id in self._parked:
                return False
            self._parked[match_id] = {"reason": reason[:2000], "at_ms": int(time.time() * 1000)}
            return True

    def parked(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self._parked.items()}

    def unpark(self, match_id: str) -> bool:
        with self._lock:
            return self._parked.pop(match_id, None) is not None

    def mark_archived(self, match_id: str, where: str) -> bool:
        with self._lock:
            if match_id not in self._settled:
                return False
            self._archived[match_id] = where
            del self._settled[match_id]
            return True

    def mark_archived_unsettled(self, match_id: str, where: str) -> None:
        with self._lock:
            self._archived[match_id] = where

    def archived(self, match_id: str) -> str | None:
        with self._lock:
            return self._archived.get(match_id)


_CHECK_LUA = """
-- helpers shared by the ledger scripts: every check happens before the first write.
-- Lua numbers are doubles (exact to 2^53 only), so an amount is kept as two exact
-- parts, value = hi * 1e9 + lo with 0 <= lo < 1e9, and compared with the limit exactly.
local LIMIT_HI = tonumber(ARGV[1])  -- BALANCE_LIMIT / 1e9
local function norm(h, l)
  local c = math.floor(l / 1e9)
  return {h + c, l - c * 1e9}
end
local function parse(v, what)
  if v == false or v == nil then return {0, 0} end
  if type(v) ~= 'string' or not string.match(v, '^%-?%d+$') or #v > 20 then
    error({code = 'corrupt', reason = what .. ' is not an integer'})
  end
  local neg = string.sub(v, 1, 1) == '-'
  local d = neg and string.sub(v, 2) or v
  local h = tonumber(string.sub(d, 1, -10)) or 0
  local l = tonumber(string.sub(d, -9))
  if neg then h, l = -h, -l end
  return norm(h, l)
end
local function plus(a, b)
  return norm(a[1] + b[1], a[2] + b[2])
end
local function check(v, what)
  if v[1] > LIMIT_HI or (v[1] == LIMIT_HI and v[2] > 0) or v[1] < -LIMIT_HI then
    error({code = 'overflow', reason = what .. ' would leave the limit'})
  end
  return v
end
local function is_zero(v) return v[1] == 0 and v[2] == 0 end
"""

#: runs ``main``; its reply as field/value pairs (never positional, :func:`_script_reply`):
#: ``{"status", "done", "value", n}``, or a refusal raised inside it (nothing was written: every
#: refusal is raised before the first write) ``{"status", "refused", "code", c, "reason", r}``;
#: any other Lua error stays an error reply
_MAIN_LUA = """
local ok, res = pcall(main)
if not ok then
  if type(res) == 'table' and res.code then
    return {'status', 'refused', 'code', res.code, 'reason', res.reason}
  end
  return redis.error_reply(tostring(res))
end
return {'status', 'done', 'value', res}
"""

_APPLY_LUA = _CHECK_LUA + """
local function main()
-- KEYS[1] settled hash, KEYS[2] balances hash of the mode, KEYS[3] burned hash,
-- KEYS[4] parked hash, KEYS[5] archived hash
-- ARGV[1] limit, ARGV[2] match id, ARGV[3] settlement JSON, ARGV[4] mode, ARGV[5] burned,
-- ARGV[6], ARGV[7], ... player, delta pairs
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 or redis.call('HEXISTS', KEYS[5], ARGV[2]) == 1 then
  return 0
end
-- (the zero sum of scores and burned is checked exactly in Python before the call:
-- Lua numbers are doubles)
local pending = {}
for i = 6, #ARGV, 2 do
  local delta = check(parse(ARGV[i + 1], 'a delta'), 'a delta')
  local cur = pending[ARGV[i]]
  if cur == nil then
    cur = parse(redis.call('HGET', KEYS[2], ARGV[i]), 'a balance')
  end
  pending[ARGV[i]] = check(plus(cur, delta), 'a balance')
end
local burned = check(parse(ARGV[5], 'burned'), 'burned')
if not is_zero(burned) then
  check(plus(parse(redis.call('HGET', KEYS[3], ARGV[4]), 'the burned total'), burned), 'the burned total')
end
-- every check passed: write
for i = 6, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1])
end
if not is_zero(burned) then
  redis.call('HINCRBY', KEYS[3], ARGV[4], ARGV[5])
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('HDEL', KEYS[4], ARGV[2])
return 1
end
""" + _MAIN_LUA

_GRANT_LUA = _CHECK_LUA + """
local function main()
-- KEYS[1] grants hash, KEYS[2] balances hash; ARGV limit, ref, player, amount, record
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  return 0
end
local amount = check(parse(ARGV[4], 'the amount'), 'the amount')
check(plus(parse(redis.call('HGET', KEYS[2], ARGV[3]), 'a balance'), amount), 'a balance')
redis.call('HSET', KEYS[1], ARGV[2], ARGV[5])
redis.call('HINCRBY', KEYS[2], ARGV[3], ARGV[4])
return 1
end
""" + _MAIN_LUA

_ARCHIVE_LUA = """
-- KEYS[1] settled hash, KEYS[2] archived hash; ARGV match id, where
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
"""


def _script_reply(reply: Any) -> int:
    """A ledger script's reply read by name (``_MAIN_LUA``): its value, or the
    :class:`LedgerRefused` it stands for raised; a script without ``main`` answers the int.

    >>> _script_reply([b"status", b"done", b"value", 1])
    1
    >>> _script_reply([b"status", b"refused", b"code", b"overflow", b"reason", b"a balance would leave the limit"])
    Traceback (most recent call last):
    ...
    projections.ledger.LedgerRefused: a balance would leave the limit
    """
    if not isinstance(reply, list):
        return int(reply)
    fields = replies.fields(reply)
    if _s(fields["status"]) == "refused":
        raise LedgerRefused(_s(fields["code"]), _s(fields["reason"]))
    return int(fields["value"])


_ENTRY_LUA = """
-- KEYS[1] refs hash, KEYS[2] balances hash of the mode, KEYS[3] the player's journal
-- ARGV[1] ref, ARGV[2] player, ARGV[3] signed amount, ARGV[4] entry JSON, ARGV[5] journal field,
-- ARGV[6] max balance.  Everything is checked before anything is written.
-- Replies (field/value pairs): {"status", "duplicate", "booked", <the booked entry's JSON>}
-- (Python compares it with this one), {"status", "insufficient" | "overflow" | "applied"}.
local booked = redis.call('HGET', KEYS[1], ARGV[1])
if booked then
  return {'status', 'duplicate', 'booked', booked}
end
local amount = tonumber(ARGV[3])
local new = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0') + amount
if amount < 0 and new < 0 then
  return {'status', 'insufficient'}
end
if new > tonumber(ARGV[6]) then
  return {'status', 'overflow'}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
redis.call('HINCRBY', KEYS[2], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[5], ARGV[4])
return {'status', 'applied'}
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
        self._archive = client.register_script(_ARCHIVE_LUA)
        #: ``--replica-acks N`` (engine/store/replicas.py): a settlement or entry returns once on N replicas
        self.replica_acks: Any = None

    def _replicated(self) -> None:
        if self.replica_acks is not None:
            self.replica_acks.confirm([SETTLED_KEY])  # every ledger key shares the {ledger} tag

    def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """A script's reply: sent packed on a plain Redis (engine/store/wire.py), else through
        redis-py; a script the server does not hold (NOSCRIPT) goes through redis-py, which
        loads it."""
        if wire.usable(self.client):
            reply = wire.round_trip(self.client, [wire.pack("EVALSHA", script.sha, len(keys), *keys, *args)])[0]
            if not isinstance(reply, NoScriptError):
                if isinstance(reply, Exception):
                    raise reply
                return reply
        return script(keys=keys, args=args)

    def _run(self, script: Any, keys: list[str], args: list[Any]) -> int:
        return _script_reply(self._call(script, keys, args))

    def balance(self, player: str, mode: Mode) -> int:
        _check_mode(mode)
        if wire.usable(self.client):
            v = wire.checked(self.client, [wire.pack("HGET", balance_key(mode), player)])[0]
        else:
            v = self.client.hget(balance_key(mode), player)
        return 0 if v is None else int(v)

    def apply_settlement(self, match_id: str, settlement: Settlement, mode: Mode | None = None) -> bool:
        mode = mode or settlement.mode
        _check_mode(mode)
        check_settlement_amounts(settlement)
        args: list[Any] = [BALANCE_LIMIT // 10**9, match_id, settlement.model_dump_json(), mode, int(settlement.burned)]
        for player, delta in settlement.scores.items():
            args += [player, int(delta)]
        done = self._run(self._apply, [SETTLED_KEY, balance_key(mode), BURNED_KEY, PARKED_KEY, ARCHIVED_KEY],
                         args)
        self._journal_settlement(match_id, settlement, mode)
        self._replicated()
        return done == 1

    def _journal_settlement(self, match_id: str, settlement: Settlement, mode: str) -> None:
        """The settlement in each player's journal (idempotent: rewritten on a redelivery)."""
        writes = [(journal_key(e.player), e.journal_field, e.to_json())
                  for e in self._settlement_entries(match_id, settlement, mode)]
        if wire.usable(self.client):  # packed, one write (engine/store/wire.py)
            wire.checked(self.client, [wire.pack("HSET", *w) for w in writes])
            return
        pipe = self.client.pipeline(transaction=False)
        for key, name, value in writes:
            pipe.hset(key, name, value)
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
        _check_amount(amount)
        record = f"{mode}|{player}|{int(amount)}"
        done = self._run(self._grant, [GRANTS_KEY, balance_key(mode)],
                         [BALANCE_LIMIT // 10**9, ref, player, int(amount), record])
        self._replicated()
        return done == 1

    def settled_matches(self) -> Iterator[str]:
        for k in self.client.hkeys(SETTLED_KEY):
            yield _s(k)

    def record_entry(self, entry: LedgerEntry) -> str:
        _check_mode(entry.mode)
        out = self._call(self._entry, [REFS_KEY, balance_key(entry.mode), journal_key(entry.player)],
                         [entry.ref, entry.player, int(entry.amount), entry.to_json(), entry.journal_field,
                          MAX_BALANCE])
        fields = replies.fields(out)
        status = _s(fields["status"])
        if status == "duplicate":  # the booked entry
            booked = LedgerEntry.from_json(_s(fields["booked"]))
            if not same_entry(booked, entry):
                raise LedgerEntryConflict(booked)
            self._replicated()  # answered "duplicate" only once the booked entry is on the replicas
            return ENTRY_DUPLICATE
        self._replicated()
        return status

    def entries(self, player: str) -> list[LedgerEntry]:
        raw = self.client.hvals(journal_key(player))
        return sorted((LedgerEntry.from_json(v) for v in raw), key=lambda e: (e.at_ms, e.kind, e.ref))

    def journal_players(self) -> list[str]:
        """SCAN of ``sk:{ledger}:journal:*`` (one slot on a Cluster: the ``{ledger}`` tag)."""
        prefix = journal_key("")
        keys = self.client.scan_iter(match=prefix + "*", count=1000)
        return sorted({_s(k)[len(prefix):] for k in keys})
    def unsettled(self, match_ids: Sequence[str]) -> list[str]:
        out: list[str] = []
        ids = list(match_ids)
        for at in range(0, len(ids), 500):
            chunk = ids[at:at + 500]
            pipe = self.client.pipeline(transaction=False)
            for m in chunk:
                pipe.hexists(SETTLED_KEY, m)
                pipe.hexists(ARCHIVED_KEY, m)
            flags = pipe.execute()
            out += [m for k, m in enumerate(chunk) if not (flags[2 * k] or flags[2 * k + 1])]
        return out

    def park(self, match_id: str, reason: str) -> bool:
        record = json.dumps({"reason": reason[:2000], "at_ms": int(time.time() * 1000)})
        return bool(self.client.hsetnx(PARKED_KEY, match_id, record))

    def parked(self) -> dict[str, dict[str, Any]]:
        return {_s(k): json.loads(_s(v)) for k, v in self.client.hgetall(PARKED_KEY).items()}

    def unpark(self, match_id: str) -> bool:
        return bool(self.client.hdel(PARKED_KEY, match_id))

    def mark_archived(self, match_id: str, where: str) -> bool:
        return self._run(self._archive, [SETTLED_KEY, ARCHIVED_KEY], [match_id, where]) == 1

    def mark_archived_unsettled(self, match_id: str, where: str) -> None:
        self.client.hset(ARCHIVED_KEY, match_id, where)

    def archived(self, match_id: str) -> str | None:
        v = self.client.hget(ARCHIVED_KEY, match_id)
        return None if v is None else _s(v)
