// Compiles against gateway/static/js/client.d.ts with tsc --strict (tests/test_schemas.py): the
// generated types are valid TypeScript and say what a front end reads.
import { Client, cards, type Brief, type ServerMessage } from "../../../gateway/static/js/client.js";

const c = new Client({ url: "ws://127.0.0.1:8080/ws", token: "JWT" });
c.on("update", ({ brief, view, message }) => {
  const b: Brief | null = brief;
  if (b && b.turn === c.player && (b.last_play === null || b.last_play.reading.kind === "single")) {
    c.play([cards.sort(view?.hand?.ids ?? [])[0]], { expected_version: b.version });
  }
  for (const e of message.events) if (e.type === "CardsPlayed") console.log(e.player, e.reading.top, e.cards);
});
c.on("rejected", ({ code, command }) => { if (code === "stale") console.log(command?.type); });
// issue 36: the table from the briefs alone, the ack of an idempotent Ready, any other message, renew
c.on("update", () => {
  const s = c.state;
  if (s.your_turn && s.hand && s.hand.length && s.trick_plays.length === 0) c.play([s.hand[0]]);
});
c.on("ack", ({ command }) => console.log(command?.type));
c.on("message", (m) => console.log(m));
c.on("retry", ({ command, tries, delay_ms }) => console.log(command.type, tries, delay_ms));
c.renew("JWT2");
c.on("settled", (m) => console.log(m.scores, m.breakdown.X, m.balances));
c.on("closed", ({ code, reconnecting }) => console.log(code, reconnecting));
const queued: ServerMessage = { kind: "lobby", state: "queued", room: "points", table: null, match: null, reason: null,
  bot_level: null };
console.log(queued);
c.connect();
