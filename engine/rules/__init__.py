"""The pure rules of 火拼雙扣 (stdlib only): cards, readings, comparison, legal moves.

The names most callers need, in one place::

    >>> from engine.rules import beats, classify, format_cards, parse_cards
    >>> a, b = classify(parse_cards("4 4 4 4")), classify(parse_cards("2 2 2"))
    >>> beats(a, b)              # beats takes readings (what classify returns), R-5.2
    True
    >>> format_cards(parse_cards("3 3 BJ"), suits=False)
    '3 3 BJ'
"""

from engine.rules.cards import format_cards, parse_cards
from engine.rules.classify import classify, interpretations
from engine.rules.combo import Combo, beats
from engine.rules.moves import can_beat, legal_plays, smallest_beating

__all__ = [
    "Combo",
    "beats",
    "can_beat",
    "classify",
    "format_cards",
    "interpretations",
    "legal_plays",
    "parse_cards",
    "smallest_beating",
]
