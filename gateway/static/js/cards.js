// Cards on the page: names and elements.  The ids themselves (docs/PROTOCOL.md "Card ids") are
// client.js's `cards`; suits never matter.
import { RANKS, cards } from "./client.js";

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

/** One card as an element.  attrs: {"data-card": id} for the player's own hand only. */
export function cardElement(id, { tag = "span", attrs = {}, wild = false, small = false } = {}) {
  const el = document.createElement(tag);
  const s = suitOf(id);
  el.className = "card" + (small ? " small" : "") + (s === "H" || s === "D" ? " red" : "")
    + (isJoker(id) ? " joker " + (rankOf(id) === 14 ? "big" : "little") : "");
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  const rank = document.createElement("span");
  rank.className = "rank";
  rank.textContent = isJoker(id) ? (rankOf(id) === 14 ? "BJ" : "SJ") : RANKS[rankOf(id)];
  el.append(rank);
  const suit = document.createElement("span");
  suit.className = "suit";
  suit.textContent = s ? SUIT_SYMBOL[s] : label(id);
  el.append(suit);
  if (wild && isJoker(id)) {
    const w = document.createElement("span");
    w.className = "wild";
    w.textContent = "財神 wild";
    w.title = "Jokers are wild with natural cards (R-4, 財神)";
    el.append(w);
  }
  el.setAttribute("aria-label", (isJoker(id) ? (rankOf(id) === 14 ? "big joker" : "small joker")
    : RANKS[rankOf(id)] + (s ? " of " + { S: "spades", H: "hearts", C: "clubs", D: "diamonds" }[s] : "")));
  return el;
}
