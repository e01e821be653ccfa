"""What one player (or a spectator) may see of a match.

:func:`view_for` builds a player's view of a :class:`MatchState`: their own
hand (ids and notation), the opponent's card *count* only, the table and the
play to beat, whose turn it is and the deadline, timeouts and trusteeship,
each player's standing contribution (R-8.5 "instant"), the phase and the
result when finished, and the fair-deal commitment (the server seed only after the
finish, docs/FAIRNESS.md), and the match's plays so far (``history``).  The opponent's
cards and the set-aside cards never appear (R-1.3); a spectator (``player=None``) sees no
hand at all.  :func:`brief` is the short form every update carries: the same for every
recipient except the receiver's own ``hand``.

:func:`redact_event` is the same rule for a single event (what the gateway
may forward to a player): HandDealt keeps only the receiver's own hand.
"""

from __future__ import annotations

from typing import Any

from engine.rules.cards import RANK_LABELS, format_cards, format_ranks, sort_cards
from engine.match.events import EventBase, HandDealt, PlayerSeated, public_event_dict
from engine.match.state import MatchState, PlayRecord


def play_reading(kind: str, top: int, xiang: int | None) -> dict[str, Any]:
    """The short reading of a play in the history and the trick (docs/PROTOCOL.md §8): its kind,
    its top rank's label and its xiang (null unless a bomb).

    >>> play_reading("bomb", 7, 5)
    {'kind': 'bomb', 'rank': '10', 'xiang': 5}
    """
    return {"kind": kind, "rank": RANK_LABELS[top], "xiang": xiang}


def _player_at(state: MatchState, seat: int) -> str:
    s = state.seats[seat]
    return s.player if s is not None else ""


def _play(state: MatchState, p: PlayRecord) -> dict[str, Any]:
    return {"player": _player_at(state, p.seat), "cards": list(p.cards),
            "reading": play_reading(p.kind, p.top, p.xiang)}


def history(state: MatchState) -> list[dict[str, Any]]:
    """Every play of the match so far, in order: ``{trick, player, cards, reading}`` (``trick``:
    the brief's ``trick`` while it ran; a trick ends with a pass of the player who did not make
    its last play, R-6.2).  Public: the cards were played face up.

    >>> history(MatchState(match_id="m"))
    []
    """
    return [{"trick": p.trick, **_play(state, p)} for p in state.history]


def trick_plays(state: MatchState) -> list[dict[str, Any]]:
    """The plays of the current trick, in order: ``{player, cards, reading}`` (empty when the
    player on turn leads)."""
    n = state.trick_plays
    return [_play(state, p) for p in state.history[len(state.history) - n:]] if n else []


def own_hand(state: MatchState, player: str | None) -> list[int] | None:
    """``player``'s own hand, card ids in rank order (``sort_cards``); None for anyone not seated."""
    me = state.seat_of(player) if player is not None else None
    return None if me is None else sort_cards(state.seat(me).hand)


def _standing(state: MatchState) -> dict[str, dict[str, Any]]:
    """R-8.5: each player's effective xiang, multiplier c and net X·(c_me − c_opp) so far."""
    from projections.scoring import contribution_of, effective_xiang

    cfg = state.config
    seats = [s for s in state.seats if s is not None]
    if cfg is None or not seats:
        return {}
    base = min(s.base for s in seats)  # the lower level's base
    info: dict[str, dict[str, Any]] = {}
    for s in seats:
        x = effective_xiang(list(s.bombs), cfg)
        info[s.player] = {"xiang": x.xiang, "source": x.source, "c": contribution_of(x.xiang, cfg)}
    for s in seats:
        others = [info[o.player]["c"] for o in seats if o.player != s.player]
        info[s.player]["net"] = base * (info[s.player]["c"] - (others[0] if others else 0))
    return info


def view_common(state: MatchState, with_history: bool = True) -> dict[str, Any]:
    """The part of every player's view that does not depend on the player (the seats, the
    table, the play to beat, the deadline, the standing, the result, the fair-deal part):
    built once per command and shared by the views of its recipients (:func:`view_for`'s
    ``common``).  Holds no hand.  ``with_history=False``: its ``history`` empty (for a
    caller that writes the plays in a form of its own).

    >>> sorted(view_common(MatchState(match_id="m")))[:5]
    ['contribution', 'deadline', 'fair', 'history', 'last_play']
    """
    seats_out: list[dict[str, Any] | None] = []
    for i, s in enumerate(state.seats):
        if s is None:
            seats_out.append(None)
            continue
        seats_out.append({
            "seat": i, "player": s.player, "level": s.level, "base": s.base,
            "ready": s.ready, "cards_left": len(s.hand), "timeouts": s.timeouts,
            "trustee": s.trustee, "connected": s.connected, "escaped": s.escaped,
            "plays": s.plays, "bombs": [b.describe() for b in s.bombs],
        })
    out: dict[str, Any] = {
        "match_id": state.match_id,
        "version": state.version,
        "phase": state.phase,
        "mode": state.config.mode if state.config else None,
        "seats": seats_out,
        "turn": state.current_player,
        "leading": state.phase == "playing" and state.to_beat is None,
        "trick": state.trick,
        "table_count": len(state.table),
        "table": format_cards(state.table) if state.table else "",
        "table_ids": list(state.table),
    }
    if state.to_beat is not None:
        lp = state.to_beat
        out["last_play"] = {"player": state.seat(lp.seat).player, "cards": list(lp.cards),
                            "text": format_ranks(lp.cards), "reading": lp.combo.to_json(),
                            "describe": lp.combo.describe()}
    else:
        out["last_play"] = None
    d = state.deadline()
    out["deadline"] = None if d is None else {"at_ms": d.at_ms, "kind": d.kind, "version": d.version}
    out["contribution"] = _standing(state)
    if state.finished is not None:
        f = state.finished
        out["result"] = {"winner": f.winner, "loser": f.loser, "kou": f.kou, "reason": f.reason,
                         "cards_left": dict(f.cards_left)}
    else:
        out["result"] = None
    out["fair"] = fair_view(state)
    out["history"] = history(state) if with_history else []
    return out


def view_for(state: MatchState, player: str | None, common: dict[str, Any] | None = None) -> dict[str, Any]:
    """The view of ``player`` (None: a spectator).  Never holds an opponent card id.

    ``common``: :func:`view_common` of the same ``state``, when several views of it are
    built (the publisher builds it once per command); its values are shared, not copied."""
    c = view_common(state) if common is None else common
    me = state.seat_of(player) if player is not None else None
    out: dict[str, Any] = {
        "match_id": c["match_id"], "version": c["version"], "phase": c["phase"], "mode": c["mode"],
        "you": player if me is not None else None,
        "seats": c["seats"],
        "turn": c["turn"],
        "your_turn": me is not None and state.phase == "playing" and state.turn == me,
        "leading": c["leading"], "trick": c["trick"], "table_count": c["table_count"],
        "table": c["table"], "table_ids": c["table_ids"], "last_play": c["last_play"],
        "deadline": c["deadline"], "contribution": c["contribution"],
    }
    if me is not None:
        hand = sort_cards(state.seat(me).hand)
        out["hand"] = {"ids": hand, "text": format_cards(hand)}
        opp = state.seats[1 - me]
        out["opponent"] = None if opp is None else {"player": opp.player, "cards_left": len(opp.hand)}
    else:
        out["hand"] = None
    out["result"] = c["result"]
    out["fair"] = c["fair"]
    out["history"] = c["history"]
    return out


def brief(state: MatchState, player: str | None = None) -> dict[str, Any]:
    """The brief of every ``update`` to ``player`` (None: a spectator; docs/PROTOCOL.md §8 "The
    brief"): what a client renders the table from without folding events -- whose turn, the
    phase, the trick, the play to beat (``None`` when the player on turn leads: after a pass
    ended the trick), the current trick's plays, the clock's deadline, each player's card
    count, the version, and the player's own hand (:func:`own_hand`; None for a spectator).
    All but ``hand`` is the same for every recipient.

    >>> brief(MatchState(match_id="m"))
    {'version': 0, 'phase': 'new', 'turn': None, 'trick': 0, 'last_play': None, 'deadline_ms': None, 'cards_left': {}, 'hand': None, 'trick_plays': []}
    """
    lp = state.to_beat
    d = state.deadline()
    return {"version": state.version, "phase": state.phase, "turn": state.current_player, "trick": state.trick,
            "last_play": None if lp is None else {"player": state.seat(lp.seat).player, "cards": list(lp.cards),
                                                  "reading": lp.combo.to_json()},
            "deadline_ms": None if d is None else d.at_ms,
            "cards_left": {s.player: len(s.hand) for s in state.seats if s is not None},
            "hand": own_hand(state, player), "trick_plays": trick_plays(state)}


def brief_of_view(view: dict[str, Any], version: int | None = None) -> dict[str, Any]:
    """The :func:`brief` read off a view (the same dict as ``brief(state, player)`` for
    ``view_for(state, player)``); ``version`` when the update's is newer than the view's own field."""
    lp = view.get("last_play")
    deadline = view.get("deadline")
    hand = view.get("hand")
    trick = int(view.get("trick") or 0)
    return {"version": int(view.get("version") or 0) if version is None else version,
            "phase": view.get("phase", "new"), "turn": view.get("turn"), "trick": trick,
            "last_play": None if lp is None else {"player": lp["player"], "cards": list(lp["cards"]),
                                                  "reading": lp["reading"]},
            "deadline_ms": None if deadline is None else deadline["at_ms"],
            "cards_left": {s["player"]: s["cards_left"] for s in view.get("seats") or () if s is not None},
            "hand": None if not isinstance(hand, dict) else list(hand["ids"]),
            "trick_plays": [] if lp is None else
            [{"player": p["player"], "cards": list(p["cards"]), "reading": p["reading"]}
             for p in view.get("history") or () if p.get("trick") == trick]}


def fair_view(state: MatchState) -> dict[str, Any] | None:
    """The provably-fair part of a view (docs/FAIRNESS.md): the commitment from the
    creation on, the client seeds from the deal on, and the server seed only once the
    match is finished.  None for a match without a commitment.

    >>> fair_view(MatchState(match_id="m")) is None
    True
    """
    if state.commitment is None:
        return None
    finished = state.phase == "finished"
    return {"commitment": state.commitment,
            "client_seeds": list(state.client_seeds) if state.client_seeds is not None else None,
            "server_seed": state.server_seed if finished else None}


def redact_event(event: EventBase, player: str | None, seat: int | None = None,
                 state: MatchState | None = None, public: dict[str, Any] | None = None) -> dict[str, Any]:
    """The event as ``player`` may see it (plain data).

    HandDealt keeps only the receiver's own hand (the other is replaced by its
    card count) and never the set-aside cards or the lead card when the lead
    card is not the receiver's own; ``seat`` is the receiver's seat (needed
    for HandDealt; None = spectator: no hands) -- or give ``state`` (any state
    of the match after the seating) and it is looked up from ``player``.
    PlayerSeated shows the balance to the seated player only (others see the level and base).
    Every other event is public (played cards are shown face up on the table).
    ``public``: :func:`public_event_dict` of ``event``, when it is redacted for several
    players (built once per event; the result is a copy, ``public`` is not changed).
    """
    if seat is None and state is not None and player is not None:
        seat = state.seat_of(player)
    if player is None:
        seat = None
    # never a private field (MatchCreated's server seed)
    data = public_event_dict(event) if public is None else dict(public)
    if isinstance(event, PlayerSeated) and event.player != player:
        data.pop("balance", None)  # the opponent and spectators see the level, never the balance
    if isinstance(event, HandDealt):
        hands: list[Any] = []
        for i, h in enumerate(event.hands):
            hands.append(list(h) if (seat is not None and i == seat) else None)
        data["hands"] = hands
        data["hand_sizes"] = [len(h) for h in event.hands]
        data["set_aside"] = None
        data["set_aside_count"] = len(event.set_aside)
        if event.lead_card is not None and not (seat is not None and event.lead_card in event.hands[seat]):
            data["lead_card"] = None
    return data


def breakdown_for(breakdown: dict[str, Any], player: str | None) -> dict[str, Any]:
    """A settlement's breakdown as ``player`` may see it (a spectator: ``None``): the
    balances the players were seated with are the ledger's, so each player sees only
    their own (``X_from.levels``, and the R-11.2 ``cap`` when they are its payer); the
    opponent's level and base stay, as in every view (issue 12).

    >>> b = {"X": 5, "X_from": {"levels": {"a": {"level": 2, "base": 5, "balance": 900},
    ...                                     "b": {"level": 1, "base": 5, "balance": 40}}},
    ...      "cap": {"rule": "R-11.2", "payer": "b", "balance": 40, "owed": 50, "paid": 40, "applied": True}}
    >>> breakdown_for(b, "a")["X_from"]["levels"]
    {'a': {'level': 2, 'base': 5, 'balance': 900}, 'b': {'level': 1, 'base': 5}}
    >>> breakdown_for(b, "a")["cap"]
    {'rule': 'R-11.2', 'payer': 'b', 'owed': 50, 'paid': 40, 'applied': True}
    >>> breakdown_for(b, "b")["cap"]["balance"]
    40
    """
    out = dict(breakdown)
    x_from = out.get("X_from")
    if isinstance(x_from, dict) and isinstance(x_from.get("levels"), dict):
        out["X_from"] = {**x_from, "levels": {
            p: (dict(row) if p == player or not isinstance(row, dict)
                else {k: v for k, v in row.items() if k != "balance"})
            for p, row in x_from["levels"].items()}}
    cap = out.get("cap")
    if isinstance(cap, dict) and cap.get("payer") != player:
        out["cap"] = {k: v for k, v in cap.items() if k != "balance"}
    return out
