"""The pure rules of 火拼雙扣: cards and notation (R-1, R-2), readings and their
comparison (R-3 to R-5), legal moves (R-6, R-13.3). Standard library only.

>>> from engine.rules import parse_cards, classify, beats
>>> classify(parse_cards("4 4 4 4 BJ")).describe()
'5-xiang bomb of 4'
>>> beats(classify(parse_cards("4 4 4 4")), classify(parse_cards("A A")))
True
"""

from engine.rules.arrange import BadCards, Group, arrange
from engine.rules.cards import CardNotationError, format_cards, parse_cards
from engine.rules.classify import beats, classify, interpretations
from engine.rules.combo import Combo
from engine.rules.moves import can_beat, legal_plays, smallest_beating

__all__ = [
    "BadCards", "CardNotationError", "Combo", "Group", "arrange", "beats", "can_beat", "classify", "format_cards", "interpretations",
    "legal_plays", "parse_cards", "smallest_beating",
]
