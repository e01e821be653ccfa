"""What one client may cost the gateway (issue 23 items 1 and 5): message size, command rate,
Sync rate, unauthenticated sockets per address, sockets per watching token.  Pure
bookkeeping, the clock passed in.

* :class:`Limits` -- the settings (``shuangkou gateway --max-message-bytes --rate --burst
  --rate-close-after --sync-rate --max-unauthenticated-per-address --max-sockets-per-watcher
  --trusted-proxy``).
* :class:`TokenBucket` -- ``rate`` tokens a second up to ``burst``; a command takes one.
* :class:`SocketBudget` -- one socket's buckets: a command over the rate is refused
  ``rate_limited``; a socket refused without a break for :attr:`Limits.close_after_s`
  is closed 4429; a Sync or a Watch (each asks the engine for a view) also needs the Sync
  bucket (at most ``sync_rate`` a second reach the engine).
* :class:`SubjectBudgets` -- each token subject's budget, kept across its sockets on this
  gateway: a client that connects again finds its buckets as it left them, and each new
  socket takes one of the subject's connects (``connect_rate`` a second, a burst of
  ``connect_burst``): a greeting asks the engine for a view and the lobby for a Returned.
* :class:`AddressCount` -- unauthenticated sockets per client address (the peer, or the
  first untrusted hop of ``X-Forwarded-For`` when the peer is a ``--trusted-proxy``); also
  a spectator's or operator's sockets per token subject (a player's newer socket replaces
  the older, a watcher's do not: each could ask the engine for views at the Sync rate).

>>> b = TokenBucket(rate=20, burst=40, now=0.0)
>>> sum(b.take(0.0) for _ in range(50))
40
>>> b.take(0.05)  # one token back after 1/20 s
True
>>> b.take(0.05)
False
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

CLOSE_RATE_LIMITED = 4429
CALM_S = 1.0  # a socket with no refusal for this long is no longer over its rate
#: the messages that ask the engine for a view (a Sync in the player's name): the Sync budget
VIEW_REQUESTS = ("Sync", "Watch")


@dataclass(frozen=True)
class Limits:
    """The gateway's per-client limits (defaults: docs/SECURITY.md)."""

    max_message_bytes: int = 16 * 1024
    rate: float = 20.0
    burst: int = 40
    sync_rate: float = 2.0
    close_after_s: float = 10.0
    unauthenticated_per_address: int = 20
    #: sockets of one spectator or operator (the token's subject) open at once on this gateway
    sockets_per_watcher: int = 8
    #: new sockets one token subject may open a second on this gateway, sustained, and at once
    connect_rate: float = 1.0
    connect_burst: int = 5
    trusted_proxies: tuple[str, ...] = ()
    #: JoinTable attempts (right or wrong codes) a player, and an address, may make per window
    join_table_per_player: int = 10
    join_table_per_address: int = 30
    join_table_window_s: int = 60
    #: private tables a player may open (CreateTable) per ``join_table_window_s``: each keeps its
    #: series' keys and code until the table is archived
    create_table_per_player: int = 5

    def __post_init__(self) -> None:
        if not 256 <= self.max_message_bytes <= 16 * 1024 * 1024:
            raise ValueError(f"--max-message-bytes must be 256..16777216, got {self.max_message_bytes}")
        if not 0 < self.rate <= 100_000 or not 1 <= self.burst <= 1_000_000:
            raise ValueError(f"--rate must be > 0 and --burst >= 1, got {self.rate} and {self.burst}")
        if not 0 < self.sync_rate <= 1000:
            raise ValueError(f"--sync-rate must be > 0 and at most 1000, got {self.sync_rate}")
        if not 0 < self.close_after_s <= 3600:
            raise ValueError(f"--rate-close-after must be > 0 and at most 3600 s, got {self.close_after_s}")
        if self.unauthenticated_per_address < 1:
            raise ValueError("--max-unauthenticated-per-address must be at least 1")
        if self.sockets_per_watcher < 1:
            raise ValueError("--max-sockets-per-watcher must be at least 1")
        if not 0 < self.connect_rate <= 1000 or not 1 <= self.connect_burst <= 1000:
            raise ValueError(f"--connect-rate must be > 0 and at most 1000, --connect-burst 1..1000, got "
                             f"{self.connect_rate} and {self.connect_burst}")
        for p in self.trusted_proxies:
            try:
                ipaddress.ip_network(p, strict=False)
            except ValueError as exc:  # its text names the bad one
                raise ValueError(f"--trusted-proxy: {exc}") from None


@dataclass
class TokenBucket:
    rate: float
    burst: float
    now: float
    tokens: float = -1.0

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = float(self.burst)

    def take(self, now: float, cost: float = 1.0) -> bool:
        """Take ``cost`` tokens at time ``now`` (seconds); False (nothing taken) when short."""
        if now > self.now:
            self.tokens = min(float(self.burst), self.tokens + (now - self.now) * self.rate)
            self.now = now
        if self.tokens >= cost:
            self.tokens -= cost
            return True
        return False


@dataclass
class SocketBudget:
    """One socket's command and Sync buckets and how long it has been over them.

    A socket is *over* from its first refusal until it goes :data:`CALM_S` without one; a
    refusal while it has been over for ``close_after_s`` is ``close``.

    >>> s = SocketBudget(Limits(rate=1, burst=1), now=0.0)
    >>> flood = [s.admit("Play", i / 10) for i in range(110)]  # 10 a second against 1 a second
    >>> flood[:3], flood.count("ok"), "close" in flood[:100], "close" in flood[100:103]
    (['ok', 'rate_limited', 'rate_limited'], 11, False, True)
    >>> s = SocketBudget(Limits(rate=1, burst=1), now=0.0)
    >>> s.admit("Play", 0.0), s.admit("Play", 0.5), s.admit("Play", 3.0), s.admit("Play", 11.0), s.admit("Play", 11.1)
    ('ok', 'rate_limited', 'ok', 'ok', 'rate_limited')
    >>> s = SocketBudget(Limits(), now=0.0)
    >>> [s.admit("Sync", 0.0) for _ in range(3)]
    ['ok', 'ok', 'sync_limited']
    >>> s = SocketBudget(Limits(), now=0.0)  # a Watch asks for a view as a Sync does
    >>> [s.admit(t, 0.0) for t in ("Watch", "Sync", "Watch", "Play")]
    ['ok', 'ok', 'sync_limited', 'ok']
    """

    limits: Limits
    now: float
    commands: TokenBucket = field(init=False)
    syncs: TokenBucket = field(init=False)
    over_since: float | None = None
    last_refused: float | None = None

    def __post_init__(self) -> None:
        self.commands = TokenBucket(self.limits.rate, self.limits.burst, self.now)
        self.syncs = TokenBucket(self.limits.sync_rate, max(1.0, self.limits.sync_rate), self.now)

    def admit(self, message_type: str, now: float, view_free: bool = False) -> str:
        """``ok``; ``rate_limited`` (refuse it); ``sync_limited`` (a Sync over the Sync rate:
        refuse it, it never reaches the engine); ``close`` (over for ``close_after_s``: 4429).
        ``view_free``: a view request outside the Sync bucket (a socket's first Watch)."""
        if self.last_refused is not None and now - self.last_refused >= CALM_S:
            self.over_since = None  # it calmed down
        if not self.commands.take(now):
            self.last_refused = now
            if self.over_since is None:
                self.over_since = now
            elif now - self.over_since >= self.limits.close_after_s:
                return "close"
            return "rate_limited"
        if message_type in VIEW_REQUESTS and not view_free and not self.syncs.take(now):
            return "sync_limited"
        return "ok"


#: token subjects whose budgets a gateway keeps; past it the least recently used is dropped (a
#: budget left alone for its bucket's refill is a fresh one anyway)
MAX_SUBJECTS = 50_000


@dataclass
class SubjectBudgets:
    """Each token subject's :class:`SocketBudget` and connect bucket, kept across its sockets:
    rates are per subject (the token's ``sub``, whatever its role: one person's player and
    spectator tokens share them) on this gateway, so closing a socket and opening another, or
    one of another role, never refills them (a player's socket replaces the older; a
    watcher's several share one).

    >>> b = SubjectBudgets(Limits(connect_rate=1, connect_burst=2))
    >>> [b.connect("ann", 0.0) for _ in range(3)], b.connect("bob", 0.0), b.connect("ann", 1.0)
    ([True, True, False], True, True)
    >>> first = b.budget("ann", 0.0)
    >>> [first.admit("Sync", 0.0) for _ in range(2)], b.budget("ann", 0.1) is first
    (['ok', 'ok'], True)
    >>> b.budget("ann", 0.1).admit("Sync", 0.1)  # a new socket of ann's: the same bucket
    'sync_limited'
    >>> b.budget("ann", 0.1).admit("Watch", 0.1, view_free=True)  # a socket's first Watch
    'ok'
    """

    limits: Limits
    max_subjects: int = MAX_SUBJECTS
    _budgets: OrderedDict[str, SocketBudget] = field(default_factory=OrderedDict)
    _connects: OrderedDict[str, TokenBucket] = field(default_factory=OrderedDict)

    def budget(self, subject: str, now: float) -> SocketBudget:
        """The subject's message and Sync budget (a fresh one the first time)."""
        b = self._budgets.get(subject)
        if b is None:
            b = self._budgets[subject] = SocketBudget(self.limits, now)
            self._trim(self._budgets)
        else:
            self._budgets.move_to_end(subject)
        return b

    def connect(self, subject: str, now: float) -> bool:
        """Take one of the subject's connects; False (nothing taken) when it has none left."""
        c = self._connects.get(subject)
        if c is None:
            c = self._connects[subject] = TokenBucket(self.limits.connect_rate, self.limits.connect_burst, now)
            self._trim(self._connects)
        else:
            self._connects.move_to_end(subject)
        return c.take(now)

    def _trim(self, kept: OrderedDict[str, Any]) -> None:
        while len(kept) > self.max_subjects:
            kept.popitem(last=False)


def client_address(peer: str | None, forwarded_for: str | None, trusted: tuple[str, ...]) -> str:
    """The client's address: the peer, unless the peer is a trusted proxy; then the last
    address of ``X-Forwarded-For`` that is not itself a trusted proxy (the header's earlier
    entries are the client's own word).

    >>> client_address("10.0.0.5", "6.6.6.6, 1.2.3.4", ("10.0.0.0/8",))
    '1.2.3.4'
    >>> client_address("9.9.9.9", "1.2.3.4", ("10.0.0.0/8",))  # not a proxy of ours: its header is ignored
    '9.9.9.9'
    """
    peer = peer or "unknown"
    if not trusted or not forwarded_for or not _trusted(peer, trusted):
        return peer
    for hop in reversed([h.strip() for h in forwarded_for.split(",") if h.strip()]):
        if not _trusted(hop, trusted):
            return hop[:64]
    return peer


def address_in(address: str, networks: tuple[str, ...]) -> bool:
    """Whether ``address`` is in one of ``networks`` (CIDRs); an unparsable address is in none.

    >>> address_in("172.18.0.4", ("172.16.0.0/12",)), address_in("8.8.8.8", ("10.0.0.0/8",))
    (True, False)
    """
    return _trusted(address, networks)


def _trusted(address: str, trusted: tuple[str, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(t, strict=False) for t in trusted)


@dataclass
class AddressCount:
    """Sockets per key, at most ``limit`` each: unauthenticated ones per address, a watcher's per token subject.

    >>> c = AddressCount(limit=2)
    >>> c.acquire("a"), c.acquire("a"), c.acquire("a"), c.acquire("b")
    (True, True, False, True)
    >>> c.release("a"); c.acquire("a")
    True
    """

    limit: int
    counts: dict[str, int] = field(default_factory=dict)

    def acquire(self, address: str) -> bool:
        n = self.counts.get(address, 0)
        if n >= self.limit:
            return False
        self.counts[address] = n + 1
        return True

    def release(self, address: str) -> None:
        n = self.counts.get(address, 0) - 1
        if n > 0:
            self.counts[address] = n
        else:
            self.counts.pop(address, None)
