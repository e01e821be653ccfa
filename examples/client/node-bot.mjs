#!/usr/bin/env node
// A bot that plays one match through the gateway with client.js (docs/PROTOCOL.md §8), in Node ≥ 18:
//
//   cd examples/client && npm install        # the ws package, for Node before 22 (no global WebSocket)
//   node examples/client/node-bot.mjs --url ws://127.0.0.1:8080/ws --token "$(shuangkou token alice --secret-file F)" [--room points]
//
// It joins the room, readies (docs/PROTOCOL.md §8's snippet: Ready on every `seated` note, which is
// idempotent), plays a naive strategy (lead the lowest single; beat a single with the lowest higher
// one; otherwise pass) reading nothing but `client.state` (the hand, the trick's plays, the turn:
// from the briefs, no folding), and prints the settlement as one JSON line (`scores`, `breakdown`,
// `balances`, `match`), then exits 0.  Against `shuangkou gateway --bots` a trustee bot sits opposite
// after a few seconds.  --record FILE writes every message received as a JSON line; --timeout S gives
// up (exit 1) after S seconds (default 600); --sync-burst N sends N Syncs at once on its first turn
// before it moves (client.js paces them and sends the move first); --reconnect-after N drops the
// socket after its N-th move (client.js reconnects, the lobby's seated note comes again).
// Private tables (issue 39): --create-table HANDS opens a table for HANDS (4, 8, 16) hands instead of
// joining the room's queue and prints its code as a JSON line (`code`, `link`, `series_id`) as soon as
// it has it; --join-table CODE takes the second seat of a friend's table by its code.  Either plays the
// first hand; its settlement line carries `series` (the running totals).
// client.js acknowledges the updates it read (`Seen`): the first on each socket and those that start
// this player's clock, so a clock whose update a dying gateway handed over unread pauses.
import { writeFileSync, appendFileSync } from "node:fs";
import { Client, RANKS, cards } from "../../gateway/static/js/client.js";

function args(argv) {
  const out = { room: "points", timeout: 600, record: null, syncBurst: 0, reconnectAfter: 0, createTable: 0,
    joinTable: null };
  for (let i = 0; i < argv.length; i += 1) {
    const k = argv[i];
    const v = argv[i + 1];
    if (k === "--url") out.url = v;
    else if (k === "--token") out.token = v;
    else if (k === "--room") out.room = v;
    else if (k === "--record") out.record = v;
    else if (k === "--timeout") out.timeout = Number(v);
    else if (k === "--sync-burst") out.syncBurst = Number(v);
    else if (k === "--reconnect-after") out.reconnectAfter = Number(v);
    else if (k === "--create-table") out.createTable = Number(v);
    else if (k === "--join-table") out.joinTable = v;
    else if (k === "--help" || k === "-h") out.help = true;
    else {
      console.error(`unknown argument ${k}`);
      process.exit(2);
    }
    i += 1;
  }
  return out;
}

const opts = args(process.argv.slice(2));
if (opts.help || !opts.url || !opts.token) {
  console.error("usage: node-bot.mjs --url ws://HOST:PORT/ws --token JWT [--room points] [--record FILE] [--timeout S] "
    + "[--sync-burst N] [--reconnect-after N] [--create-table HANDS | --join-table CODE]");
  process.exit(opts.help ? 0 : 2);
}

async function webSocketClass() {
  if (globalThis.WebSocket) return globalThis.WebSocket;  // Node 22+
  try {
    return (await import("ws")).default;
  } catch (err) {
    console.error("no WebSocket: use Node 22+, or run `npm install` in examples/client (the ws package)");
    process.exit(2);
  }
}

const fail = (why) => {
  console.error(`node-bot: ${why}`);
  process.exit(1);
};

const client = new Client({ url: opts.url, token: opts.token, WebSocket: await webSocketClass() });
if (opts.record) writeFileSync(opts.record, "");
const record = (m) => { if (opts.record) appendFileSync(opts.record, JSON.stringify(m) + "\n"); };

let match = null;      // the match this bot plays
let acted = null;      // the state version it last acted on
let moves = 0;         // its moves sent
let burst = opts.syncBurst;

// the naive strategy: the cards to play now, or null to pass (client.state only)
function choose(s) {
  const sorted = cards.sort(s.hand || []);
  if (!sorted.length) return null;
  const last = s.trick_plays.at(-1);  // the play to beat: the trick's last (none: we lead)
  if (!last) return [sorted[0]];  // lead: the lowest single
  if (last.reading.kind !== "single") return null;
  const beat = RANKS.indexOf(last.reading.rank);
  const higher = sorted.find((id) => cards.rank(id) > beat);
  return higher === undefined ? null : [higher];
}

// a move of ours on its way (until its update or rejection): the next states may still show our turn
const moving = () => [...client.pending.values()].some((c) => c.type === "Play" || c.type === "Pass");

function act(again = false) {
  const s = client.state;
  if (!s.your_turn || s.match !== match || match === null) return;
  if ((acted === s.version && !again) || moving()) return;
  acted = s.version;
  if (burst > 0) {  // a burst of Syncs before the move: paced and folded, the move still goes first
    for (let i = 0; i < burst; i += 1) client.sync();
    burst = 0;
  }
  const play = again ? null : choose(s);
  if (play) client.play(play);
  else if (s.trick_plays.length) client.pass();
  else client.play([cards.sort(s.hand)[0]]);
  moves += 1;
}

// a drop mid-match once the N-th move is answered: client.js reconnects, resumes from its version
let dropped = false;
function maybeDrop() {
  if (!opts.reconnectAfter || dropped || moves < opts.reconnectAfter || moving() || !client.ws) return;
  dropped = true;
  client.ws.close();
}

client.on("welcome", (m) => {
  record(m);
  if (m.role !== "player") fail(`a ${m.role} token cannot play`);
  if (match) return;
  if (opts.createTable) client.createTable(opts.room, opts.createTable);
  else if (opts.joinTable) client.joinTable(opts.joinTable);
  else client.join(opts.room);
});
let told = false;
client.on("private_table", (m) => {
  record(m);
  if (told) return;  // a reconnect's greeting says it again
  told = true;
  console.log(JSON.stringify({ code: m.code, link: m.link, series_id: m.series_id }));
});
client.on("series", (m) => record(m));
client.on("lobby", (m) => {
  record(m);
  if (m.state === "removed") fail(`removed from the table: ${m.reason}`);
  if (m.state === "seated" && m.match && match === null) match = m.match;
});
// docs/PROTOCOL.md §8: Ready on every seated note (again after a reconnect: answered ack mid-match)
client.on("lobby", (m) => { if (m.state === "seated") client.ready(); });
client.on("ack", ({ message }) => record(message));
client.on("message", (m) => record(m));
client.on("update", ({ message }) => {
  record(message);
  act();
  maybeDrop();
});
client.on("rejected", ({ message, command }) => {
  record(message);
  if (command && (command.type === "CreateTable" || command.type === "JoinTable")) {
    fail(`${command.type} refused: ${message.code}`);
  }
  if (message.match && message.match !== match) return;
  // refused (e.g. does_not_beat): decide again on the current table, passing when we may
  if (command && (command.type === "Play" || command.type === "Pass")) act(command.type === "Play");
});
client.on("settled", (m) => {
  record(m);
  if (m.match !== match) return;
  console.log(JSON.stringify({ match: m.match, scores: m.scores, balances: m.balances, breakdown: m.breakdown,
    ...(m.series ? { series: m.series } : {}) }));
  client.close();
  process.exit(0);
});
client.on("closed", ({ code, reason, reconnecting }) => {
  if (!reconnecting) fail(`the gateway closed the socket: ${code} ${reason}`);
});
client.on("error", (err) => fail(`a handler failed: ${err && err.stack ? err.stack : err}`));

setTimeout(() => fail(`no settlement in ${opts.timeout} s`), opts.timeout * 1000).unref();
client.connect();
