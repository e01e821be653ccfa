// The 火拼雙扣 WebSocket client (docs/PROTOCOL.md §8): an ES module with no dependencies and no
// build step.  The browser table uses it; it runs in Node ≥ 18 too (Node 22's global WebSocket,
// or pass a `ws` WebSocket class as `WebSocket`).  Types: client.d.ts beside it (generated from
// gateway/schemas/ by gateway/schemas_gen.py).
//
//   import { Client, cards } from "./client.js";
//   const c = new Client({ url: "ws://host:8080/ws", token });
//   c.on("update", ({ brief }) => { if (brief.turn === c.player) c.play([brief...]) });
//   c.connect(); c.join("points");
//
// What it does for you:
// * auth: the token as the first message (`{"type": "Auth"}`, default) or in the query (`auth: "query"`);
// * resume: on a drop it reconnects with a growing delay (up to a quarter less, so clients dropped
//   together spread out; from the shortest again after a socket that stayed open STABLE_MS) and
//   gives the last version it saw, so the gateway sends every later update (no gap, no duplicate);
//   the version goes with its match, and none once seated at another match (it was of the match
//   before); the moves a drop left unanswered go again with their command_id (a Play or Pass within
//   its turn, a Ready while seated, a Sync for the view), the other commands' answers are no longer waited for;
//   a spectator watches its match again; a late update or refusal about a match it moved on from is
//   still an event but does not take `match`, `version` or `state` back; `sync()` asks for the view again;
// * `state`: the table from the briefs alone -- your `hand`, the current trick's `trick_plays`,
//   whose `turn`, `your_turn`, the phase, the play to beat, the deadline, the card counts
//   (render from it: no folding of events); it keeps the newest `brief` and full `view` too
//   (`view.version` may be older than `brief.version`: the events between them are in the updates);
// * it sends commands with a `command_id` and, for Play and Pass, the `expected_version` of the
//   table it last saw; a `rejected` or `ack` is matched to the command that caused it (`command`),
//   and every answer clears its `pending` entry (a Join's and a Leave's: the lobby message);
// * pacing: it stays under the gateway's rates (the welcome's `rate`, `burst`, `sync_rate`),
//   sends your moves before queued Syncs and folds a Sync already queued into one; a Play, Pass or
//   Ready refused `rate_limited` is sent again with the same command_id once the bucket refilled,
//   within the turn (Ready: while seated).
// * acknowledgements: it tells the gateway which updates it read (`Seen`, docs/PROTOCOL.md §8):
//   the first update on each socket and every update that starts your clock (your turn, the
//   ready clock), after your `update` handlers ran; a clock whose update a dying gateway handed
//   over and you never read then pauses instead of charging you a timeout.
// * quick phrases: `say(id)` sends one of PHRASES or EMOTES to the table (at most one every
//   SAY_INTERVAL_MS); every phrase said at your table (yours too) is a `say` event.
// * private tables (issue 39): `createTable(room, hands, {spectators, bots})` answered by a
//   `private_table` event (its code and link), `joinTable(code)`, `cancelTable()`, `requestEnd()`,
//   `voteEnd(agree)`; the series' vote, tally and final standings are `series` events, and each
//   hand's `settled` carries `series` (the running totals).
// Events (`on(name, fn)`): update, lobby, settled, rating, say, private_table, series, rejected, ack, closed,
// welcome, message (any
// other kind), retry (a rate-limited move sent again), error; and state (the link: connecting,
// open, reconnecting, refused, closed; also as `link`).

export const RANKS = Object.freeze(["3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A", "2", "SJ", "BJ"]);
export const SUITS = Object.freeze(["S", "H", "C", "D"]);
export const DECK_SIZE = 54;
export const NUM_CARDS = 108;
/** Close codes after which reconnecting cannot help (docs/PROTOCOL.md §8, "Close codes"): a bad or
 * expired token, a newer connection of the same player. */
export const FINAL_CLOSE_CODES = Object.freeze([4401, 4409]);
/** The close code of a socket that stayed over its rate: reconnect, and slower. */
export const RATE_CLOSE_CODE = 4429;
/** A socket open this long counts as stable: the next drop's reconnect starts from the shortest delay
 * again (a gateway that accepts and then closes, 1013 or 1011, meets a growing one). */
export const STABLE_MS = 10000;
/** The gateway's limits until its welcome says the ones in force (docs/PROTOCOL.md §8, "Limits"). */
export const DEFAULT_LIMITS = Object.freeze({ rate: 20, burst: 40, sync_rate: 2 });
/** The moves a `rate_limited` refusal is retried for (the same command_id). */
export const RETRIED_TYPES = Object.freeze(["Play", "Pass", "Ready"]);
/** The quick phrase ids a Say may carry (docs/PROTOCOL.md §8 "Quick phrases"; texts in the i18n files). */
export const PHRASES = Object.freeze(["hurry_up", "nice_cards", "well_played", "thanks", "sorry", "oops", "one_more",
  "bye"]);
/** The emote ids a Say may carry. */
export const EMOTES = Object.freeze(["emote_smile", "emote_laugh", "emote_cry", "emote_angry", "emote_cool",
  "emote_surprised"]);
/** At most one Say every this many milliseconds (a sooner one is refused `rate_limited`). */
export const SAY_INTERVAL_MS = 3000;

/** Card ids 0..107 (docs/PROTOCOL.md "Card ids"): deck = floor(id / 54); within a deck
 * x = id % 54: x < 52 is rank floor(x / 4) (0 = "3" … 12 = "2") and suit x % 4 (S H C D);
 * x = 52 the small joker (rank 13, "SJ"), x = 53 the big joker (rank 14, "BJ"). */
export const cards = Object.freeze({
  /** rank index 0..14 (the single-card order, R-2.1: 3 lowest, BJ highest) */
  rank(id) {
    const x = id % DECK_SIZE;
    return x >= 52 ? 13 + (x - 52) : Math.floor(x / 4);
  },
  /** "S" "H" "C" "D", or null for a joker */
  suit(id) {
    const x = id % DECK_SIZE;
    return x >= 52 ? null : SUITS[x % 4];
  },
  /** 0 or 1: which of the two decks */
  deck(id) {
    return Math.floor(id / DECK_SIZE);
  },
  isJoker(id) {
    return id % DECK_SIZE >= 52;
  },
  /** the notation of one card: "10H", "3S", "SJ", "BJ" */
  label(id) {
    const r = cards.rank(id);
    return r >= 13 ? RANKS[r] : RANKS[r] + cards.suit(id);
  },
  /** {id, rank, rank_label, suit, deck, joker} */
  info(id) {
    if (!Number.isInteger(id) || id < 0 || id >= NUM_CARDS) throw new RangeError(`not a card id: ${id}`);
    const rank = cards.rank(id);
    return { id, rank, rank_label: RANKS[rank], suit: cards.suit(id), deck: cards.deck(id), joker: rank >= 13 };
  },
  /** ids in the order hands are shown: by rank, then id (the engine's sort_cards) */
  sort(ids) {
    return [...ids].sort((a, b) => cards.rank(a) - cards.rank(b) || a - b);
  },
  /** the notation of several cards: "3S 3H 10D SJ" */
  text(ids) {
    return ids.map((id) => cards.label(id)).join(" ");
  },
  /** ids grouped by rank index: {rank: [ids…]} */
  byRank(ids) {
    const out = {};
    for (const id of cards.sort(ids)) (out[cards.rank(id)] = out[cards.rank(id)] || []).push(id);
    return out;
  },
});

function newId() {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === "function") return c.randomUUID();
  return `c-${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

/** The newest brief of an update: the one an update carries, else (an old gateway) one read off
 * its view; null when it has neither. */
export function briefOf(message) {
  if (message.brief) return message.brief;
  const v = message.view;
  if (!v) return null;
  const cardsLeft = {};
  for (const s of v.seats || []) if (s) cardsLeft[s.player] = s.cards_left;
  const lp = v.last_play;
  const trickPlays = lp ? (v.history || []).filter((p) => p.trick === v.trick)
    .map((p) => ({ player: p.player, cards: p.cards, reading: p.reading })) : [];
  return {
    version: message.version, phase: v.phase, turn: v.turn, trick: v.trick,
    last_play: lp ? { player: lp.player, cards: lp.cards, reading: lp.reading } : null,
    deadline_ms: v.deadline ? v.deadline.at_ms : null, cards_left: cardsLeft,
    hand: v.hand ? [...v.hand.ids] : null, trick_plays: trickPlays,
  };
}

/** The table a client renders, from a brief alone (`client.state`). */
export function stateOf(match, brief, player) {
  if (!brief) {
    return { match, version: null, phase: null, turn: null, your_turn: false, hand: null, trick: 0,
      trick_plays: [], last_play: null, deadline_ms: null, cards_left: {} };
  }
  return {
    match, version: brief.version, phase: brief.phase, turn: brief.turn,
    your_turn: brief.phase === "playing" && player !== null && brief.turn === player,
    hand: brief.hand === undefined || brief.hand === null ? null : [...brief.hand], trick: brief.trick,
    trick_plays: brief.trick_plays || (brief.last_play ? [brief.last_play] : []), last_play: brief.last_play,
    deadline_ms: brief.deadline_ms, cards_left: { ...brief.cards_left },
  };
}

/** A token bucket like the gateway's (gateway/limits.py): `rate` a second up to `burst`. */
class Bucket {
  constructor(rate, burst) {
    this.rate = rate;
    this.burst = burst;
    this.tokens = burst;
    this.at = Date.now();
  }
  refill(now) {
    if (now > this.at) {
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.at) / 1000) * this.rate);
      this.at = now;
    }
  }
  /** ms until a token is there (0: now) */
  wait(now) {
    this.refill(now);
    return this.tokens >= 1 ? 0 : Math.ceil(((1 - this.tokens) / this.rate) * 1000);
  }
  take(now) {
    this.refill(now);
    this.tokens -= 1;
  }
  empty(now) {
    this.refill(now);
    this.tokens = Math.min(this.tokens, 0);
  }
}

/** what the client keeps of the gateway's rates: 90 % of them, one message of the burst spare */
function buckets(limits) {
  const syncBurst = Math.max(1, Math.floor(Math.max(1, limits.sync_rate)) - 1);
  return {
    messages: new Bucket(limits.rate * 0.9, Math.max(1, Math.floor(limits.burst) - 1)),
    syncs: new Bucket(limits.sync_rate * 0.9, syncBurst),
  };
}

export class Client {
  /**
   * @param {object} o
   * @param {string} o.url        ws(s)://host:port/ws
   * @param {string} o.token      a JWT (`shuangkou token`)
   * @param {Function} [o.WebSocket]  a WebSocket class (Node < 22: `import WebSocket from "ws"`)
   * @param {"message"|"query"} [o.auth]  how the token is given (default "message")
   * @param {number|null} [o.version]     resume after this match version
   * @param {string|null} [o.match]       the match of that version (say it: another match's is not applied)
   * @param {boolean} [o.reconnect]       reconnect after a drop (default true)
   */
  constructor({ url, token, WebSocket: WS = globalThis.WebSocket, auth = "message", version = null,
    match = null, reconnect = true } = {}) {
    if (!url) throw new TypeError("Client: url is required");
    if (!token) throw new TypeError("Client: token is required");
    if (!WS) throw new TypeError("Client: no WebSocket here: pass one (Node < 22: `WebSocket` from the ws package)");
    this.url = url;
    this.token = token;
    this.WS = WS;
    this.auth = auth;
    this.reconnect = reconnect;
    this.version = version;   // the newest version seen of `match` (resume)
    this.match = match;       // the match of the newest update
    this.brief = null;        // the newest brief
    this.view = null;         // the newest full view
    this.state = stateOf(null, null, null);  // the table from the newest brief (render from it)
    this.lobby = null;        // the newest lobby message
    this.rating = null;       // the newest rating message (ranked rooms)
    this.player = null;       // from the welcome
    this.role = null;
    this.link = "idle";       // the socket: connecting, open, reconnecting, refused, closed
    this.limits = { ...DEFAULT_LIMITS };  // the gateway's, from its welcome
    this.pending = new Map(); // command_id -> the command sent (until the message that answers it)
    this.handlers = new Map();
    this.ws = null;
    this.queue = [];          // commands not sent yet (not open, or paced)
    this.retries = new Map(); // command_id -> how often a rate_limited refusal sent it again
    this.buckets = buckets(this.limits);
    this.pumpTimer = null;
    this.delay = 250;
    this.retryTimer = null;   // the reconnect waiting after a drop
    this.openedAt = null;     // when the socket opened (STABLE_MS)
    this.closedByUs = false;
    this.acking = false;      // this socket was sent a Seen (the first update on a socket is acknowledged)
    this.watching = null;     // the match a Watch asked for (a spectator's reconnect asks again)
    this.left = new Set();    // matches moved on from: a late answer about one does not take the client back
  }

  on(name, fn) {
    if (!this.handlers.has(name)) this.handlers.set(name, new Set());
    this.handlers.get(name).add(fn);
    return () => this.off(name, fn);
  }

  off(name, fn) {
    const set = this.handlers.get(name);
    if (set) set.delete(fn);
  }

  /** resolves with the next `name` event's payload (optionally the first that `test` accepts) */
  once(name, test = () => true) {
    return new Promise((resolve) => {
      const off = this.on(name, (x) => {
        if (!test(x)) return;
        off();
        resolve(x);
      });
    });
  }

  emit(name, payload) {
    for (const fn of [...(this.handlers.get(name) || [])]) {
      try {
        fn(payload);
      } catch (err) {
        if (name !== "error") this.emit("error", err);
      }
    }
  }

  setState(link, detail) {
    this.link = link;
    const payload = { state: link, ...(detail || {}) };
    this.emit("state", payload);
    this.emit("link", payload);
  }

  connect() {
    this.closedByUs = false;
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);  // asked for now: not again later
    this.retryTimer = null;
    const old = this.ws;
    this.ws = null;  // its events are no longer ours
    if (old) old.close(1000, "reconnecting");
    this.setState("connecting");
    let url = this.url;
    const token = this.token;
    if (this.auth === "query") {
      const sep = url.includes("?") ? "&" : "?";
      url += `${sep}token=${encodeURIComponent(token)}`;
      if (this.version !== null) url += `&version=${this.version}`;
      if (this.version !== null && this.match) url += `&match=${encodeURIComponent(this.match)}`;
    }
    const ws = new this.WS(url);
    this.ws = ws;
    ws.addEventListener("open", () => {
      if (this.ws !== ws) return;
      if (this.auth !== "query") {
        const a = { type: "Auth", token: this.token };
        if (this.version !== null) a.version = this.version;
        if (this.version !== null && this.match) a.match = this.match;
        ws.send(JSON.stringify(a));
      } else if (this.token !== token) {  // renewed while connecting: the query carried the old one
        ws.send(JSON.stringify({ type: "Auth", token: this.token, command_id: newId() }));
      }
      this.openedAt = Date.now();
      this.acking = false;  // acknowledgements are per socket
      // the gateway keeps a token's budget across its sockets: a new socket is not a full one
      this.resend();
      this.setState("open");
      this.pump();
    });
    ws.addEventListener("message", (ev) => {
      if (this.ws !== ws) return;
      let msg;
      try {
        msg = JSON.parse(typeof ev.data === "string" ? ev.data : String(ev.data));
      } catch (e) {
        return;
      }
      this.receive(msg);
    });
    ws.addEventListener("close", (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      const info = { code: ev.code, reason: ev.reason || "" };
      const final = this.closedByUs || !this.reconnect || FINAL_CLOSE_CODES.includes(ev.code);
      this.emit("closed", { ...info, reconnecting: !final });
      if (this.closedByUs) {
        this.setState("closed", info);
      } else if (final) {
        this.setState("refused", info);
      } else {
        this.setState("reconnecting", info);
        if (this.openedAt !== null && Date.now() - this.openedAt >= STABLE_MS) this.delay = 250;
        this.openedAt = null;
        if (ev.code === RATE_CLOSE_CODE) this.delay = Math.max(this.delay, 2000);  // over the rate: slower
        // up to a quarter sooner: clients dropped together do not all come back at once
        const wait = Math.round(this.delay * (0.75 + 0.25 * Math.random()));
        this.retryTimer = setTimeout(() => {
          this.retryTimer = null;
          if (!this.closedByUs) this.connect();
        }, wait);
        this.delay = Math.min(this.delay * 2, 5000);
      }
    });
    ws.addEventListener("error", () => {});  // a close event follows
    return this;
  }

  close() {
    this.closedByUs = true;
    if (this.pumpTimer !== null) clearTimeout(this.pumpTimer);
    this.pumpTimer = null;
    if (this.retryTimer !== null) {  // between a drop and its reconnect: closed now
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
      this.setState("closed", { code: 1000, reason: "bye" });
    }
    if (this.ws) this.ws.close(1000, "bye");
  }

  /** On a new socket: the moves and views whose answer the drop may have taken, sent again with
   * their command_id (docs/PROTOCOL.md §5: never applied twice) -- a Play or Pass within its
   * turn, a Ready while seated, a Sync for the view, a Watch; the other commands' answers (a
   * Sync's with a version too: the reconnect resumes from the newest version) are not waited for. */
  resend() {
    const queued = new Set(this.queue.map((m) => m.command_id));
    const again = [];
    for (const [id, m] of this.pending) {
      if (queued.has(id)) continue;
      if ((m.type === "Sync" && m.version === undefined) || m.type === "Watch"
        || (RETRIED_TYPES.includes(m.type) && this.stillCounts(m))) {
        again.push(m);
      } else {
        this.answered(id);
      }
    }
    this.queue.unshift(...again);
  }

  /** Whether a Play, Pass or Ready sent earlier still makes sense: a move within the turn, a Ready while seated. */
  stillCounts(command) {
    const b = this.brief;
    if (command.type === "Ready") return !!this.lobby && this.lobby.state === "seated";
    return !!b && b.phase === "playing" && b.turn === this.player
      && (b.deadline_ms === null || b.deadline_ms === undefined || Date.now() < b.deadline_ms);
  }

  /** one server message (from the socket) */
  receive(msg) {
    switch (msg.kind) {
      case "welcome":
        this.player = msg.player;
        this.role = msg.role;
        if (typeof msg.rate === "number" && typeof msg.burst === "number" && typeof msg.sync_rate === "number") {
          const changed = msg.rate !== this.limits.rate || msg.burst !== this.limits.burst
            || msg.sync_rate !== this.limits.sync_rate;
          this.limits = { rate: msg.rate, burst: msg.burst, sync_rate: msg.sync_rate };
          if (changed && !msg.renewed) this.buckets = buckets(this.limits);
        }
        this.state = stateOf(this.match, this.brief, this.player);
        // a spectator's new socket watches again (a resume's version is for players)
        if (!msg.renewed && this.role !== "player" && this.watching) this.watch(this.watching);
        this.emit("welcome", msg);
        break;
      case "update": {
        if (msg.command_id) this.answered(msg.command_id);
        const past = msg.match !== this.match && this.left.has(msg.match);  // a late answer about it
        if (msg.match !== this.match && !past) this.moveTo(msg.match);
        if (!past && (this.version === null || msg.version >= this.version)) {  // older: a redelivery
          if (msg.view) this.view = msg.view;
          this.brief = briefOf(msg) || this.brief;
          this.version = msg.version;
          this.state = stateOf(this.match, this.brief, this.player);
        }
        for (const [id, c] of this.pending) if (c.type === "Watch" && c.match === msg.match) this.answered(id);
        this.emit("update", { message: msg, brief: this.brief, view: this.view, events: msg.events || [] });
        this.seen(msg);
        break;
      }
      case "rejected": {
        const command = msg.command_id ? this.pending.get(msg.command_id) || null : null;
        if (msg.code === "rate_limited" && command && this.retry(command)) break;
        if (msg.command_id) this.answered(msg.command_id);
        if (msg.view && msg.view.match_id && msg.view.match_id === (msg.match || msg.view.match_id)
          && (msg.view.match_id === this.match || !this.left.has(msg.view.match_id))) {
          if (msg.view.match_id !== this.match || this.version === null || msg.view.version >= this.version) {
            if (msg.view.match_id !== this.match) this.moveTo(msg.view.match_id);
            this.view = msg.view;
            this.version = msg.view.version;
            this.brief = briefOf({ version: msg.view.version, view: msg.view });
            this.state = stateOf(this.match, this.brief, this.player);
          }
        }
        this.emit("rejected", { message: msg, command, code: msg.code, reason: msg.reason });
        break;
      }
      case "ack": {
        const command = this.pending.get(msg.command_id) || null;
        this.answered(msg.command_id);
        this.emit("ack", { message: msg, command });
        break;
      }
      case "lobby":
        if (msg.command_id) this.pending.delete(msg.command_id);  // the Join or Leave it answers
        this.lobby = msg;
        // seated at another match: the version kept is of the match before (?version= names no match)
        if (msg.state === "seated" && msg.match && msg.match !== this.match) {
          if (this.match) this.remember(this.match);
          this.left.delete(msg.match);
          this.version = null;
        }
        // a Join or a Leave is answered by the lobby's next message (they carry no command_id)
        for (const [id, c] of this.pending) if (c.type === "Join" || c.type === "Leave") this.answered(id);
        this.emit("lobby", msg);
        break;
      case "settled":
        this.emit("settled", msg);
        break;
      case "say":
        // a quick phrase or emote said at the table; the sender's copy carries its command_id
        if (msg.command_id) this.answered(msg.command_id);
        this.emit("say", msg);
        break;
      case "private_table":
      case "series":
        // a private table's code (the owner's answer) and its series' news (issue 39)
        if (msg.command_id) this.answered(msg.command_id);
        this.emit(msg.kind, msg);
        break;
      case "rating":
        // a settled match of a ranked room moved this player's rating (docs/RANKED.md)
        this.rating = msg;
        this.emit("rating", msg);
        break;
      default:
        this.emit("message", msg);
    }
  }

  /** Acknowledge a read update (`Seen`, no answer): the first on this socket, then those that
   * start this player's clock (their turn with a deadline, or the ready clock before the deal). */
  seen(msg) {
    if (this.role !== "player" || typeof msg.version !== "number" || !msg.match) return;
    const b = msg.brief;
    const starts = !!b && b.deadline_ms !== null && b.deadline_ms !== undefined
      && (b.turn === this.player || b.phase === "new" || b.phase === "seating");
    if (!starts && this.acking) return;
    this.acking = true;
    this.queue.push({ type: "Seen", version: msg.version, match: msg.match, command_id: newId() });
    this.pump();
  }

  answered(commandId) {
    this.pending.delete(commandId);
    this.retries.delete(commandId);
  }

  /** The current match becomes `match` (an update of it, or a view a refusal carried). */
  moveTo(match) {
    if (this.match) this.remember(this.match);
    this.left.delete(match);
    this.match = match;
    this.view = null;
    this.brief = null;
    this.version = null;
  }

  /** `match` was moved on from (the last few are kept). */
  remember(match) {
    this.left.delete(match);
    this.left.add(match);
    if (this.left.size > 8) this.left.delete(this.left.values().next().value);
  }

  /** A move refused `rate_limited`: queue it again (the same command_id) at the front, after the
   * bucket refills, while it still makes sense -- a Play or Pass within the turn, a Ready while
   * seated; false when it is given up (the refusal is then reported). */
  retry(command) {
    if (!RETRIED_TYPES.includes(command.type) || this.closedByUs) return false;
    const tries = (this.retries.get(command.command_id) || 0) + 1;
    if (tries > 50 || !this.stillCounts(command)) return false;
    const now = Date.now();
    this.retries.set(command.command_id, tries);
    this.buckets.messages.empty(now);  // the gateway says the socket is over: wait for a refill
    this.queue.unshift(command);
    this.emit("retry", { command, tries, delay_ms: this.buckets.messages.wait(now) });
    this.pump();
    return true;
  }

  /** Send what is queued as the buckets allow: moves and other commands first, then Syncs. */
  pump() {
    if (this.pumpTimer !== null) {
      clearTimeout(this.pumpTimer);
      this.pumpTimer = null;
    }
    while (this.queue.length && this.ws && this.ws.readyState === (this.WS.OPEN ?? 1)) {
      const now = Date.now();
      let i = this.queue.findIndex((m) => m.type !== "Sync");
      let wait = this.buckets.messages.wait(now);
      if (i < 0) {
        i = 0;
        wait = Math.max(wait, this.buckets.syncs.wait(now));
      }
      if (wait > 0) {
        this.pumpTimer = setTimeout(() => { this.pumpTimer = null; this.pump(); }, wait);
        return;
      }
      const [m] = this.queue.splice(i, 1);
      this.buckets.messages.take(now);
      if (m.type === "Sync") this.buckets.syncs.take(now);
      this.ws.send(JSON.stringify(m));
    }
  }

  /** Send a client message; returns its command_id (made here when absent).  It is queued and
   * paced (pump); a Sync like one already queued is that one (its command_id is returned). */
  send(msg) {
    const m = { ...msg };
    if (m.type === "Sync") {
      const same = this.queue.find((q) => q.type === "Sync" && q.version === m.version && q.match === m.match);
      if (same) return same.command_id;
    }
    if (m.type === "Watch") {
      this.watching = m.match;
      this.left.delete(m.match);
      // one Watch of a match at a time (a page that watches again on each welcome, as client.js does)
      for (const [id, c] of this.pending) if (c.type === "Watch" && c.match === m.match) return id;
    }
    if (!m.command_id) m.command_id = newId();
    if (m.type !== "Auth") this.pending.set(m.command_id, m);  // a renewal is answered by a welcome
    this.queue.push(m);
    this.pump();
    return m.command_id;
  }

  /** A fresh token for the same player before the old one's exp (docs/PROTOCOL.md §8): the open
   * socket sends it as an Auth and keeps its place (the answer is a welcome with renewed: true);
   * a reconnect uses it too. */
  renew(token) {
    this.token = token;
    const open = this.ws && this.ws.readyState === (this.WS.OPEN ?? 1);
    if (open) {
      this.buckets.messages.take(Date.now());  // the gateway counts it like any message
      this.ws.send(JSON.stringify({ type: "Auth", token, command_id: newId() }));
    }
  }

  /** the version a Play or Pass is decided on: the newest one seen (null: none yet) */
  expected() {
    return this.version;
  }

  join(room) { return this.send({ type: "Join", room }); }
  ready(clientSeed) { return this.send(clientSeed ? { type: "Ready", client_seed: clientSeed } : { type: "Ready" }); }
  /** cards: an array of ids or a notation string ("3 3"); o: {reading_kind, reading_rank, expected_version} */
  play(cardsOrText, o = {}) {
    const m = { type: "Play", ...(typeof cardsOrText === "string" ? { text: cardsOrText } : { cards: [...cardsOrText] }) };
    if (o.reading_kind) m.reading_kind = o.reading_kind;
    if (o.reading_rank) m.reading_rank = o.reading_rank;
    const v = o.expected_version !== undefined ? o.expected_version : this.expected();
    if (v !== null && v !== undefined) m.expected_version = v;
    return this.send(m);
  }
  pass(o = {}) {
    const m = { type: "Pass" };
    const v = o.expected_version !== undefined ? o.expected_version : this.expected();
    if (v !== null && v !== undefined) m.expected_version = v;
    return this.send(m);
  }
  /** the view again; with a version (of `match`, by default the current one), the updates after it */
  sync(version, match = this.match) {
    if (version === undefined) return this.send({ type: "Sync" });
    return this.send(match ? { type: "Sync", version, match } : { type: "Sync", version });
  }
  watch(match) { return this.send({ type: "Watch", match }); }
  leave() { return this.send({ type: "Leave" }); }
  escape() { return this.send({ type: "Escape" }); }
  requestTrustee() { return this.send({ type: "RequestTrustee" }); }
  cancelTrustee() { return this.send({ type: "CancelTrustee" }); }
  /** a quick phrase or emote id (PHRASES, EMOTES) to the table: both players and the spectators see it */
  say(phrase) { return this.send({ type: "Say", phrase }); }
  /** open a private table for a series of `hands` (4, 8, 16) hands: answered by a private_table event */
  createTable(room, hands, o = {}) {
    return this.send({ type: "CreateTable", room, hands, spectators: !!o.spectators, bots: !!o.bots });
  }
  /** take the second seat of a private table by its 6-character code */
  joinTable(code) { return this.send({ type: "JoinTable", code: String(code).trim().toUpperCase() }); }
  cancelTable() { return this.send({ type: "CancelTable" }); }
  requestEnd() { return this.send({ type: "RequestEnd" }); }
  voteEnd(agree) { return this.send({ type: "VoteEnd", agree: !!agree }); }
}
