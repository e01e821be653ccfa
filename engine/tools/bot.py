"""Bots that choose plays: gateway bots, the terminal opponent, simulations and the bench.

A bot decides from a :class:`engine.tools.view.PlayerView` only -- the player's own hand,
the cards played, the play in front, the opponent's card count, the bombs each side
played and the room config -- never from the match state (issue 27): it cannot peek at
the opponent's hand or the set-aside cards.  :meth:`Bot.choose` returns a
:class:`engine.rules.moves.Play` (cards + reading) or None (pass).

Levels, for players (docs/BOTS.md has their measured strength and cost):

* ``easy`` -- a beginner: leads its lowest group three times in ten (else any small natural
  play, high cards included), follows half the time with the weakest natural play that
  beats and else with its strongest, lets one play in ten go, rarely bombs.  Always legal.
* ``normal`` -- plans its hand (:mod:`engine.tools.plan`): sheds long low groups first,
  follows without breaking its groups, keeps its bombs for when they decide the match;
  in a quarter of its decisions it slips and plays ``greedy``'s move instead.

The weaker levels' mistakes are deliberate (:data:`EASY_LEAD_LOWEST`, :data:`EASY_OVERBEAT`,
:data:`NORMAL_SLIP`): each level wins about three matches in four against the one below it
(``easy`` < ``greedy`` < ``normal`` < ``hard``), so a ladder orders them.
* ``hard`` -- searches (:mod:`engine.tools.search`): determinized Monte Carlo over
  opponent hands sampled from the unseen cards, every candidate played out with the
  ``normal`` policy and scored with the room's settlement, within a node budget
  (reproducible) and a time cap.

Policies kept for tests and simulations:

* ``trustee`` -- exactly what trusteeship plays (R-13.3,
  :func:`engine.rules.moves.trustee_choice`): the lowest single when leading, the
  weakest play that beats otherwise.  Deterministic.
* ``random`` -- a uniformly random legal play (any reading), passing with
  some probability when following.  Bomb-happy: a stress test.
* ``greedy`` (default for simulations) -- leads a random non-bomb combination,
  preferring long ones (sheds cards like a person); follows with the weakest
  non-bomb that beats, uses a bomb only with probability ``bomb_p`` (more often
  when the opponent is low on cards).

The bot never reads a clock except ``hard``'s time cap; randomness comes from the
``rng`` it is given, so a seeded bot's choices are reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from engine.rules.classify import classify_counts
from engine.rules.combo import BOMB_KINDS, Combo, HeavenlyPosition, beats, strength_key
from engine.rules.moves import Play, legal_plays, pick_cards, smallest_beating, trustee_choice
from engine.match.state import MatchState
from engine.tools.levels import DEFAULT_LEVEL, LEVELS, POLICIES
from engine.tools.plan import counts, follow_plan, plan
from engine.tools.search import Budget, Scoring, search
from engine.tools.view import PlayerView, view_of



#: The weaker levels' deliberate mistakes, each drawn from the bot's own seeded ``rng`` (so a
#: seeded bot still repeats itself); they keep the levels apart (docs/BOTS.md, "Measured
#: strength").  ``easy`` leads its lowest group in this share of its leads (else any small
#: natural play) ...
EASY_LEAD_LOWEST = 0.3
#: ... lets a play it could beat without a bomb go in this share of its follows (a pass is
#: what the chip-dumping signals look at, docs/INTEGRITY.md: kept as rare as a person's) ...
EASY_LET_GO = 0.1
#: ... and of the rest beats with its strongest natural play, not its weakest, in this share
EASY_OVERBEAT = 0.5
#: ``normal`` plays ``greedy``'s move instead of its plan's in this share of its decisions
#: (``hard`` plays out with the plan policy itself, :mod:`engine.tools.search`: no slips).
NORMAL_SLIP = 0.25


class UnknownPolicy(ValueError):
    """A bot policy or level that does not exist (names the choices)."""


class Bot:
    """A bot of one policy (see the module docstring).  ``budget``: ``hard``'s search budget."""

    def __init__(self, policy: str = "greedy", rng: random.Random | None = None, bomb_p: float = 0.35,
                 pass_p: float = 0.1, budget: Budget | None = None):
        if policy not in POLICIES:
            raise UnknownPolicy(f"unknown bot policy {policy!r} (one of {', '.join(POLICIES)})")
        self.policy = policy
        self.rng = rng or random.Random()
        self.bomb_p = bomb_p
        self.pass_p = pass_p
        self.budget = budget or Budget()
        self._scoring: tuple[object, Scoring] | None = None

    def choose(self, view: PlayerView) -> Play | None:
        """The play for the player whose view this is (None: pass)."""
        hand = view.hand
        prev = view.to_beat
        heavenly = view.heavenly
        twos = view.chain_bomb_twos  # the room's setting
        if not hand:
            return None
        if self.policy == "trustee":
            return trustee_choice(hand, prev, heavenly, chain_bomb_twos=twos)
        if self.policy == "random":
            return self._random(hand, prev, heavenly, twos)
        if self.policy == "greedy":
            return self._greedy(hand, prev, heavenly, view.opponent_cards, twos)
        if self.policy == "easy":
            return self._easy(view)
        if self.policy == "normal":
            if self.rng.random() < NORMAL_SLIP:  # a deliberate slip: what a hasty player plays
                return self._greedy(hand, prev, heavenly, view.opponent_cards, twos)
            return _as_play(hand, self._planned(view), prev, heavenly, twos)
        return _as_play(hand, self._searched(view), prev, heavenly, twos)

    # -- levels ------------------------------------------------------------------------
    def _easy(self, view: PlayerView) -> Play | None:
        hand, prev, heavenly, twos = view.hand, view.to_beat, view.heavenly, view.chain_bomb_twos
        if prev is None:
            groups = [g for g in plan(counts(hand), twos) if not g.is_bomb]
            if groups and self.rng.random() < EASY_LEAD_LOWEST:
                return _as_play(hand, min(groups, key=lambda g: g.top), None, heavenly, twos)
            small = [c for c in legal_plays(hand, None, heavenly, chain_bomb_twos=twos)
                     if not c.is_bomb and not c.jokers_as and c.size <= 3]
            if small:
                return _as_play(hand, self.rng.choice(small), None, heavenly, twos)
            return trustee_choice(hand, None, heavenly, chain_bomb_twos=twos)
        best = smallest_beating(hand, prev, heavenly, chain_bomb_twos=twos)
        if best is None:
            return None
        if best.combo.is_bomb:
            p = 0.15 if view.opponent_cards > 3 else 0.5
            return best if self.rng.random() < p else None
        if self.rng.random() < EASY_LET_GO:
            return None
        if self.rng.random() < EASY_OVERBEAT:  # beats with its strongest natural play instead
            plays = [c for c in legal_plays(hand, prev, heavenly, chain_bomb_twos=twos)
                     if not c.is_bomb and not c.jokers_as]
            if plays:
                return _as_play(hand, max(plays, key=lambda c: strength_key(c, heavenly)), prev, heavenly, twos)
        return best

    def _planned(self, view: PlayerView) -> Combo | None:
        h = counts(view.hand)
        return follow_plan(h, plan(h, view.chain_bomb_twos), view.to_beat, view.opponent_cards,
                           view.heavenly, view.chain_bomb_twos)

    def _searched(self, view: PlayerView) -> Combo | None:
        h = counts(view.hand)
        cands = candidates(view, h)
        if len(cands) == 1:
            return cands[0]
        scoring = self._scoring_of(view)
        from projections.scoring import effective_xiang

        cfg = view.config
        if cfg is not None:
            start = (effective_xiang(list(view.my_bombs), cfg).xiang,
                     effective_xiang(list(view.opponent_bombs), cfg).xiang)
        else:
            start = (max((b.xiang or 0 for b in view.my_bombs), default=0),
                     max((b.xiang or 0 for b in view.opponent_bombs), default=0))
        # one sub-generator a decision: a decision draws the same samples whatever the budget
        rng = random.Random(self.rng.getrandbits(64))
        return cands[search(view, h, cands, rng, self.budget, start, scoring)]

    def _scoring_of(self, view: PlayerView) -> Scoring:
        if self._scoring is None or self._scoring[0] is not view.config:
            self._scoring = (view.config, Scoring.of(view.config))
        return self._scoring[1]

    # -- policies ----------------------------------------------------------------------
    def _random(self, hand: Sequence[int], prev: Combo | None, heavenly: HeavenlyPosition,
                twos: bool = True) -> Play | None:
        plays = legal_plays(hand, prev, heavenly, chain_bomb_twos=twos)
        if not plays:
            return None
        if prev is not None and self.rng.random() < self.pass_p:
            return None
        c = self.rng.choice(plays)
        return Play(c, pick_cards(hand, c.counts))

    def _greedy(self, hand: Sequence[int], prev: Combo | None, heavenly: HeavenlyPosition, opp_left: int,
                twos: bool = True) -> Play | None:
        if prev is None:
            plays = legal_plays(hand, None, heavenly, chain_bomb_twos=twos)
            whole = [c for c in plays if c.size == len(hand)]
            if whole:  # going out in one play
                c = whole[0]
                return Play(c, pick_cards(hand, c.counts))
            normal = [c for c in plays if c.kind not in BOMB_KINDS and c.jokers == 0]
            if not normal:
                normal = [c for c in plays if c.kind not in BOMB_KINDS] or list(plays)
            # prefer shedding more cards: weight by size, low ranks first
            weights = [c.size * c.size / (1 + c.top) for c in normal]
            c = self.rng.choices(normal, weights=weights, k=1)[0]
            return Play(c, pick_cards(hand, c.counts))
        best = smallest_beating(hand, prev, heavenly, chain_bomb_twos=twos)
        if best is None:
            return None
        if best.combo.kind in BOMB_KINDS and prev.kind not in BOMB_KINDS:
            p = self.bomb_p if opp_left > 6 else min(1.0, self.bomb_p * 2.5)
            if self.rng.random() >= p:
                return None
        elif best.combo.kind in BOMB_KINDS:
            # answering a bomb with a bomb: sometimes let it go
            if self.rng.random() >= self.bomb_p * 1.5:
                return None
        return best


def candidates(view: PlayerView, h: tuple[int, ...]) -> list[Combo | None]:
    """The plays ``hard`` weighs (None = pass), the ``normal`` choice first: the plan's
    groups, a few natural plays outside the plan and the weakest bombs.  A play that
    empties the hand, when there is one, is the only candidate."""
    prev, heavenly, twos = view.to_beat, view.heavenly, view.chain_bomb_twos
    groups = plan(h, twos)
    first = follow_plan(h, groups, prev, view.opponent_cards, heavenly, twos)
    legal = legal_plays(view.hand, prev, heavenly, chain_bomb_twos=twos)
    out = [c for c in legal if c.size == len(view.hand)]
    if out:
        return [max(out, key=lambda c: strength_key(c, heavenly))]
    picked: list[Combo | None] = [first]
    natural = sorted((c for c in legal if not c.is_bomb and not c.jokers_as),
                     key=lambda c: (c.top, -c.size))
    bombs = sorted((c for c in legal if c.is_bomb), key=lambda c: strength_key(c, heavenly))
    if prev is None:
        picked += [g for g in groups if not g.is_bomb]
        longest = max(natural, key=lambda c: (c.size, -c.top), default=None)
        picked += [longest]
        picked += [c for c in natural if c.kind == "single"][:1]
        picked += [c for c in natural if c.kind == "pair"][:1]
        picked += [g for g in groups if g.is_bomb][:1]
    else:
        picked += [None]
        picked += [g for g in groups if beats(g, prev, heavenly)]
        picked += natural[:4]
        picked += bombs[:2]
    seen: set[tuple[object, ...]] = set()
    out2: list[Combo | None] = []
    for c in picked:
        key = (None,) if c is None else (c.counts, c.kind)
        if key not in seen:
            seen.add(key)
            out2.append(c)
    if prev is None:
        out2 = [c for c in out2 if c is not None]
    return out2[:8]


def _as_play(hand: Sequence[int], combo: Combo | None, prev: Combo | None, heavenly: HeavenlyPosition,
             twos: bool) -> Play | None:
    """The physical cards of ``combo`` -- checked against the engine's own reading (R-4.6):
    a play the engine would read otherwise, or refuse, falls back to trusteeship's choice."""
    if combo is None:
        return None
    cards = pick_cards(hand, combo.counts)
    reading = classify_counts(combo.counts, prev, heavenly, chain_bomb_twos=twos)
    if reading is None or (prev is not None and not beats(reading, prev, heavenly)):
        return trustee_choice(hand, prev, heavenly, chain_bomb_twos=twos)
    return Play(reading, cards)


def choose_for(bot: Bot, state: MatchState, player: str) -> Play | None:
    """The bot's play for ``player`` in ``state``: the player's view is taken first, so the
    bot sees nothing more than that player would (a player who is not seated passes)."""
    view = view_of(state, player)
    return None if view is None else bot.choose(view)


def hint(state: MatchState, player: str) -> Play | None:
    """The smallest legal play (what trusteeship would play), or None (pass)."""
    return choose_for(Bot("trustee"), state, player)


__all__ = ["Bot", "DEFAULT_LEVEL", "LEVELS", "POLICIES", "UnknownPolicy", "candidates", "choose_for", "hint"]
