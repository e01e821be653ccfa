// client.js without a gateway (node:test, a fake WebSocket): auth in the message or the query,
// resume with the last version after a drop, the brief and view it keeps, client.state from the
// briefs alone, expected_version on Play and Pass, rejections and acks matched to their commands,
// every pending entry cleared by its answer, pacing under the welcome's rates and the retry of a
// rate-limited move, the acknowledgements (Seen) of the updates read, no reconnect after a final close code, the cards helper over all 108 ids,
// client.d.ts declaring exactly what the module exports, and the reconnect's edges: close() or connect()
// while a reconnect waits, the growing delay, unanswered moves sent again, a spectator watching again,
// a late answer about the match before, a token renewed during the handshake.
// Run by tests/test_client_js.py: node --test tests/js/client_test.mjs
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { mock, test } from "node:test";
import * as clientModule from "../../gateway/static/js/client.js";
import { Client, FINAL_CLOSE_CODES, NUM_CARDS, RANKS, STABLE_MS, cards } from "../../gateway/static/js/client.js";

class FakeSocket {
  static OPEN = 1;
  static all = [];
  constructor(url) {
    this.url = url;
    this.sent = [];
    this.readyState = 0;
    this.listeners = {};
    FakeSocket.all.push(this);
  }
  addEventListener(name, fn) { (this.listeners[name] = this.listeners[name] || []).push(fn); }
  fire(name, ev = {}) { for (const fn of this.listeners[name] || []) fn(ev); }
  open() { this.readyState = 1; this.fire("open"); }
  send(text) { this.sent.push(JSON.parse(text)); }
  receive(msg) { this.fire("message", { data: JSON.stringify(msg) }); }
  close(code = 1000, reason = "") { this.readyState = 3; this.fire("close", { code, reason }); }
  drop(code = 1006) { this.close(code, ""); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const welcomeOf = (player, role = "player") => ({ kind: "welcome", player, role, room: null, gateway: "g",
  rate: 1000, burst: 1000, sync_rate: 1000 });

const brief = (version, turn = "alice", lastPlay = null) => ({
  version, phase: "playing", turn, trick: 0, last_play: lastPlay, deadline_ms: 1, cards_left: { alice: 27, bob: 27 },
});
const update = (version, extra = {}) => ({
  kind: "update", match: "t1-1", version, command_id: null, events: [], view: null, brief: brief(version), ...extra,
});

test("auth as the first message, commands queued until open, the brief kept, expected_version sent", () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket });
  c.connect();
  const id = c.join("points");  // before open: queued
  const ws = FakeSocket.all[0];
  ws.open();
  assert.deepEqual(ws.sent[0], { type: "Auth", token: "T" });
  assert.equal(ws.sent[1].type, "Join");
  assert.equal(ws.sent[1].command_id, id);
  ws.receive({ kind: "welcome", player: "alice", role: "player", room: null, gateway: "g" });
  assert.equal(c.player, "alice");
  const seen = [];
  c.on("update", (u) => seen.push(u.brief.version));
  ws.receive(update(6, { view: { match_id: "t1-1", version: 6 } }));
  ws.receive(update(7));
  ws.receive(update(5));  // an old redelivery: the newest brief stays
  assert.deepEqual(seen, [6, 7, 7]);
  assert.equal(c.brief.version, 7);
  assert.equal(c.view.version, 6);
  c.play([0, 54]);
  c.pass();
  assert.deepEqual(ws.sent.slice(-2).map((m) => [m.type, m.expected_version]), [["Play", 7], ["Pass", 7]]);
  assert.deepEqual(ws.sent.at(-2).cards, [0, 54]);
  c.play("3 3", { expected_version: null, reading_kind: "pair" });
  assert.equal("expected_version" in ws.sent.at(-1), false);
  assert.equal(ws.sent.at(-1).text, "3 3");
});

test("a rejection is matched to its command; its view becomes the current one", () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket });
  c.connect();
  FakeSocket.all[0].open();
  FakeSocket.all[0].receive(update(6));
  const id = c.pass();
  let got = null;
  c.on("rejected", (r) => { got = r; });
  FakeSocket.all[0].receive({ kind: "rejected", command_id: id, code: "cannot_pass", reason: "you lead",
    view: { match_id: "t1-1", version: 8, phase: "playing", turn: "alice", trick: 1, last_play: null, deadline: null,
      seats: [{ player: "alice", cards_left: 27 }, { player: "bob", cards_left: 26 }] }, match: "t1-1" });
  assert.equal(got.command.type, "Pass");
  assert.equal(got.code, "cannot_pass");
  assert.equal(c.pending.has(id), false);
  assert.equal(c.brief.version, 8);
  assert.deepEqual(c.brief.cards_left, { alice: 27, bob: 26 });
});

test("after a drop it reconnects and resumes with the last version; a final close code ends it", async () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket, auth: "query" });
  const closed = [];
  c.on("closed", (e) => closed.push(e));
  c.connect();
  const first = FakeSocket.all[0];
  assert.equal(first.url, "ws://gw/ws?token=T");
  first.open();
  first.receive(update(9));
  first.close(1006, "");
  assert.deepEqual(closed.at(-1), { code: 1006, reason: "", reconnecting: true });
  await new Promise((r) => setTimeout(r, 300));
  const second = FakeSocket.all[1];
  assert.equal(second.url, "ws://gw/ws?token=T&version=9&match=t1-1");
  second.open();
  second.close(4409, "replaced by a newer connection of the same player");
  assert.equal(closed.at(-1).reconnecting, false);
  assert.ok(FINAL_CLOSE_CODES.includes(4401));
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(FakeSocket.all.length, 2);
  assert.equal(c.link, "refused");
});

test("seated at the next match, it reconnects without the version of the match before", async () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket, auth: "query" });
  c.connect();
  const first = FakeSocket.all[0];
  first.open();
  first.receive(update(9));
  first.receive({ kind: "lobby", state: "seated", room: "r", table: "t1", match: "t1-1", reason: null });
  first.close(1006, "");
  await new Promise((r) => setTimeout(r, 300));
  const second = FakeSocket.all[1];
  assert.equal(second.url, "ws://gw/ws?token=T&version=9&match=t1-1");  // the same match: after 9
  second.open();
  second.receive({ kind: "lobby", state: "seated", room: "r", table: "t1", match: "t1-2", reason: null });
  second.close(1006, "");
  await new Promise((r) => setTimeout(r, 600));
  const third = FakeSocket.all[2];
  assert.equal(third.url, "ws://gw/ws?token=T");  // 9 was of t1-1: the current view instead
  third.open();
  third.receive(update(2, { match: "t1-2" }));
  assert.equal(c.version, 2);
  c.close();
});

test("the Auth message of a reconnect names the version and its match", async () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket });
  c.connect();
  FakeSocket.all[0].open();
  FakeSocket.all[0].receive(update(9));
  FakeSocket.all[0].close(1006, "");
  await new Promise((r) => setTimeout(r, 300));
  FakeSocket.all[1].open();
  assert.deepEqual(FakeSocket.all[1].sent[0], { type: "Auth", token: "T", version: 9, match: "t1-1" });
  FakeSocket.all[1].receive({ kind: "welcome", player: "alice", role: "player", room: null, gateway: "g",
    rate: 1000, burst: 1000, sync_rate: 1000 });
  c.sync(9);
  c.sync(3, "t1-0");
  c.sync();
  assert.deepEqual(FakeSocket.all[1].sent.slice(1).map(({ type, version, match }) => [type, version, match]),
    [["Sync", 9, "t1-1"], ["Sync", 3, "t1-0"], ["Sync", undefined, undefined]]);
  c.close();
  // a page that kept its version across a reload names its match from the start
  const d = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket, auth: "query", version: 4, match: "t2-1" });
  d.connect();
  assert.equal(FakeSocket.all.at(-1).url, "ws://gw/ws?token=T&version=4&match=t2-1");
  d.close();
});

test("the cards helper names every id as docs/PROTOCOL.md's table does", () => {
  const labels = new Set();
  for (let id = 0; id < NUM_CARDS; id += 1) {
    const i = cards.info(id);
    assert.equal(i.deck, id < 54 ? 0 : 1);
    assert.equal(i.rank_label, RANKS[i.rank]);
    labels.add(`${cards.label(id)}/${i.deck}`);
  }
  assert.equal(labels.size, 108);
  assert.deepEqual([52, 53, 106, 107].map(cards.label), ["SJ", "BJ", "SJ", "BJ"]);
  assert.equal(cards.label(7 * 4 + 1), "10H");
  assert.deepEqual(cards.sort([53, 0, 54, 4]), [0, 54, 4, 53]);
  assert.throws(() => cards.info(108), RangeError);
});

function opened(limits = { rate: 1000, burst: 1000, sync_rate: 1000 }) {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket });
  c.connect();
  const ws = FakeSocket.all[0];
  ws.open();
  ws.receive({ kind: "welcome", player: "alice", role: "player", room: null, gateway: "g", ...limits });
  return { c, ws };
}

test("client.state holds the hand, the trick's plays and the turn from the briefs alone", () => {
  const { c, ws } = opened();
  const play = { player: "bob", cards: [40], reading: { kind: "single", rank: "K", xiang: null } };
  ws.receive(update(8, { brief: { ...brief(8, "alice", { player: "bob", cards: [40], reading: { kind: "single",
    rank: "K", size: 1 } }), hand: [0, 4, 53], trick_plays: [play] } }));
  assert.deepEqual(c.state.hand, [0, 4, 53]);
  assert.deepEqual(c.state.trick_plays, [play]);
  assert.equal(c.state.turn, "alice");
  assert.equal(c.state.your_turn, true);
  assert.equal(c.state.match, "t1-1");
  ws.receive(update(9, { brief: { ...brief(9, "bob"), hand: [4, 53], trick_plays: [] } }));
  assert.equal(c.state.your_turn, false);
  assert.deepEqual(c.state.hand, [4, 53]);
  // an old gateway's update with a view only: the same fields read off the view
  ws.receive(update(10, { brief: undefined, view: { match_id: "t1-1", version: 10, phase: "playing", turn: "alice",
    trick: 3, deadline: null, seats: [{ player: "alice", cards_left: 2 }], hand: { ids: [4, 53], text: "" },
    last_play: play, history: [{ trick: 2, ...play }, { trick: 3, ...play }] } }));
  assert.deepEqual(c.state.trick_plays, [play]);
  assert.deepEqual(c.state.hand, [4, 53]);
});

test("every pending entry is cleared by the message that answers it; an ack names its command", () => {
  const { c, ws } = opened();
  const join = c.join("points");
  ws.receive({ kind: "lobby", state: "queued", room: "points", table: null, match: null, reason: null });
  assert.equal(c.pending.has(join), false);
  const ready = c.ready();
  let acked = null;
  c.on("ack", (a) => { acked = a; });
  ws.receive({ kind: "ack", command_id: ready });
  assert.equal(acked.command.type, "Ready");
  assert.equal(c.pending.has(ready), false);
  const watch = c.watch("t9-1");
  ws.receive({ ...update(3), match: "t9-1" });
  assert.equal(c.pending.has(watch), false);
  const sync = c.sync();
  ws.receive(update(4, { command_id: sync }));
  assert.equal(c.pending.size, 0);
});

test("it paces under the welcome's rates, moves before queued Syncs, one Sync for many", () => {
  mock.timers.enable({ apis: ["setTimeout", "Date"], now: 1_000_000 });
  try {
    const { c, ws } = opened({ rate: 20, burst: 4, sync_rate: 2 });
    const before = ws.sent.length;
    const syncs = new Set();
    for (let i = 0; i < 60; i += 1) syncs.add(c.sync());
    c.play([0]);
    c.pass();
    c.play([4]);
    // the first Sync and a burst of 3 (the gateway's 4, one spare); the other 59 Syncs are one
    assert.deepEqual(ws.sent.slice(before).map((m) => m.type), ["Sync", "Play", "Pass"]);
    assert.equal(syncs.size, 2);
    mock.timers.tick(60);  // 18 a second (90 % of 20): the next token after 56 ms
    assert.deepEqual(ws.sent.slice(before).map((m) => m.type), ["Sync", "Play", "Pass", "Play"]);
    mock.timers.tick(400);  // the Sync bucket (1.8 a second) has no token yet
    assert.equal(ws.sent.length - before, 4);
    mock.timers.tick(200);
    assert.deepEqual(ws.sent.slice(before).map((m) => m.type), ["Sync", "Play", "Pass", "Play", "Sync"]);
    assert.equal(c.queue.length, 0);
    // a renewed welcome with other rates: the client keeps to the new ones
    ws.receive({ kind: "welcome", player: "alice", role: "player", room: null, gateway: "g", rate: 1, burst: 2,
      sync_rate: 1 });
    assert.deepEqual(c.limits, { rate: 1, burst: 2, sync_rate: 1 });
  } finally {
    mock.timers.reset();
  }
});

test("a rate-limited Play is sent again with its command_id within the turn, else reported", () => {
  mock.timers.enable({ apis: ["setTimeout", "Date"], now: 1_000_000 });
  try {
    const { c, ws } = opened({ rate: 50, burst: 5, sync_rate: 2 });
    ws.receive(update(6, { brief: { ...brief(6, "alice"), deadline_ms: Date.now() + 10000, hand: [0],
      trick_plays: [] } }));
    const id = c.play([0]);
    const rejected = [];
    const retried = [];
    c.on("rejected", (r) => rejected.push(r));
    c.on("retry", (r) => retried.push(r));
    ws.receive({ kind: "rejected", command_id: id, code: "rate_limited", reason: "slow down", view: null,
      match: "t1-1" });
    assert.equal(rejected.length, 0);
    assert.equal(retried.length, 1);
    assert.ok(c.pending.has(id));
    assert.equal(ws.sent.filter((m) => m.command_id === id).length, 1);  // not before the bucket refills
    mock.timers.tick(retried[0].delay_ms);
    const again = ws.sent.filter((m) => m.command_id === id);
    assert.equal(again.length, 2);
    assert.deepEqual(again[1], again[0]);
    // the turn is over (the clock played): the next refusal is reported, nothing is sent again
    ws.receive(update(7, { brief: { ...brief(7, "bob"), hand: [], trick_plays: [] } }));
    ws.receive({ kind: "rejected", command_id: id, code: "rate_limited", reason: "slow down", view: null,
      match: "t1-1" });
    assert.equal(rejected.length, 1);
    assert.equal(c.pending.has(id), false);
    mock.timers.tick(1000);
    assert.equal(ws.sent.filter((m) => m.command_id === id).length, 2);
    // a rate-limited Ready is sent again while seated; a Join is not (it is reported)
    ws.receive({ kind: "lobby", state: "seated", room: "points", table: "t1", match: "t1-2", reason: null });
    const ready = c.ready();
    ws.receive({ kind: "rejected", command_id: ready, code: "rate_limited", reason: "slow", view: null, match: null });
    mock.timers.tick(1000);
    assert.equal(ws.sent.filter((m) => m.command_id === ready).length, 2);
    const join = c.join("points");
    ws.receive({ kind: "rejected", command_id: join, code: "rate_limited", reason: "slow", view: null, match: null });
    assert.equal(rejected.at(-1).command.type, "Join");
  } finally {
    mock.timers.reset();
  }
});

test("Seen acknowledges the first update on each socket and every one that starts your clock, players only", () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket });
  c.connect();
  const ws = FakeSocket.all[0];
  ws.open();
  ws.receive({ kind: "welcome", player: "alice", role: "player", room: null, gateway: "g" });
  const seen = () => ws.sent.filter((m) => m.type === "Seen").map((m) => [m.match, m.version]);
  ws.receive(update(6, { brief: brief(6, "bob") }));  // the first on this socket: acknowledged
  ws.receive(update(7, { brief: brief(7, "bob") }));  // bob's clock: not
  ws.receive(update(8));  // alice's turn with a deadline: acknowledged
  ws.receive(update(9, { brief: { ...brief(9), deadline_ms: null } }));  // no clock: not
  ws.receive(update(1, { match: "t1-2", brief: { ...brief(1, null), phase: "seating" } }));  // the ready clock
  assert.deepEqual(seen(), [["t1-1", 6], ["t1-1", 8], ["t1-2", 1]]);
  assert.equal(ws.sent.filter((m) => m.type === "Seen").every((m) => !c.pending.has(m.command_id)), true);
  mock.timers.enable({ apis: ["setTimeout", "Date"] });
  try {
    ws.close(1006, "gone");  // a new socket: its first update is acknowledged again
    mock.timers.tick(300);
  } finally {
    mock.timers.reset();
  }
  const ws2 = FakeSocket.all[1];
  ws2.open();
  ws2.receive({ kind: "welcome", player: "alice", role: "player", room: null, gateway: "g" });
  ws2.receive(update(2, { match: "t1-2", brief: brief(2, "bob") }));
  assert.deepEqual(ws2.sent.filter((m) => m.type === "Seen").map((m) => m.version), [2]);
  // a spectator acknowledges nothing
  const s = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket });
  s.connect();
  const ws3 = FakeSocket.all.at(-1);
  ws3.open();
  ws3.receive({ kind: "welcome", player: "watcher", role: "spectator", room: null, gateway: "g" });
  ws3.receive(update(8, { brief: brief(8, "watcher") }));
  assert.equal(ws3.sent.some((m) => m.type === "Seen"), false);
});

test("client.d.ts declares every export, method, field and event of client.js", () => {
  const dts = readFileSync(new URL("../../gateway/static/js/client.d.ts", import.meta.url), "utf8");
  const src = readFileSync(new URL("../../gateway/static/js/client.js", import.meta.url), "utf8");
  const declared = new Set([...dts.matchAll(/^export declare (?:const|function|class) (\w+)/gm)].map((m) => m[1]));
  assert.deepEqual([...declared].sort(), Object.keys(clientModule).sort());
  const body = dts.slice(dts.indexOf("export declare class Client {"));
  const members = new Set([...body.matchAll(/(?:^|[;{\s])(?:readonly\s+)?(\w+)(?:<[^>]*>)?\??[(:]/g)].map((m) => m[1]));
  const methods = Object.getOwnPropertyNames(Client.prototype).filter((n) => n !== "constructor");
  for (const m of methods) assert.ok(members.has(m), `client.d.ts lacks Client.${m}`);
  FakeSocket.all = [];
  const fields = Object.keys(new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket }))
    .filter((f) => !["WS", "auth", "reconnect", "handlers", "ws", "retries", "buckets", "pumpTimer", "delay",
      "closedByUs", "retryTimer", "openedAt"].includes(f));
  for (const f of fields) assert.ok(members.has(f), `client.d.ts lacks Client.${f}`);
  const events = dts.slice(dts.indexOf("export interface ClientEvents {"));
  const eventNames = new Set([...events.slice(0, events.indexOf("\n}")).matchAll(/(\w+): /g)].map((m) => m[1]));
  const emitted = new Set([...src.matchAll(/this\.emit\("(\w+)"/g)].map((m) => m[1]));
  for (const e of emitted) assert.ok(eventNames.has(e), `ClientEvents lacks ${e}`);
  assert.ok(members.has("renew") && eventNames.has("message") && eventNames.has("ack"));
});

test("close() between a drop and its reconnect ends the link closed, with no socket made after", async () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket });
  c.connect();
  FakeSocket.all[0].open();
  FakeSocket.all[0].drop();
  assert.equal(c.link, "reconnecting");
  c.close();
  await sleep(400);
  assert.equal(FakeSocket.all.length, 1);
  assert.equal(c.link, "closed");
});

test("connect() while a reconnect waits makes one socket, and connect() on an open one replaces it", async () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket, auth: "query" });
  c.connect();
  FakeSocket.all[0].open();
  FakeSocket.all[0].drop();
  c.connect();  // "retry now"
  FakeSocket.all[1].open();
  await sleep(400);  // the drop's own reconnect would have come by now
  assert.equal(FakeSocket.all.length, 2);
  c.connect();
  assert.deepEqual(FakeSocket.all.map((s) => s.readyState), [3, 3, 0]);
  assert.equal(c.link, "connecting");
  c.close();
});

test("a gateway that accepts and closes at once is retried ever more slowly; a stable socket starts over", async () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket });
  c.connect();
  const at = [];
  for (let i = 0; i < 4; i += 1) {
    const ws = FakeSocket.all.at(-1);
    at.push(Date.now());
    ws.open();
    ws.receive(welcomeOf("alice"));
    ws.drop(1013);  // Redis away: welcome, then closed
    while (FakeSocket.all.at(-1) === ws) await sleep(5);
  }
  const gaps = at.slice(1).map((t, i) => t - at[i]);
  for (let i = 1; i < gaps.length; i += 1) assert.ok(gaps[i] > gaps[i - 1], `gaps ${gaps.join(", ")} ms`);
  const ws = FakeSocket.all.at(-1);
  ws.open();
  c.openedAt = Date.now() - STABLE_MS;  // it stayed open long enough
  ws.drop();
  assert.equal(c.delay, 500);  // 250 for this reconnect, then doubling again
  c.close();
});

test("a late answer about the match before does not take the client back to it", () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket });
  c.connect();
  const ws = FakeSocket.all[0];
  ws.open();
  ws.receive(welcomeOf("alice"));
  ws.receive(update(60));
  const sid = c.sync();
  ws.receive({ kind: "lobby", state: "seated", room: "r", table: "t1", match: "t1-2", reason: null, command_id: null });
  ws.receive(update(3, { match: "t1-2", view: { match_id: "t1-2", version: 3 } }));
  ws.receive(update(6, { match: "t1-2" }));
  const got = [];
  c.on("update", (u) => got.push(u.message.match));
  ws.receive(update(61, { command_id: sid, view: { match_id: "t1-1", version: 61, phase: "finished" } }));
  ws.receive({ kind: "rejected", command_id: null, code: "match_over", reason: "over", match: "t1-1",
    view: { match_id: "t1-1", version: 61, phase: "finished", seats: [] } });
  assert.deepEqual(got, ["t1-1"]);  // still told
  assert.equal(c.pending.has(sid), false);  // and answered
  assert.deepEqual([c.match, c.version, c.state.match, c.view.match_id], ["t1-2", 6, "t1-2", "t1-2"]);
  c.pass();
  assert.equal(ws.sent.at(-1).expected_version, 6);
});

test("a queued Sync is one with another only when both name the same version of the same match", () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket });
  c.connect();  // not open: they queue
  const a = c.sync(5, "t1-2");
  assert.notEqual(c.sync(5, "t1-1"), a);
  assert.equal(c.sync(5, "t1-2"), a);
});

test("a spectator's reconnect watches its match again, once, also when its page asks on each welcome", async () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "S", WebSocket: FakeSocket });
  c.on("welcome", (w) => { if (!w.renewed) c.send({ type: "Watch", match: "t1-1" }); });  // as table.js does
  c.connect();
  FakeSocket.all[0].open();
  FakeSocket.all[0].receive(welcomeOf("sam", "spectator"));
  assert.equal(FakeSocket.all[0].sent.filter((m) => m.type === "Watch").length, 1);
  FakeSocket.all[0].receive(update(9, { view: { match_id: "t1-1", version: 9 } }));
  FakeSocket.all[0].drop();
  await sleep(300);
  const ws = FakeSocket.all[1];
  ws.open();
  ws.receive(welcomeOf("sam", "spectator"));
  assert.deepEqual(ws.sent.filter((m) => m.type === "Watch").map((m) => m.match), ["t1-1"]);
  c.close();
});

test("on a new socket the moves a drop left unanswered go again with their ids; other commands are not waited for", async () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "T", WebSocket: FakeSocket });
  c.connect();
  FakeSocket.all[0].open();
  FakeSocket.all[0].receive(welcomeOf("alice"));
  FakeSocket.all[0].receive({ kind: "lobby", state: "seated", room: "r", table: "t1", match: "t1-1", reason: null,
    command_id: null });
  const rid = c.ready();
  const said = c.say("thanks");
  FakeSocket.all[0].drop();
  await sleep(300);
  const ws = FakeSocket.all[1];
  ws.open();
  assert.deepEqual(ws.sent.slice(1).map((m) => [m.type, m.command_id]), [["Ready", rid]]);
  assert.equal(c.pending.has(said), false);
  ws.receive({ kind: "ack", command_id: rid });
  assert.equal(c.pending.size, 0);
  c.close();
});

test("auth 'query': a token renewed while the socket connects is sent as an Auth once it opens", () => {
  FakeSocket.all = [];
  const c = new Client({ url: "ws://gw/ws", token: "OLD", WebSocket: FakeSocket, auth: "query" });
  c.connect();
  c.renew("NEW");
  const ws = FakeSocket.all[0];
  assert.equal(ws.url, "ws://gw/ws?token=OLD");
  ws.open();
  assert.equal(ws.sent[0].type, "Auth");
  assert.equal(ws.sent[0].token, "NEW");
  c.close();
});
