// Cards on the page: names and elements.  The ids themselves (docs/PROTOCOL.md "Card ids") are
// client.js's `cards`; suits never matter.  Labels in the page's language (i18n.js).
import { RANKS, cards } from "./client.js";
import { has, t } from "./i18n.js";

export { RANKS };
export const SUITS = "SHCD";
export const SUIT_SYMBOL = { S: "♠", H: "♥", C: "♣", D: "♦" };
export const rankOf = cards.rank;
export const suitOf = cards.suit;
export const isJoker = cards.isJoker;
/** Rank order, then id: the order hands are shown in (engine sort_cards). */
export const sortCards = cards.sort;

export function label(id) {
  const r = rankOf(id);
  if (r === 13) return "小王";
  if (r === 14) return "大王";
  return RANKS[r];
}

// the page's words when a catalogue is loaded (the table), else the fallback (the replay viewer)
const w = (key, fallback, params) => (has(key) ? t(key, params) : fallback);

/** One card as an element.  attrs: {"data-card": id} for the player's own hand only. */
export function cardElement(id, { tag = "span", attrs = {}, wild = false, small = false } = {}) {
  const el = document.createElement(tag);
  const s = suitOf(id);
  el.className = "card" + (small ? " small" : "") + (s === "H" || s === "D" ? " red" : "")
    + (isJoker(id) ? " joker " + (rankOf(id) === 14 ? "big" : "little") : "");
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  // a real card's face: rank and suit in the top-left corner (readable when the cards overlap),
  // a large suit (or a joker's star) in the body
  const idx = document.createElement("span");
  idx.className = "idx";
  const rank = document.createElement("span");
  rank.className = "rank";
  const big = rankOf(id) === 14;
  rank.textContent = isJoker(id) ? w(big ? "card.big" : "card.small", label(id)) : RANKS[rankOf(id)];
  const suit = document.createElement("span");
  suit.className = "suit";
  suit.textContent = s ? SUIT_SYMBOL[s] : "";
  idx.append(rank, suit);
  const pip = document.createElement("span");
  pip.className = "pip";
  pip.setAttribute("aria-hidden", "true");
  pip.textContent = s ? SUIT_SYMBOL[s] : "★";
  el.append(idx, pip);
  if (wild && isJoker(id)) {
    const tag = document.createElement("span");
    tag.className = "wild";
    tag.textContent = w("card.wild", "財神");
    tag.title = w("card.wildTitle", "wild");
    el.append(tag);
  }
  el.setAttribute("aria-label", isJoker(id) ? w(big ? "card.ariaBig" : "card.ariaSmall", big ? "big joker" : "small joker")
    : w("card.aria", `${RANKS[rankOf(id)]} of ${{ S: "spades", H: "hearts", C: "clubs", D: "diamonds" }[s]}`,
      { rank: RANKS[rankOf(id)], suit: w(`suit.${s}`, s) }));
  return el;
}
