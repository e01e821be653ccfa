// client.js without a gateway (node:test, a fake WebSocket): auth in the message or the query,
// resume with the last version after a drop, the brief and view it keeps, expected_version on
// Play and Pass, rejections matched to their commands, no reconnect after a final close code,
// and the cards helper over all 108 ids.  Run by tests/test_schemas.py: node --test tests/js/client_test.mjs
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, FINAL_CLOSE_CODES, NUM_CARDS, RANKS, cards } from "../../gateway/static/js/client.js";

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
}

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
  assert.equal(second.url, "ws://gw/ws?token=T&version=9");
  second.open();
  second.close(4409, "replaced by a newer connection of the same player");
  assert.equal(closed.at(-1).reconnecting, false);
  assert.ok(FINAL_CLOSE_CODES.includes(4401));
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(FakeSocket.all.length, 2);
  assert.equal(c.state, "refused");
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
