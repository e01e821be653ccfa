"""What one settled match says about each of its players (pure: events in, a record out).

:func:`match_record` folds a finished match's events with the engine's own ``apply`` and
notes, for every *person* seated (bot seats, :func:`is_bot`, are never scored), only what
the player chose themselves (``by: "player"``; the engine's automatic passes, timeouts and
trustee plays are never held against anyone):

* ``esc`` -- the player escaped (R-12);
* ``treq`` -- the player asked for trusteeship (reason ``requested``, R-13.3);
* ``wpass`` -- passes while holding a play that beats and empties the hand (a win given away);
* ``vpass`` / ``fopp`` -- passes while a non-bomb play beats, and the turns where one did;
* ``broke`` -- plays that split a bomb (4+ natural cards of a rank) into a smaller combination;
* ``held`` -- the player lost still holding a bomb;
* ``left`` -- the player's cards left when they lost (the kou, R-7).

``ev`` lists (event seq, what) for each concession (``escape``, ``trustee_requested``,
``passed_a_win``, ``broke_a_bomb``; ``passed_a_play`` for the first :data:`PASSES_LISTED`
passes that let a play go): a replay position an operator can open
(``shuangkou replay MATCH``).  ``dec`` lists the seqs of the player's own decisions, from
which :mod:`engine.tools.quality` samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.match.events import (CardsPlayed, EventBase, MatchCreated, MatchFinished, Passed, PlayerEscaped,
                                 TrusteeshipStarted)
from engine.match.evolve import apply
from engine.match.state import MatchState
from engine.rules.classify import classify_counts, counts_for
from engine.rules.combo import beats
from engine.rules.moves import smallest_beating
from engine.store import keys
from projections.settlement import Settlement, settle

__all__ = ["BOT_ID", "is_bot", "match_record", "pair_key", "split_pair"]

BOT_ID = keys.BOT_ID  #: the bot seats of ``gateway --bots``: never scored
_SEP = "|"
#: the passes that let a play go listed as evidence per player and match (the count is kept whole)
PASSES_LISTED = 5


def is_bot(player: str) -> bool:
    """Whether ``player`` is a bot seat of ``gateway --bots`` (``bot-<n>``).

    >>> is_bot("bot-17"), is_bot("alice"), is_bot("bot-x")
    (True, False, False)
    """
    return keys.is_bot_id(player)


def pair_key(a: str, b: str) -> str:
    """The key of the unordered pair ``{a, b}``: the ids sorted, joined by ``|``.

    >>> pair_key("zed", "amy")
    'amy|zed'
    """
    x, y = sorted((a, b))
    return f"{x}{_SEP}{y}"


def split_pair(key: str) -> tuple[str, str]:
    """:func:`pair_key` back into the two ids.

    >>> split_pair("amy|zed")
    ('amy', 'zed')
    """
    a, _, b = key.partition(_SEP)
    return a, b


def _has_bomb(h: Sequence[int]) -> bool:
    return any(n >= 4 for n in h[:13]) or h[13] + h[14] >= 3


def _blank() -> dict[str, Any]:
    return {"esc": 0, "treq": 0, "wpass": 0, "vpass": 0, "fopp": 0, "broke": 0, "held": 0, "left": 0,
            "lost": 0, "won": 0, "net": 0}


def match_record(events: Sequence[EventBase], settlement: Settlement | None = None) -> dict[str, Any] | None:
    """The integrity record of a finished match, or None (not finished, not two people:
    a match against a bot is never scored).  ``settlement``: the match's (computed from the
    events when not given).

    Keys: ``m`` match id, ``ts`` the finish (ms), ``mode``, ``X`` the base, ``players``
    (seat order), ``winner``, ``kou``, ``f`` {player: the counts above, ``net`` the player's
    score}, ``ev`` {player: [[seq, what], …]}, ``dec`` {player: [seq, …]}.
    """
    if not events or not isinstance(events[-1], MatchFinished):
        return None
    s = settlement if settlement is not None else settle(events)
    if s is None:
        return None
    state = MatchState(match_id=events[0].match_id)
    f: dict[str, dict[str, Any]] = {}
    ev: dict[str, list[list[Any]]] = {}
    dec: dict[str, list[int]] = {}
    for e in events:
        if isinstance(e, MatchCreated):
            pass
        elif isinstance(e, (CardsPlayed, Passed)) and e.by == "player" and state.phase == "playing":
            _decision(state, e, f, ev, dec)
        elif isinstance(e, PlayerEscaped):
            f.setdefault(e.player, _blank())["esc"] += 1
            ev.setdefault(e.player, []).append([e.seq, "escape"])
        elif isinstance(e, TrusteeshipStarted) and e.reason == "requested":
            f.setdefault(e.player, _blank())["treq"] += 1
            ev.setdefault(e.player, []).append([e.seq, "trustee_requested"])
        state = apply(state, e)
    players = state.players()
    if len(players) != 2 or any(is_bot(p) for p in players):
        return None
    fin = events[-1]
    assert isinstance(fin, MatchFinished)
    for i, p in enumerate(players):
        row = f.setdefault(p, _blank())
        row["net"] = int(s.scores.get(p, 0))
        if p == fin.loser:
            row["lost"] = 1
            row["left"] = int(fin.cards_left.get(p, 0))
            seat = state.seats[i]
            if seat is not None and _has_bomb(counts_for(seat.hand)) and fin.reason == "out":
                row["held"] = 1
        else:
            row["won"] = 1
        ev.setdefault(p, [])
        dec.setdefault(p, [])
    X = s.breakdown.get("X") if isinstance(s.breakdown, dict) else None
    return {"m": s.match_id, "ts": fin.ts, "mode": s.mode, "X": int(X) if isinstance(X, int) and X > 0 else 1,
            "players": players, "winner": fin.winner, "kou": s.kou, "f": f, "ev": ev, "dec": dec}


def _decision(state: MatchState, e: CardsPlayed | Passed, f: dict[str, dict[str, Any]],
              ev: dict[str, list[list[Any]]], dec: dict[str, list[int]]) -> None:
    i = state.seat_of(e.player)
    if i is None:
        return
    row = f.setdefault(e.player, _blank())
    dec.setdefault(e.player, []).append(e.seq)
    hand = state.seat(i).hand
    h = counts_for(hand)
    prev = state.to_beat.combo if state.to_beat is not None and state.to_beat.seat != i else None
    twos, heavenly = state.chain_bomb_twos, state.heavenly
    if isinstance(e, Passed):
        if prev is None:
            return
        whole = classify_counts(h, prev, heavenly, chain_bomb_twos=twos)
        if whole is not None and beats(whole, prev, heavenly):
            row["wpass"] += 1
            ev.setdefault(e.player, []).append([e.seq, "passed_a_win"])
        weakest = smallest_beating(hand, prev, heavenly, chain_bomb_twos=twos)
        if weakest is not None and not weakest.combo.is_bomb:
            row["fopp"] += 1
            row["vpass"] += 1
            listed = ev.setdefault(e.player, [])
            if row["vpass"] <= PASSES_LISTED and not (listed and listed[-1][0] == e.seq):
                listed.append([e.seq, "passed_a_play"])
        return
    combo = e.reading.combo()
    if prev is not None:
        # a non-bomb play that beats ``prev`` is itself the proof: the weakest beating play
        # is a bomb only when no non-bomb beats (smallest_beating); search only after a bomb
        if not combo.is_bomb:
            row["fopp"] += 1
        else:
            weakest = smallest_beating(hand, prev, heavenly, chain_bomb_twos=twos)
            if weakest is not None and not weakest.combo.is_bomb:
                row["fopp"] += 1
    if combo.is_bomb:
        return
    played = counts_for(e.cards)
    if any(h[r] >= 4 and played[r] and h[r] - played[r] < 4 for r in range(13)):
        row["broke"] += 1
        ev.setdefault(e.player, []).append([e.seq, "broke_a_bomb"])
