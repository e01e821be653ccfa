// Provably fair deals in the page (docs/FAIRNESS.md): the commitment and the deal recomputed
// with WebCrypto from the revealed server seed and the client seeds -- no trust in the server.
//   commitmentOf(seedHex, matchId) -> hex of SHA-256(seed ‖ UTF-8(match id))
//   fairDeal(seedHex, [seed0, seed1], matchId) -> {deck, leadIndex, leadCard, first, hands}
//   verifyDeal(record) -> {ok, checks: [{ok, text}], deal}
//   randomClientSeed() -> 32 hex digits from crypto.getRandomValues

const enc = new TextEncoder();
const DOMAIN = enc.encode("shuangkou/fair-deal/v1");
const HAND = 27;
const DEALT = 54;
const CARDS = 108;
const TWO32 = 2 ** 32;

export function hexToBytes(hex) {
  if (typeof hex !== "string" || hex.length % 2 || /[^0-9a-fA-F]/.test(hex)) throw new Error("not hex");
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export function bytesToHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

function u32be(n) {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n, false);
  return b;
}

function lp(text) {  // 4-byte big-endian byte length, then the UTF-8 bytes
  const raw = enc.encode(text);
  return concat(u32be(raw.length), raw);
}

export async function commitmentOf(seedHex, matchId) {
  const digest = await crypto.subtle.digest("SHA-256", concat(hexToBytes(seedHex), enc.encode(matchId)));
  return bytesToHex(new Uint8Array(digest));
}

// rank order of R-2.1 (3 … 2, SJ, BJ), as HandDealt sorts a hand: by rank, then by id
function rankOf(id) {
  const x = id % 54;
  return x >= 52 ? 13 + (x - 52) : Math.floor(x / 4);
}
const byRank = (a, b) => rankOf(a) - rankOf(b) || a - b;

export async function fairDeal(seedHex, clientSeeds, matchId) {
  const seed = hexToBytes(seedHex);
  if (seed.length !== 32) throw new Error("a server seed is 32 bytes (64 hex digits)");
  const key = await crypto.subtle.importKey("raw", seed, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const message = concat(DOMAIN, lp(matchId), lp(clientSeeds[0]), lp(clientSeeds[1]));
  let counter = 0;
  let words = [];
  let used = 0;
  async function word() {
    if (!words.length) {
      const block = new DataView(await crypto.subtle.sign("HMAC", key, concat(message, u32be(counter++))));
      words = Array.from({ length: 8 }, (_, k) => block.getUint32(4 * k, false));
    }
    used += 1;
    return words.shift();
  }
  async function below(n) {  // rejection sampling: no modulo bias
    const limit = TWO32 - (TWO32 % n);
    for (;;) {
      const w = await word();
      if (w < limit) return w % n;
    }
  }
  const deck = Array.from({ length: CARDS }, (_, i) => i);
  for (let i = CARDS - 1; i > 0; i--) {
    const j = await below(i + 1);
    [deck[i], deck[j]] = [deck[j], deck[i]];
  }
  const leadIndex = await below(DEALT);
  return {
    deck, leadIndex, leadCard: deck[leadIndex], first: leadIndex < HAND ? 0 : 1, wordsUsed: used,
    hands: [deck.slice(0, HAND).sort(byRank), deck.slice(HAND, DEALT).sort(byRank)],
  };
}

export function randomClientSeed() {
  return bytesToHex(crypto.getRandomValues(new Uint8Array(16)));
}

function sameSet(a, b) {
  const x = [...a].sort((p, q) => p - q);
  const y = [...b].sort((p, q) => p - q);
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

// record: {matchId, commitment, serverSeed, clientSeeds, seat (mine, or null), dealtHand (my HandDealt
// hand, if seen), hand (my cards now), first (HandDealt's, if seen), leadCard, played: {0: [...], 1: [...]},
// table: [ids played], mySeed (the client seed I sent, if any)}
export async function verifyDeal(record) {
  const checks = [];
  // key (and params): the page's catalogue words for the check (i18n "fair.check.<key>")
  const check = (ok, text, key = "", params = {}) => checks.push({ ok: !!ok, text, key, params });
  const mine = await commitmentOf(record.serverSeed, record.matchId);
  check(mine === String(record.commitment).toLowerCase(),
    mine === String(record.commitment).toLowerCase()
      ? `SHA-256(seed ‖ match id) = ${mine}: the commitment shown before the deal`
      : `SHA-256(seed ‖ match id) = ${mine}, but the match committed to ${record.commitment}`,
    mine === String(record.commitment).toLowerCase() ? "commitment" : "commitmentBad");
  if (!record.clientSeeds) {
    check(false, "the deal was not computed from the seeds (a fixed deal)", "fixed");
    return { ok: false, checks, deal: null };
  }
  if (record.mySeed && record.seat !== null && record.seat !== undefined) {
    check(record.clientSeeds[record.seat] === record.mySeed, `my client seed ${JSON.stringify(record.mySeed)} was used`, "mySeed");
  }
  const deal = await fairDeal(record.serverSeed, record.clientSeeds, record.matchId);
  const seat = record.seat;
  if (seat !== null && seat !== undefined) {
    if (record.dealtHand) {
      check(sameSet(record.dealtHand, deal.hands[seat]), "my 27 dealt cards are the fair deal's", "myCards");
    } else if (record.hand) {
      const set = new Set(deal.hands[seat]);
      check(record.hand.every((c) => set.has(c)), "the cards I still hold were dealt to me", "myHand");
    }
  }
  for (const s of [0, 1]) {
    const played = (record.played || {})[s] || [];
    if (!played.length) continue;
    const set = new Set(deal.hands[s]);
    check(played.every((c) => set.has(c)), `every card seat ${s} played was dealt to seat ${s}`, "played", { seat: s });
  }
  if (record.table && record.table.length) {
    const dealt = new Set(deal.deck.slice(0, DEALT));
    check(record.table.every((c) => dealt.has(c)), "no played card came from the 54 set-aside cards", "table");
  }
  if (record.first !== null && record.first !== undefined) {
    check(record.first === deal.first, `seat ${deal.first} held the lead card and led first`, "first");
  }
  if (record.leadCard !== null && record.leadCard !== undefined) check(record.leadCard === deal.leadCard, "the lead card is the fair deal's", "lead");
  return { ok: checks.every((c) => c.ok), checks, deal };
}
