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
// * resume: on a drop it reconnects with a growing delay and gives the last version it saw, so the
//   gateway sends every later update (no gap, no duplicate); `sync()` asks for the view again;
// * it keeps the newest `brief` (always current: render from it) and the newest full `view`
//   (`view.version` may be older than `brief.version`: the events between them are in the updates);
// * it sends commands with a `command_id` and, for Play and Pass, the `expected_version` of the
//   table it last saw; a `rejected` is matched to the command that caused it (`command`).
// Events (`on(name, fn)`): update, lobby, settled, rejected, closed; plus welcome and state
// (the link: connecting, open, reconnecting, refused, closed).

export const RANKS = Object.freeze(["3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A", "2", "SJ", "BJ"]);
export const SUITS = Object.freeze(["S", "H", "C", "D"]);
export const DECK_SIZE = 54;
export const NUM_CARDS = 108;
/** Close codes after which reconnecting cannot help (docs/PROTOCOL.md §8, "Close codes"). */
export const FINAL_CLOSE_CODES = Object.freeze([4400, 4401, 4403, 4409]);

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
  return {
    version: message.version, phase: v.phase, turn: v.turn, trick: v.trick,
    last_play: lp ? { player: lp.player, cards: lp.cards, reading: lp.reading } : null,
    deadline_ms: v.deadline ? v.deadline.at_ms : null, cards_left: cardsLeft,
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
   * @param {boolean} [o.reconnect]       reconnect after a drop (default true)
   */
  constructor({ url, token, WebSocket: WS = globalThis.WebSocket, auth = "message", version = null,
    reconnect = true } = {}) {
    if (!url) throw new TypeError("Client: url is required");
    if (!token) throw new TypeError("Client: token is required");
    if (!WS) throw new TypeError("Client: no WebSocket here: pass one (Node < 22: `WebSocket` from the ws package)");
    this.url = url;
    this.token = token;
    this.WS = WS;
    this.auth = auth;
    this.reconnect = reconnect;
    this.version = version;   // the newest version seen of `match` (resume)
    this.match = null;        // the match of the newest update
    this.brief = null;        // the newest brief
    this.view = null;         // the newest full view
    this.lobby = null;        // the newest lobby message
    this.player = null;       // from the welcome
    this.role = null;
    this.state = "idle";
    this.pending = new Map(); // command_id -> the command sent (until its update or rejection)
    this.handlers = new Map();
    this.ws = null;
    this.queue = [];
    this.delay = 250;
    this.closedByUs = false;
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

  setState(state, detail) {
    this.state = state;
    this.emit("state", { state, ...(detail || {}) });
  }

  connect() {
    this.closedByUs = false;
    this.setState("connecting");
    let url = this.url;
    if (this.auth === "query") {
      const sep = url.includes("?") ? "&" : "?";
      url += `${sep}token=${encodeURIComponent(this.token)}`;
      if (this.version !== null) url += `&version=${this.version}`;
    }
    const ws = new this.WS(url);
    this.ws = ws;
    ws.addEventListener("open", () => {
      if (this.ws !== ws) return;
      if (this.auth !== "query") {
        const a = { type: "Auth", token: this.token };
        if (this.version !== null) a.version = this.version;
        ws.send(JSON.stringify(a));
      }
      this.delay = 250;
      this.setState("open");
      for (const m of this.queue.splice(0)) ws.send(JSON.stringify(m));
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
        setTimeout(() => { if (!this.closedByUs) this.connect(); }, this.delay);
        this.delay = Math.min(this.delay * 2, 5000);
      }
    });
    ws.addEventListener("error", () => {});  // a close event follows
    return this;
  }

  close() {
    this.closedByUs = true;
    if (this.ws) this.ws.close(1000, "bye");
  }

  /** one server message (from the socket) */
  receive(msg) {
    switch (msg.kind) {
      case "welcome":
        this.player = msg.player;
        this.role = msg.role;
        this.emit("welcome", msg);
        break;
      case "update": {
        if (msg.command_id) this.pending.delete(msg.command_id);
        if (msg.match !== this.match) {
          this.match = msg.match;
          this.view = null;
          this.brief = null;
          this.version = null;
        }
        if (this.version === null || msg.version >= this.version) {  // older: a redelivery
          if (msg.view) this.view = msg.view;
          this.brief = briefOf(msg) || this.brief;
          this.version = msg.version;
        }
        this.emit("update", { message: msg, brief: this.brief, view: this.view, events: msg.events || [] });
        break;
      }
      case "rejected": {
        const command = msg.command_id ? this.pending.get(msg.command_id) || null : null;
        if (msg.command_id) this.pending.delete(msg.command_id);
        if (msg.view && msg.view.match_id && msg.view.match_id === (msg.match || msg.view.match_id)) {
          if (msg.view.match_id !== this.match || this.version === null || msg.view.version >= this.version) {
            this.match = msg.view.match_id;
            this.view = msg.view;
            this.version = msg.view.version;
            this.brief = briefOf({ version: msg.view.version, view: msg.view });
          }
        }
        this.emit("rejected", { message: msg, command, code: msg.code, reason: msg.reason });
        break;
      }
      case "lobby":
        if (msg.command_id) this.pending.delete(msg.command_id);  // the Join or Leave it answers
        this.lobby = msg;
        this.emit("lobby", msg);
        break;
      case "settled":
        this.emit("settled", msg);
        break;
      default:
        this.emit("message", msg);
    }
  }

  /** Send a client message; returns its command_id (made here when absent). */
  send(msg) {
    const m = { ...msg };
    if (!m.command_id) m.command_id = newId();
    if (m.type !== "Auth") this.pending.set(m.command_id, m);
    const open = this.ws && this.ws.readyState === (this.WS.OPEN ?? 1);
    if (open) this.ws.send(JSON.stringify(m));
    else this.queue.push(m);
    return m.command_id;
  }

  /** A fresh token for the same player before the old one's exp (docs/PROTOCOL.md §8): the open
   * socket sends it as an Auth and keeps its place (the answer is a welcome with renewed: true);
   * a reconnect uses it too. */
  renew(token) {
    this.token = token;
    const open = this.ws && this.ws.readyState === (this.WS.OPEN ?? 1);
    if (open) this.ws.send(JSON.stringify({ type: "Auth", token, command_id: newId() }));
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
  sync(version) { return this.send(version === undefined ? { type: "Sync" } : { type: "Sync", version }); }
  watch(match) { return this.send({ type: "Watch", match }); }
  leave() { return this.send({ type: "Leave" }); }
  escape() { return this.send({ type: "Escape" }); }
  requestTrustee() { return this.send({ type: "RequestTrustee" }); }
  cancelTrustee() { return this.send({ type: "CancelTrustee" }); }
}
