import { has, t } from "./i18n.js";

// Card ids and their names (docs/PROTOCOL.md §1): within a deck rank*4+suit for 0..51,
// 52 small joker, 53 big joker; the second deck adds 54.  Suits never matter.
export const RANKS = ["3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A", "2", "SJ", "BJ"];
export const SUITS = "SHCD";
export const SUIT_SYMBOL = { S: "♠", H: "♥", C: "♣", D: "♦" };
const DECK = 54;

export function rankOf(id) {
  const x = id % DECK;
  return x >= 52 ? 13 + (x - 52) : Math.floor(x / 4);
}

export function suitOf(id) {
  const x = id % DECK;
  return x >= 52 ? null : SUITS[x % 4];
}

export function isJoker(id) {
  return id % DECK >= 52;
}

/** Rank order, then suit, then id: the order hands are shown in (engine sort_cards). */
export function sortCards(ids) {
  return [...ids].sort((a, b) => rankOf(a) - rankOf(b) || a - b);
}

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
  const rank = document.createElement("span");
  rank.className = "rank";
  const big = rankOf(id) === 14;
  rank.textContent = isJoker(id) ? "★" : RANKS[rankOf(id)];
  el.append(rank);
  const suit = document.createElement("span");
  suit.className = "suit";
  suit.textContent = s ? SUIT_SYMBOL[s] : w(big ? "card.big" : "card.small", label(id));
  el.append(suit);
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
