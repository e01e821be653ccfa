"""Provably fair deals: the commitment and the deck as a pure function of the seeds.

docs/FAIRNESS.md is the specification (byte layouts, a worked example); this
module is its reference implementation.  Nothing here draws a random number:
the server seed is drawn by the service (``secrets``), enters ``decide``
through its context, is committed to in ``MatchCreated`` before any card is
dealt and revealed in ``MatchFinished``.

* :func:`commitment` -- ``SHA-256(server_seed ‖ UTF-8(match_id))``, lowercase hex.
* :class:`DealStream` -- HMAC-SHA-256 in counter mode (key: the server seed;
  message: a domain tag, the match id and both client seeds, length-prefixed,
  then a 4-byte big-endian block counter), read as 4-byte big-endian words;
  :meth:`DealStream.below` draws an integer in ``[0, n)`` by rejection
  sampling (no modulo bias).
* :func:`fair_deal` -- Fisher–Yates over the card ids ``0..107``, then the
  lead index (one of the 54 dealt cards, R-1.4) from the same stream.

>>> seed = bytes(range(32))
>>> commitment(seed, "m1")[:16]
'05e3848c4e92ab8f'
>>> d = fair_deal(seed, ("alice-seed", "bob-seed"), "m1")
>>> len(d.hands[0]), len(d.hands[1]), len(d.set_aside), d.first in (0, 1)
(27, 27, 54, True)
>>> fair_deal(seed, ("alice-seed", "bob-seed"), "m1") == d
True
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.rules.cards import HAND_SIZE, NUM_CARDS, sort_cards

if TYPE_CHECKING:
    from engine.match.events import EventBase

#: the first bytes of every HMAC message: names the construction and its version
DOMAIN = b"shuangkou/fair-deal/v1"
SEED_BYTES = 32  # the server seed: 32 bytes from a CSPRNG
SEED_HEX = 2 * SEED_BYTES
CLIENT_SEED_MAX = 64  # characters
DEALT = 2 * HAND_SIZE  # the lead card is one of the 54 dealt cards
_WORD = 2 ** 32


class FairnessError(ValueError):
    """A seed that cannot be used (wrong length, not hex, bad client seed)."""


def seed_from_hex(text: str) -> bytes:
    """The 32 bytes of a server seed written as 64 hex digits.

    >>> seed_from_hex("00" * 32) == bytes(32)
    True
    """
    if not isinstance(text, str) or len(text) != SEED_HEX:
        raise FairnessError(f"a server seed is {SEED_HEX} hex digits")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise FairnessError("a server seed is written in hex digits 0-9 a-f") from None


def commitment(server_seed: bytes, match_id: str) -> str:
    """``SHA-256(server_seed ‖ UTF-8(match_id))`` as 64 lowercase hex digits."""
    return hashlib.sha256(bytes(server_seed) + match_id.encode("utf-8")).hexdigest()


def client_seed_problem(value: object) -> str | None:
    """Why ``value`` is no client seed (None when it is one): 1–64 printable characters.

    >>> client_seed_problem("lucky 7"), client_seed_problem("")
    (None, 'a client seed has 1-64 characters, got 0')
    """
    if not isinstance(value, str):
        return "a client seed is a string"
    if not 1 <= len(value) <= CLIENT_SEED_MAX:
        return f"a client seed has 1-{CLIENT_SEED_MAX} characters, got {len(value)}"
    if not value.isprintable():
        return "a client seed holds printable characters only (no control characters)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "a client seed must be valid text (no lone surrogates)"
    return None


def default_client_seed(player: str) -> str:
    """The client seed of a player who sent none: their player id.

    >>> default_client_seed("alice")
    'alice'
    """
    return player


def _lp(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">I", len(raw)) + raw


def stream_message(client_seeds: Sequence[str], match_id: str) -> bytes:
    """The HMAC message without its counter: DOMAIN ‖ lp(match_id) ‖ lp(seed0) ‖ lp(seed1),
    ``lp(s)`` = 4-byte big-endian byte length of UTF-8(s) ‖ UTF-8(s)."""
    if len(client_seeds) != 2:
        raise FairnessError("a deal takes two client seeds (seat 0, seat 1)")
    return DOMAIN + _lp(match_id) + _lp(client_seeds[0]) + _lp(client_seeds[1])


class DealStream:
    """The random stream of a deal: HMAC-SHA-256(server_seed, message ‖ u32be(counter)),
    counter 0, 1, 2…, concatenated and read as big-endian 4-byte words.

    >>> s = DealStream(bytes(32), ("a", "b"), "m")
    >>> all(0 <= s.below(108) < 108 for _ in range(500))
    True
    """

    def __init__(self, server_seed: bytes, client_seeds: Sequence[str], match_id: str):
        if len(server_seed) != SEED_BYTES:
            raise FairnessError(f"a server seed is {SEED_BYTES} bytes, got {len(server_seed)}")
        self._key = bytes(server_seed)
        self._message = stream_message(client_seeds, match_id)
        self._words = self._generate()
        self.words_used = 0

    def block(self, counter: int) -> bytes:
        """Block ``counter`` (32 bytes) of the stream."""
        return hmac.new(self._key, self._message + struct.pack(">I", counter), hashlib.sha256).digest()

    def _generate(self) -> Iterator[int]:
        for counter in range(_WORD):
            block = self.block(counter)
            yield from struct.unpack(">8I", block)
        raise FairnessError("the deal stream ran out (2^32 blocks)")  # pragma: no cover

    def word(self) -> int:
        """The next 32-bit word of the stream."""
        self.words_used += 1
        return next(self._words)

    def below(self, n: int) -> int:
        """A uniform integer in ``[0, n)``: words at or above the largest multiple of ``n``
        that fits in 2^32 are rejected and the next word is read."""
        if not 1 <= n <= _WORD:
            raise FairnessError(f"cannot draw below {n}")
        limit = _WORD - (_WORD % n)
        while True:
            w = self.word()
            if w < limit:
                return w % n


@dataclass(frozen=True)
class FairDeal:
    """A deal computed from the seeds: the deck order, the hands, the lead card."""

    deck: tuple[int, ...]  # the 108 card ids after the shuffle
    lead_index: int  # 0..53 into the deck (the 54 dealt cards)
    words_used: int  # stream words read (rejected ones included)

    @property
    def hands(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Seat 0 gets deck[0:27], seat 1 deck[27:54], each sorted as HandDealt records them."""
        return (tuple(sort_cards(self.deck[:HAND_SIZE])), tuple(sort_cards(self.deck[HAND_SIZE:DEALT])))

    @property
    def set_aside(self) -> tuple[int, ...]:
        return self.deck[DEALT:]

    @property
    def lead_card(self) -> int:
        return self.deck[self.lead_index]

    @property
    def first(self) -> int:
        """The seat holding the lead card leads the first trick (R-1.4)."""
        return 0 if self.lead_index < HAND_SIZE else 1


def fair_deal(server_seed: bytes, client_seeds: Sequence[str], match_id: str) -> FairDeal:
    """The deal of ``match_id``: Fisher–Yates (i = 107 down to 1, j = below(i + 1), swap)
    over ``[0, 1, …, 107]``, then ``lead_index = below(54)`` from the same stream."""
    stream = DealStream(server_seed, client_seeds, match_id)
    deck = list(range(NUM_CARDS))
    for i in range(NUM_CARDS - 1, 0, -1):
        j = stream.below(i + 1)
        deck[i], deck[j] = deck[j], deck[i]
    lead = stream.below(DEALT)
    return FairDeal(deck=tuple(deck), lead_index=lead, words_used=stream.words_used)


@dataclass(frozen=True)
class DealCheck:
    """What :func:`check_deal` found: ``problems`` empty means the deal is the fair one."""

    problems: tuple[str, ...]
    expected: FairDeal | None

    @property
    def ok(self) -> bool:
        return not self.problems


def check_deal(server_seed_hex: str, commitment_hex: str, client_seeds: Sequence[str], match_id: str,
               hands: Sequence[Iterable[int]], set_aside: Iterable[int] | None,
               lead_card: int | None, first: int | None) -> DealCheck:
    """Recompute the commitment and the deal and compare them with what was recorded."""
    problems: list[str] = []
    try:
        seed = seed_from_hex(server_seed_hex)
    except FairnessError as exc:
        return DealCheck((f"revealed server seed: {exc}",), None)
    mine = commitment(seed, match_id)
    if not hmac.compare_digest(mine, str(commitment_hex).lower()):
        problems.append(f"commitment mismatch: SHA-256(seed ‖ match id) is {mine}, "
                        f"the match committed to {commitment_hex}")
    try:
        deal = fair_deal(seed, tuple(client_seeds), match_id)
    except FairnessError as exc:
        return DealCheck(tuple(problems) + (str(exc),), None)
    for i, (want, got) in enumerate(zip(deal.hands, hands)):
        got_sorted = tuple(sorted(got))
        if tuple(sorted(want)) != got_sorted:
            extra = sorted(set(got_sorted) - set(want))
            missing = sorted(set(want) - set(got_sorted))
            problems.append(f"hand of seat {i} differs from the fair deal: recorded has {extra} "
                            f"not dealt, lacks {missing}")
    if set_aside is not None and sorted(set_aside) != sorted(deal.set_aside):
        problems.append("the set-aside cards differ from the fair deal")
    if lead_card is not None and lead_card != deal.lead_card:
        problems.append(f"lead card {lead_card} differs from the fair deal's {deal.lead_card}")
    if first is not None and first != deal.first:
        problems.append(f"first seat {first} differs from the fair deal's {deal.first}")
    return DealCheck(tuple(problems), deal)


# ---- a whole match -----------------------------------------------------------------------

@dataclass(frozen=True)
class MatchVerdict:
    """What :func:`verify_match` found for one match's events.

    ``status``: ``ok`` (commitment and deal recomputed and equal), ``mismatch``
    (something recorded differs: ``problems`` says what), ``predates`` (no
    commitment: created before fair deals), ``pending`` (not dealt or not
    finished yet: the seed is revealed at the finish).
    """

    match_id: str
    status: str
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    commitment: str | None = None
    server_seed: str | None = None
    client_seeds: tuple[str, str] | None = None
    first_cards: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # recomputed deck order, 5 a seat

    def to_json(self) -> dict[str, object]:
        return {"match_id": self.match_id, "status": self.status, "problems": list(self.problems),
                "notes": list(self.notes), "commitment": self.commitment, "server_seed": self.server_seed,
                "client_seeds": list(self.client_seeds) if self.client_seeds else None,
                "first_cards": [list(x) for x in self.first_cards] if self.first_cards else None}


def verify_match(events: Sequence[EventBase], match_id: str | None = None,
                 expected_commitment: str | None = None) -> MatchVerdict:
    """Check a match's recorded deal against its commitment and revealed seed.

    ``events``: the match's events in order (engine event models).  The client
    seeds must be those of the players' PlayerReady events, the deal the one
    :func:`fair_deal` computes from them, the revealed seed the committed one.
    ``expected_commitment``: the commitment the player saw during play (a
    record whose commitment was removed then fails instead of "predating").
    """
    from engine.match.events import HandDealt, MatchCreated, MatchFinished, PlayerReady
    from engine.match.evolve import apply
    from engine.match.state import MatchState

    evs = list(events)
    mid: str = match_id or (evs[0].match_id if evs else "")
    if not evs:
        return MatchVerdict(mid, "mismatch", (f"no events for match {mid!r}",))
    created = evs[0] if isinstance(evs[0], MatchCreated) else None
    if created is None:
        return MatchVerdict(mid, "mismatch", ("the first event is not MatchCreated",))
    commit = created.commitment
    dealt = next((e for e in evs if isinstance(e, HandDealt)), None)
    finished = next((e for e in evs if isinstance(e, MatchFinished)), None)
    if commit is None:
        traces = [name for name, present in (
            ("a client seed in PlayerReady", any(isinstance(e, PlayerReady) and e.client_seed for e in evs)),
            ("client seeds in HandDealt", dealt is not None and dealt.client_seeds is not None),
            ("a revealed server seed in MatchFinished", finished is not None and finished.server_seed))
            if present]
        if expected_commitment is not None:
            return MatchVerdict(mid, "mismatch", (f"the record holds no commitment, but the match showed "
                                                  f"{expected_commitment}",))
        if traces:
            return MatchVerdict(mid, "mismatch", ("the record holds no commitment but " + ", ".join(traces)
                                                  + ": it was altered",))
        return MatchVerdict(mid, "predates", notes=(f"match {mid} predates fair deals (no commitment was "
                                                    "recorded): its deal cannot be verified",))
    problems: list[str] = []
    if expected_commitment is not None and expected_commitment.lower() != commit.lower():
        problems.append(f"the recorded commitment {commit} is not the one the match showed "
                        f"({expected_commitment})")
    if dealt is None:
        return MatchVerdict(mid, "pending", tuple(problems), ("no cards were dealt in this match",), commit)
    if finished is None or finished.server_seed is None:
        if finished is not None:
            problems.append("the match finished without revealing its server seed")
            return MatchVerdict(mid, "mismatch", tuple(problems), (), commit)
        return MatchVerdict(mid, "pending", tuple(problems),
                            ("the match is not finished: its server seed is revealed at the finish",), commit)
    seed_hex = finished.server_seed
    if created.server_seed is not None and created.server_seed.lower() != seed_hex.lower():
        problems.append("the revealed server seed is not the one stored at the creation")
    # the client seeds the players sent: their PlayerReady events, folded up to the deal
    state = MatchState(match_id=mid)
    for e in evs:
        if e is dealt:
            break
        state = apply(state, e)
    seated = [s for s in state.seats if s is not None]
    if len(seated) != 2:
        return MatchVerdict(mid, "mismatch", tuple(problems) + ("the deal happened without two seated players",),
                            (), commit, seed_hex)
    ready_seeds = tuple(default_client_seed(s.player) if s.client_seed is None else s.client_seed
                        for s in (state.seat(0), state.seat(1)))
    recorded = dealt.client_seeds
    if recorded is None:
        problems.append("the hands were not computed from the seeds (a fixed deal)")
        return MatchVerdict(mid, "mismatch", tuple(problems), (), commit, seed_hex, None)
    if tuple(recorded) != ready_seeds:
        problems.append(f"HandDealt names client seeds {list(recorded)}, the players sent {list(ready_seeds)}")
    check = check_deal(seed_hex, commit, ready_seeds, mid, dealt.hands, dealt.set_aside,
                       dealt.lead_card, dealt.first)
    problems.extend(check.problems)
    first = None
    if check.expected is not None:
        first = (check.expected.deck[:5], check.expected.deck[HAND_SIZE:HAND_SIZE + 5])
    return MatchVerdict(mid, "mismatch" if problems else "ok", tuple(problems), (), commit, seed_hex,
                        (ready_seeds[0], ready_seeds[1]), first)
