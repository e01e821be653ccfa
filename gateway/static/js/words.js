// The card-game vocabulary, Chinese beside English (RULES.md).
export const KIND_ZH = {
  single: "單張", pair: "對子", pair_run: "連對", triple: "三同張", triple_run: "連三同張",
  straight: "順子", bomb: "炸彈", chain_bomb: "連炸", three_jokers: "三王炸", four_jokers: "天王炸",
};
export const KOU = {
  flat: "平扣 flat", single: "單扣 single kou", double: "雙扣 double kou", escape: "逃跑 escape",
};
export const TRUSTEE_REASON = {
  timeouts: "three timeouts 超時三次", requested: "requested 自選", disconnect: "disconnected 斷線",
  escape: "escaped 逃跑",
};

export const REMOVED_REASON = {
  not_ready: "not ready in time 未準備 (R-13.2)", no_opponent: "no opponent sat down in time 無對手入座", left: "left the table 離開", escaped: "escaped 逃跑",
  disconnected: "disconnected too long 斷線", opponent_left: "the opponent left 對手離開",
};

function rankZh(rank) {
  return rank === "SJ" ? "小王" : rank === "BJ" ? "大王" : rank;
}

/** A reading in Chinese: "5相炸彈 (5)", "順子 到9", "對子 3". */
export function readingZh(r) {
  if (!r) return "";
  const k = r.kind;
  if (k === "bomb") return `${r.xiang}相炸彈（${rankZh(r.rank)}）`;
  if (k === "chain_bomb") return `${r.xiang}相${r.chain}連炸（到${rankZh(r.rank)}）`;
  if (k === "three_jokers") return "三王炸（6相）";
  if (k === "four_jokers") return "天王炸（7相）";
  if (k === "straight" || k === "pair_run" || k === "triple_run") return `${KIND_ZH[k]}（到${rankZh(r.rank)}）`;
  return `${KIND_ZH[k] || k}（${rankZh(r.rank)}）`;
}

/** "5-xiang bomb of 4 · 5相炸彈（4）" (the English is the engine's describe()). */
export function readingWords(r, describe) {
  const en = describe || (r ? `${r.kind} of ${r.rank}` : "");
  const zh = readingZh(r);
  const wild = r && r.jokers_as && r.jokers_as.length ? ` — 財神 as ${r.jokers_as.join(" ")}` : "";
  return zh ? `${en} · ${zh}${wild}` : en;
}

export function modeWords(mode) {
  return mode === "wealth" ? "財富 wealth (coins 金幣)" : "積分 points";
}

const RANK_LABELS = ["3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A", "2", "SJ", "BJ"];

/** The reading of a CardsPlayed event (ranks as indexes) in the view's shape (rank labels). */
export function eventReading(er) {
  return {
    kind: er.kind, rank: RANK_LABELS[er.top], size: er.size, xiang: er.xiang, chain: er.chain,
    regular: er.regular, jokers_as: (er.jokers_as || []).map((r) => RANK_LABELS[r]),
  };
}

/** English words of a reading, as the engine's Combo.describe() writes them. */
export function describe(r) {
  const k = r.kind;
  if (k === "bomb") return `${r.xiang}-xiang bomb of ${r.rank}`;
  if (k === "chain_bomb") return `${r.xiang}-xiang ${r.regular ? "regular" : "irregular"} ${r.chain}-chain bomb to ${r.rank}`;
  if (k === "three_jokers") return "three-joker bomb (6-xiang)";
  if (k === "four_jokers") return "heavenly bomb (7-xiang)";
  if (k === "straight" || k === "pair_run" || k === "triple_run") return `${k.replace("_", " ")} to ${r.rank} (${r.size} cards)`;
  return `${k} of ${r.rank}`;
}

export const BOMB_KINDS = new Set(["bomb", "chain_bomb", "three_jokers", "four_jokers"]);
