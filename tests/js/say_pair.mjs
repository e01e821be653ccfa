#!/usr/bin/env node
// Two players say quick phrases to each other with client.js over a real gateway (tests/test_say_node.py):
//
//   node tests/js/say_pair.mjs --url ws://HOST:PORT/ws --token-a JWT --token-b JWT --room R
//
// Both join the room; once seated, A says "nice_cards" (client.say) and B waits for it as a `say`
// event; B answers "emote_cool"; A says again at once and gets `rejected` rate_limited with
// retry_after_ms; A says an id that is not a phrase (client.send, no check) and gets unknown_phrase.
// Prints one JSON line: what each saw, then exits 0 (1 on a timeout).
import { Client, EMOTES, PHRASES, SAY_INTERVAL_MS } from "../../gateway/static/js/client.js";

const opts = {};
for (let i = 2; i < process.argv.length; i += 2) opts[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];

async function webSocketClass() {
  if (globalThis.WebSocket) return globalThis.WebSocket;  // Node 22+
  // the ws package of examples/client (npm ci there: .ci/run does it)
  const { createRequire } = await import("node:module");
  return createRequire(new URL("../../examples/client/package.json", import.meta.url))("ws");
}

const WS = await webSocketClass();
let stage = "connect";
const timer = setTimeout(() => { console.error(`say_pair: timed out at ${stage}`); process.exit(1); }, 60_000);
const a = new Client({ url: opts.url, token: opts["token-a"], WebSocket: WS });
const b = new Client({ url: opts.url, token: opts["token-b"], WebSocket: WS });
const seated = (c) => c.once("lobby", (m) => m.state === "seated");
// the deal may reach a client before the other client is seated: look at client.match first
const inMatch = (c, id) => (c.match === id ? Promise.resolve() : c.once("update", (u) => u.message.match === id));
const saidBy = (c, player, phrase) => c.once("say", (m) => m.player === player && m.phrase === phrase);
const refused = (c, id) => c.once("rejected", (e) => e.message.command_id === id);

a.connect();
b.connect();
await Promise.all([a.once("welcome"), b.once("welcome")]);
stage = "seat";
const seatA = seated(a);
const seatB = seated(b);
a.join(opts.room);
b.join(opts.room);
const [la] = await Promise.all([seatA, seatB]);
stage = "deal";
await Promise.all([inMatch(a, la.match), inMatch(b, la.match)]);
stage = "say";

const atB = saidBy(b, a.player, "nice_cards");
const atA = saidBy(a, a.player, "nice_cards");
const sid = a.say("nice_cards");
const heard = await atB;
const own = await atA;
stage = "answer";
const back = saidBy(a, b.player, "emote_cool");
b.say("emote_cool");
const answer = await back;
stage = "refusals";
const tooSoon = a.say("thanks");
const limited = await refused(a, tooSoon);
const badId = a.send({ type: "Say", phrase: "no such phrase" });
const unknown = await refused(a, badId);
clearTimeout(timer);
console.log(JSON.stringify({
  catalogue: { phrases: PHRASES.length, emotes: EMOTES.length, interval_ms: SAY_INTERVAL_MS },
  heard, own, sid, answer, pending_after: a.pending.has(sid),
  limited: limited.message, unknown: unknown.message,
}));
a.close();
b.close();
process.exit(0);
