"""Cards, ranks and the card notation (R-1, R-2).

A physical card is a small int ``0..107`` (R-1.1: two decks of 54).  Within one
deck, ids ``0..51`` are the suited cards (``rank * 4 + suit``), ``52`` is the
small joker and ``53`` the big joker; the second deck adds 54.

Rank indices follow the single-card order of R-2.1, low to high::

    0:3 1:4 2:5 3:6 4:7 5:8 6:9 7:10 8:J 9:Q 10:K 11:A 12:2 13:SJ 14:BJ

>>> format_cards(parse_cards("3 3 10 SJ"))
'3S 3H 10S SJ'
>>> [rank_of(c) for c in parse_cards("3 A 2 BJ")]
[0, 11, 12, 14]
>>> format_ranks(parse_cards("BJ 3 T"))
'3 10 BJ'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Card = int

RANK_LABELS: tuple[str, ...] = (
    "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A", "2", "SJ", "BJ",
)
SUITS = "SHCD"
NUM_RANKS = 15
NATURAL_RANKS = 13  # 3..2
SJ = 13
BJ = 14
ACE = 11
TWO = 12
SEQUENCE_TOP = ACE  # only 3..A appear in straights, pair runs, triple runs


def chain_top(chain_bomb_twos: bool = True) -> int:
    """The highest rank a chain bomb may reach (R-2.2, R-3.10): 2 when the
    room's ``chain_bomb_twos`` is on, else A.  No wrap-around either way.

    >>> RANK_LABELS[chain_top()], RANK_LABELS[chain_top(False)]
    ('2', 'A')
    """
    return TWO if chain_bomb_twos else ACE


DECK_SIZE = 54
NUM_CARDS = 108
HAND_SIZE = 27

_RANK_BY_LABEL = {label: i for i, label in enumerate(RANK_LABELS)}
_RANK_BY_LABEL["T"] = 7


class CardNotationError(ValueError):
    """A token of card notation could not be read (names the bad token)."""


def rank_of(card: Card) -> int:
    """Rank index 0..14 of a physical card id.

    >>> rank_of(0), rank_of(52), rank_of(53 + 54)
    (0, 13, 14)
    """
    x = card % DECK_SIZE
    if x >= 52:
        return SJ + (x - 52)
    return x // 4


def suit_of(card: Card) -> str | None:
    """Suit letter of a card, None for jokers (suits never matter, R-1.6)."""
    x = card % DECK_SIZE
    return None if x >= 52 else SUITS[x % 4]


def deck_of(card: Card) -> int:
    """Which of the two decks (0 or 1) a physical card comes from."""
    return card // DECK_SIZE


def is_joker(card: Card) -> bool:
    return card % DECK_SIZE >= 52


def card_id(rank: int, suit: str | None = None, deck: int = 0) -> Card:
    """Physical id from rank index, suit letter (None for jokers) and deck copy."""
    if rank >= SJ:
        return deck * DECK_SIZE + 52 + (rank - SJ)
    if suit is None:
        raise CardNotationError("a suited card needs a suit")
    return deck * DECK_SIZE + rank * 4 + SUITS.index(suit)


def card_label(card: Card, suits: bool = True) -> str:
    """One card in notation: ``10S``, ``A``, ``SJ``."""
    if not 0 <= card < NUM_CARDS:
        raise CardNotationError(f"no card has id {card!r}")
    r = rank_of(card)
    s = suit_of(card)
    return RANK_LABELS[r] + (s if (suits and s) else "")


def _physical_candidates(rank: int, suit: str | None) -> list[Card]:
    if rank >= SJ:
        return [card_id(rank, None, d) for d in (0, 1)]
    suits = [suit] if suit else list(SUITS)
    return [card_id(rank, s, d) for d in (0, 1) for s in suits]


def parse_token(token: str) -> tuple[int, str | None]:
    """Read one token into (rank index, suit or None).

    >>> parse_token("10h"), parse_token("T"), parse_token("bj")
    ((7, 'H'), (7, None), (14, None))
    """
    t = token.strip().upper()
    if not t:
        raise CardNotationError("empty card token")
    if t in ("SJ", "BJ"):
        return _RANK_BY_LABEL[t], None
    rank_part, suit = t, None
    if t[-1] in SUITS and len(t) > 1 and t not in ("SJ", "BJ"):
        rank_part, suit = t[:-1], t[-1]
    r = _RANK_BY_LABEL.get(rank_part)
    if r is None or r >= SJ:
        raise CardNotationError(
            f"bad card token {token!r}: ranks are 3 4 5 6 7 8 9 10 J Q K A 2 "
            "(T for 10), optional suit S H C D, jokers SJ BJ"
        )
    return r, suit


def parse_tokens(text: str | Iterable[str]) -> list[tuple[int, str | None]]:
    """Read notation into (rank index, suit or None) pairs without picking ids."""
    tokens = text.replace(",", " ").split() if isinstance(text, str) else list(text)
    return [parse_token(t) for t in tokens]


def resolve_in_hand(text: str | Iterable[str], hand: Iterable[Card]) -> list[Card] | None:
    """Match notation against a hand: the lowest ids of each rank (and suit,
    when given) that the hand holds; None when the hand lacks them.

    >>> hand = parse_cards("3D 3H 5 SJ")
    >>> format_cards(resolve_in_hand("3 SJ", hand))
    '3H SJ'
    >>> resolve_in_hand("5 5", hand) is None
    True
    """
    free = sorted(hand)
    parsed = parse_tokens(text)
    out: list[Card | None] = [None] * len(parsed)
    for pass_suited in (True, False):
        for i, (r, s) in enumerate(parsed):
            if (s is not None) != pass_suited:
                continue
            for c in free:
                if rank_of(c) == r and (s is None or suit_of(c) == s):
                    free.remove(c)
                    out[i] = c
                    break
            else:
                return None
    return [c for c in out if c is not None]


def missing_in_hand(text: str | Iterable[str], hand: Iterable[Card]) -> list[str]:
    """The named cards the hand cannot supply, in notation (empty when it holds them all).

    Matched the way :func:`resolve_in_hand` takes cards: suited names first.

    >>> hand = parse_cards("2 2 3H 5")
    >>> missing_in_hand("2 2 2 2 3", hand), missing_in_hand("3S 5", hand), missing_in_hand("2 5", hand)
    (['2', '2'], ['3S'], [])
    """
    free = sorted(hand)
    parsed = parse_tokens(text)
    missing: list[tuple[int, str]] = []
    for pass_suited in (True, False):
        for i, (r, s) in enumerate(parsed):
            if (s is not None) != pass_suited:
                continue
            for c in free:
                if rank_of(c) == r and (s is None or suit_of(c) == s):
                    free.remove(c)
                    break
            else:
                missing.append((i, RANK_LABELS[r] + (s or "")))
    return [label for _, label in sorted(missing)]


def parse_cards(text: str | Iterable[str]) -> list[Card]:
    """Parse card notation into physical card ids.

    Cards are separated by spaces (commas too).  A card without a suit takes
    the lowest id of that rank not already taken in the same text, so parsing
    is deterministic; more copies than two decks hold is an error.

    >>> parse_cards("3 3 3S")
    [1, 2, 0]
    >>> parse_cards("SJ SJ SJ")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    engine.rules.cards.CardNotationError: too many SJ: two decks hold only 2
    """
    parsed = parse_tokens(text)
    used: set[Card] = set()
    out: list[Card] = []
    # suited tokens first claim their exact cards, then unsuited take what is left
    slots: list[Card | None] = [None] * len(parsed)
    for pass_suited in (True, False):
        for i, (r, s) in enumerate(parsed):
            if (s is not None or r >= SJ) != pass_suited:
                continue
            for c in _physical_candidates(r, s):
                if c not in used:
                    used.add(c)
                    slots[i] = c
                    break
            else:
                label = RANK_LABELS[r] + (s or "")
                limit = 2 if (s or r >= SJ) else 8
                raise CardNotationError(f"too many {label}: two decks hold only {limit}")
    for slot in slots:
        assert slot is not None
        out.append(slot)
    return out


#: each card id's place in rank order (then by id): :func:`sort_cards`'s key, looked up
_SORT_KEY: dict[Card, int] = {c: rank_of(c) * NUM_CARDS + c for c in range(NUM_CARDS)}


def sort_cards(cards: Iterable[Card]) -> list[Card]:
    """Cards in rank order (then by id): the order hands are shown in.

    >>> sort_cards([53, 0, 106, 48, 1])
    [0, 1, 48, 106, 53]
    """
    if not isinstance(cards, (list, tuple)):
        cards = list(cards)  # read once: the fallback may sort it again
    try:
        return sorted(cards, key=_SORT_KEY.__getitem__)
    except KeyError:  # not a card id: ordered all the same
        return sorted(cards, key=lambda c: (rank_of(c), c))


def format_cards(cards: Iterable[Card], suits: bool = True) -> str:
    """Cards in notation, in the order given.  ``parse_cards`` reads it back.

    >>> format_cards([0, 54, 52])
    '3S 3S SJ'
    """
    return " ".join(card_label(c, suits) for c in cards)


def format_ranks(cards: Iterable[Card]) -> str:
    """Ranks only, sorted low to high: how a person reads a play."""
    return format_cards(sort_cards(cards), suits=False)


def format_ranks_lenient(cards: Iterable[object]) -> str:
    """:func:`format_ranks` for cards read from an untrusted stream (audits,
    play-by-play): anything that is no card id 0..107 shows as ``#value``
    after the real cards instead of raising.

    >>> format_ranks_lenient([53, 500, 0, -1])
    '3 BJ #500 #-1'
    """
    def is_card(c: object) -> bool:
        return isinstance(c, int) and not isinstance(c, bool) and 0 <= c < NUM_CARDS

    cards = list(cards)
    good = format_ranks(c for c in cards if is_card(c))  # type: ignore[misc]
    return " ".join([good] * bool(good) + [f"#{c}" for c in cards if not is_card(c)])


def counts_of(cards: Iterable[Card]) -> tuple[int, ...]:
    """Rank-count vector (15 entries: 3..2, SJ, BJ).

    >>> counts_of(parse_cards("3 3 BJ"))[:2], counts_of(parse_cards("BJ"))[14]
    ((2, 0), 1)
    """
    v = [0] * NUM_RANKS
    for c in cards:
        v[rank_of(c)] += 1
    return tuple(v)


def full_deck() -> list[Card]:
    return list(range(NUM_CARDS))


def deal_from_deck(deck: Sequence[Card]) -> tuple[list[Card], list[Card], list[Card]]:
    """Split a shuffled deck into two hands of 27 and the 54 set aside (R-1.3)."""
    if sorted(deck) != list(range(NUM_CARDS)):
        raise ValueError("a deck must hold each of the 108 cards exactly once")
    return (sort_cards(deck[:HAND_SIZE]), sort_cards(deck[HAND_SIZE:2 * HAND_SIZE]),
            list(deck[2 * HAND_SIZE:]))
