// The card-game vocabulary in the page's language (i18n.js catalogues): combination names,
// kou names, room modes; the table page's and the operator's replay viewer's.
import { t } from "./i18n.js";

export const BOMB_KINDS = new Set(["bomb", "chain_bomb", "three_jokers", "four_jokers"]);
const RANK_LABELS = ["3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A", "2", "SJ", "BJ"];

/** ``node``'s text, written only when it differs: the same text written again still costs the
 * page a layout (the table page draws itself again on every update). */
export function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

/** A score or a total as every page writes it: "+5", "0", "-5" (ASCII, so the text of a
 * [data-score] reads back as a number). */
export function signed(n) {
  return n > 0 ? `+${n}` : String(n);
}

export function rankWord(rank) {
  return rank === "SJ" || rank === "BJ" ? t(`rank.${rank}`) : rank;
}

/** A reading in the page's language: "5-xiang bomb of 4" / "5相炸弹（4）", with its wild cards. */
export function readingWords(r) {
  if (!r) return "";
  const text = t(`kind.${r.kind}`, { rank: rankWord(r.rank), xiang: r.xiang, chain: r.chain, size: r.size });
  const wild = r.jokers_as && r.jokers_as.length ? ` · ${t("kind.wild", { ranks: r.jokers_as.map(rankWord).join(" ") })}` : "";
  return text + wild;
}

/** What follows a play or a pass the system made for the player: " (timed out)" / " (trustee)",
 * else nothing (``by`` of CardsPlayed and Passed). */
export function byWords(by) {
  return by === "timeout" ? t("log.byTimeout") : by === "trustee" ? t("log.byTrustee") : "";
}

/** What the escaper's opponent receives, in signs any language reads: "⌊720 × 1⌋ = 720"
 * (the breakdown's ``received_formula`` says "floor(…)", the command line's English). */
export function receivedWords(esc) {
  return `⌊${esc.paid} × ${esc.transfer_ratio}⌋ = ${esc.received}`;
}

/** The rule an escape was settled by, its id only ("R-12.2"): the words beside it are English. */
export function escapeRuleId(esc) {
  return String(esc.rule || "").split(":")[0];
}

export function kouWords(kou) {
  return kou ? t(`kou.${kou}`) : "";
}

export function modeWords(mode) {
  return t(mode === "wealth" ? "mode.wealth" : "mode.points");
}

/** The reading of a CardsPlayed event (ranks as indexes) in the view's shape (rank labels). */
export function eventReading(er) {
  return {
    kind: er.kind, rank: RANK_LABELS[er.top], size: er.size, xiang: er.xiang, chain: er.chain,
    regular: er.regular, jokers_as: (er.jokers_as || []).map((r) => RANK_LABELS[r]),
  };
}

/** Whether a player id is a bot seat's (``bot-<n>``, engine/store/keys.py). */
export function isBot(player) {
  return /^bot-\d+$/.test(player || "");
}

/** A settlement formula with each player's ``c_<id>`` written ``c(<name>)`` (``nameOf``); the
 * longest ids first, so an id that begins another is never replaced inside it. */
export function namedFormula(text, ids, nameOf) {
  return [...ids].sort((x, y) => y.length - x.length)
    .reduce((s, p) => s.split(`c_${p}`).join(`c(${nameOf(p)})`), String(text || ""));
}
