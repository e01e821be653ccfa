#!/usr/bin/env node
// A bot that plays one match through the gateway with client.js (docs/PROTOCOL.md §8), in Node ≥ 18:
//
//   cd examples/client && npm install        # the ws package, for Node before 22 (no global WebSocket)
//   node examples/client/node-bot.mjs --url ws://127.0.0.1:8080/ws --token "$(shuangkou token alice --secret-file F)" [--room points]
//
// It joins the room, readies, plays a naive strategy (lead the lowest single; beat a single with the
// lowest higher one; otherwise pass), and prints the settlement as one JSON line (`scores`,
// `breakdown`, `balances`, `match`), then exits 0.  Against `shuangkou gateway --bots` a trustee
// bot sits opposite after a few seconds.  --record FILE writes every message received as a JSON line;
// --timeout S gives up (exit 1) after S seconds (default 600).
import { writeFileSync, appendFileSync } from "node:fs";
import { Client, RANKS, cards } from "../../gateway/static/js/client.js";

function args(argv) {
  const out = { room: "points", timeout: 600, record: null };
  for (let i = 0; i < argv.length; i += 1) {
    const k = argv[i];
    const v = argv[i + 1];
    if (k === "--url") out.url = v;
    else if (k === "--token") out.token = v;
    else if (k === "--room") out.room = v;
    else if (k === "--record") out.record = v;
    else if (k === "--timeout") out.timeout = Number(v);
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
  console.error("usage: node-bot.mjs --url ws://HOST:PORT/ws --token JWT [--room points] [--record FILE] [--timeout S]");
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
let hand = [];         // its card ids (from the newest view, minus its own plays since)
let handVersion = -1;
let acted = null;      // the brief version it last acted on

// the naive strategy: the cards to play on this brief, or null to pass
function choose(brief) {
  const sorted = cards.sort(hand);
  if (!sorted.length) return null;
  const lp = brief.last_play;
  if (!lp) return [sorted[0]];  // lead: the lowest single
  if (lp.reading.kind !== "single") return null;
  const beat = RANKS.indexOf(lp.reading.rank);
  const higher = sorted.find((id) => cards.rank(id) > beat);
  return higher === undefined ? null : [higher];
}

// a move of ours on its way (until its update or rejection): the next briefs may still show our turn
const moving = () => [...client.pending.values()].some((c) => c.type === "Play" || c.type === "Pass");

function act(brief, again = false) {
  if (!brief || brief.phase !== "playing" || brief.turn !== client.player || match === null) return;
  if ((acted === brief.version && !again) || moving()) return;
  acted = brief.version;
  const play = again ? null : choose(brief);
  if (play) client.play(play);
  else if (brief.last_play) client.pass();
  else client.play([cards.sort(hand)[0]]);
}

client.on("welcome", (m) => {
  record(m);
  if (m.role !== "player") fail(`a ${m.role} token cannot play`);
  if (!match) client.join(opts.room);
});
client.on("lobby", (m) => {
  record(m);
  if (m.state === "removed") fail(`removed from the table: ${m.reason}`);
  if (m.state === "seated" && m.match && match === null) {
    match = m.match;
    client.ready();
  }
});
client.on("update", ({ message, brief }) => {
  record(message);
  if (message.match !== match) return;
  if (message.view && message.view.hand && message.version >= handVersion) {
    hand = [...message.view.hand.ids];
    handVersion = message.version;
  } else if (message.version > handVersion) {
    for (const e of message.events) {
      if (e.type === "CardsPlayed" && e.player === client.player) hand = hand.filter((c) => !e.cards.includes(c));
    }
    handVersion = message.version;
  }
  act(brief);
});
client.on("rejected", ({ message, command }) => {
  record(message);
  if (message.match && message.match !== match) return;
  if (message.view && message.view.hand) {
    hand = [...message.view.hand.ids];
    handVersion = message.view.version;
  }
  // refused (e.g. does_not_beat): decide again on the current table, passing when we may
  if (command && (command.type === "Play" || command.type === "Pass")) act(client.brief, command.type === "Play");
});
client.on("settled", (m) => {
  record(m);
  if (m.match !== match) return;
  console.log(JSON.stringify({ match: m.match, scores: m.scores, balances: m.balances, breakdown: m.breakdown }));
  client.close();
  process.exit(0);
});
client.on("closed", ({ code, reason, reconnecting }) => {
  if (!reconnecting) fail(`the gateway closed the socket: ${code} ${reason}`);
});
client.on("error", (err) => fail(`a handler failed: ${err && err.stack ? err.stack : err}`));

setTimeout(() => fail(`no settlement in ${opts.timeout} s`), opts.timeout * 1000).unref();
client.connect();
