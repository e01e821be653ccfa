"""``shuangkou classify CARDS...``: print the reading of some cards as JSON (R-3, R-4).

* default: the best reading (R-4.6);
* ``--beat "4 5 6 7 8"``: the largest reading that beats that play (R-4.6, R-5);
* ``--all``: every reading, best first.

Output is one JSON object: ``Combo.to_json()`` plus ``"cards"`` (the ranks
played) and ``"describe"``.  No reading prints ``"kind": null`` and exits 1.
With ``--beat`` the object also says plainly ``"beats": true`` or
``"beats": false`` (R-5) and carries the previous play as ``"beat"``: cards
that form a combination but do not beat it print their best reading with
``"beats": false`` and exit 1; ``--all`` prints ``{"cards": ..., "readings": [...]}``
and exits 1 when the list is empty.  A bad card token exits 2.
"""

from __future__ import annotations

import argparse
import json

# engine.rules.classify is imported in run(): build_parser imports every command module.


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cards", nargs="+", help='cards in notation, e.g. 3 4 5 6 BJ (or one quoted string)')
    parser.add_argument("--beat", metavar="CARDS", help="the previous play: print the largest reading that beats it")
    parser.add_argument("--all", action="store_true", help="print every reading, best first")
    parser.add_argument("--heavenly", choices=("top", "bottom"), default="top",
                        help="position of the heavenly bomb among 7-xiang bombs (R-3.9)")
    parser.add_argument("--no-chain-bomb-twos", dest="chain_bomb_twos", action="store_false",
                        help="read as a room with chain_bomb_twos = false: chain bombs end at A (R-2.2)")


def _reading(combo, cards_text: str) -> dict[str, object]:
    data: dict[str, object] = {"cards": cards_text}
    data.update(combo.to_json())  # chain bombs: m and bomb_sizes say where the extra jokers went
    data["describe"] = combo.describe()
    return data


def run(args: argparse.Namespace) -> int:
    from engine.rules.cards import CardNotationError, format_ranks, parse_cards
    from shuangkou.cli import CliError
    from engine.rules.classify import classify, interpretations

    try:
        cards = parse_cards(" ".join(args.cards))
        beat_cards = parse_cards(args.beat) if args.beat is not None else None
    except CardNotationError as exc:
        raise CliError(str(exc)) from None
    if not cards:
        raise CliError("no cards given")
    text = format_ranks(cards)

    beat = None
    if beat_cards is not None:
        beat = classify(beat_cards, heavenly=args.heavenly, chain_bomb_twos=args.chain_bomb_twos)
        if beat is None:
            raise CliError(f"--beat {args.beat!r} is not a combination")

    if args.all:
        readings = interpretations(cards, heavenly=args.heavenly, chain_bomb_twos=args.chain_bomb_twos)
        print(json.dumps({"cards": text, "readings": [_reading(c, text) for c in readings]},
                         ensure_ascii=False))
        return 0 if readings else 1

    combo = classify(cards, beat=beat, heavenly=args.heavenly, chain_bomb_twos=args.chain_bomb_twos)
    beats = combo is not None
    if combo is None and beat is not None:
        combo = classify(cards, heavenly=args.heavenly, chain_bomb_twos=args.chain_bomb_twos)  # a combination that does not beat: say so
    out: dict[str, object] = {"cards": text, "kind": None} if combo is None else _reading(combo, text)
    if beat is not None:
        out["beats"] = beats
        out["beat"] = _reading(beat, format_ranks(beat_cards or []))
    print(json.dumps(out, ensure_ascii=False))
    return 0 if beats else 1
