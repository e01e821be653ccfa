#!/usr/bin/env node
// Two friends at a private table with client.js over a real gateway (tests/test_private_node.py):
//
//   node tests/js/private_pair.mjs --url ws://HOST:PORT/ws --token-a JWT --token-b JWT --room R
//
// A opens a 4-hand table (client.createTable) and gets its code as a `private_table` event; B joins
// by that code (client.joinTable); both are seated; A asks to end (client.requestEnd), B sees the
// vote as a `series` event and agrees (client.voteEnd); both get `series` finished (dissolved).
// Prints one JSON line: what each saw, then exits 0 (1 on a timeout).
import { Client } from "../../gateway/static/js/client.js";

const opts = {};
for (let i = 2; i < process.argv.length; i += 2) opts[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];

async function webSocketClass() {
  if (globalThis.WebSocket) return globalThis.WebSocket;  // Node 22+
  const { createRequire } = await import("node:module");
  return createRequire(new URL("../../examples/client/package.json", import.meta.url))("ws");
}

const WS = await webSocketClass();
const timer = setTimeout(() => { console.error("private_pair: timed out"); process.exit(1); }, 60_000);
const a = new Client({ url: opts.url, token: opts["token-a"], WebSocket: WS });
const b = new Client({ url: opts.url, token: opts["token-b"], WebSocket: WS });
const seated = (c) => c.once("lobby", (m) => m.state === "seated");
const series = (c, state) => c.once("series", (m) => m.state === state);

a.connect();
b.connect();
await Promise.all([a.once("welcome"), b.once("welcome")]);
const made = a.once("private_table");
const createId = a.createTable(opts.room, 4);
const created = await made;
const seatA = seated(a);
const seatB = seated(b);
b.joinTable(created.code.toLowerCase());
const [sa, sb] = await Promise.all([seatA, seatB]);
const voteAtB = series(b, "vote");
const voteAtA = series(a, "vote");
const endId = a.requestEnd();
const vote = await voteAtB;
const own = await voteAtA;
const doneA = series(a, "finished");
const doneB = series(b, "finished");
b.voteEnd(true);
const [finishedA, finishedB] = await Promise.all([doneA, doneB]);
clearTimeout(timer);
console.log(JSON.stringify({
  created, createId, pending_after: a.pending.has(createId) || a.pending.has(endId),
  seated: [sa, sb], vote, own, endId, finished: [finishedA, finishedB],
}));
a.close();
b.close();
process.exit(0);
