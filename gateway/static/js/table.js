// The table page: join a room, play a match, settle, play the next one; or watch (/watch/<id>).
// Renders from the view the gateway sends (docs/PROTOCOL.md "WebSocket"); uses events for
// notices and the play log.  Testability contract (issue 15): hand cards data-card, buttons
// data-action, data-opponent-count, data-status, data-settlement, data-your-turn, table cards
// data-table-card (never data-card).
import { api, claims, clientConfig, devToken, forgetToken, storedToken, tokenFromHost, tokenFromUrl } from "./auth.js";
import { cardElement, sortCards } from "./cards.js";
import { Client } from "./client.js";
import { randomClientSeed, verifyDeal } from "./fair.js";
import { BOMB_KINDS, KOU, REMOVED_REASON, TRUSTEE_REASON, describe, eventReading, modeWords, readingWords } from "./words.js";

const $ = (sel) => document.querySelector(sel);
const root = $("#table");
const watchPath = window.location.pathname.match(/^\/watch\/(.+)$/);

const S = {
  token: null, me: null, role: null,
  spectator: !!watchPath, watchMatch: watchPath ? decodeURIComponent(watchPath[1]) : null,
  link: null, linkState: "connecting",
  lobby: null, match: null, view: null, versions: {},
  selected: new Set(), readings: [], reading: 0, readingsSeq: 0,
  settled: null, balance: null, clock: { version: null, total: null }, offset: null,
  log: [], bombs: [], rooms: [], bombsSeen: {}, learned: {},
  fair: null,  // what this page saw of the current match's deal (renderFair, verify-deal)
};

function freshFair() {
  return { dealtHand: null, first: null, leadCard: null, played: {}, mySeed: null, readyId: null, result: null };
}

// ---- status, notices ------------------------------------------------------------------------

function setStatus(text, kind = "") {
  const el = $("[data-status]");
  el.textContent = text;
  el.dataset.kind = kind;
}

function notice(text, kind = "info", ms = 8000, tag = "") {
  const el = document.createElement("div");
  el.className = `notice ${kind}`;
  if (tag) el.dataset.notice = tag;
  el.textContent = text;
  $("#notices").prepend(el);
  while ($("#notices").children.length > 4) $("#notices").lastChild.remove();
  setTimeout(() => el.remove(), ms);
}

function show(id, on) {
  $(id).hidden = !on;
}

function nameOf(p) {
  return p === S.me ? `${p} (you 你)` : p;
}

// ---- the view -------------------------------------------------------------------------------

function seatsOf(view) {
  return (view && view.seats ? view.seats : []).filter(Boolean);
}

function badges(el, seat) {
  el.replaceChildren();
  const add = (text, cls) => {
    const b = document.createElement("span");
    b.className = `badge ${cls}`;
    b.textContent = text;
    el.append(b);
  };
  if (!seat) return;
  if (seat.trustee) add(`託管 trusteeship · ${TRUSTEE_REASON[seat.trustee] || seat.trustee}`, "trustee");
  if (seat.connected === false) add("斷線 disconnected", "offline");
  if (seat.escaped) add("逃跑 escaped", "offline");
  if (seat.timeouts) add(`超時 timeouts ${seat.timeouts}`, "warn");
  if (S.view && S.view.phase === "seating") add(seat.ready ? "準備 ready" : "not ready 未準備", seat.ready ? "ok" : "");
}

function contribText(view, player) {
  const c = view && view.contribution ? view.contribution[player] : null;
  if (!c || !c.xiang) return "貢獻 contribution: no bomb yet";
  const net = c.net > 0 ? `+${c.net}` : `${c.net}`;
  return `貢獻 contribution c=${c.c} · ${c.xiang}相 (${c.source}) · net ${net}`;
}

function renderHand(view) {
  const hand = $("#hand");
  const ids = view.hand ? sortCards(view.hand.ids) : [];
  for (const id of [...S.selected]) if (!ids.includes(id)) S.selected.delete(id);
  const canAct = view.phase === "playing";
  const frag = document.createDocumentFragment();
  for (const id of ids) {
    const el = cardElement(id, {
      tag: "button", wild: true,
      attrs: { "data-card": id, "aria-pressed": S.selected.has(id) ? "true" : "false", type: "button" },
    });
    el.disabled = !canAct;
    frag.append(el);
  }
  hand.replaceChildren(frag);
}

function renderSeat(prefix, seat, view, { count = "data-opponent-count" } = {}) {
  $(`#${prefix}-name`).textContent = seat ? nameOf(seat.player) + (seat.level !== undefined ? ` · level ${seat.level}, X=${seat.base}` : "") : "—";
  badges($(`#${prefix}-badges`), seat);
  $(`#${prefix}-contrib`).textContent = seat ? contribText(view, seat.player) : "";
  const turn = view.phase === "playing" && seat && view.turn === seat.player;
  $(`#${prefix}`).classList.toggle("on-turn", !!turn);
  if (prefix === "opp") {
    const n = seat ? seat.cards_left : 0;
    const el = $("#opp-count");
    el.removeAttribute("data-opponent-count");
    el.removeAttribute("data-seat-count");
    el.setAttribute(count, String(n));
    el.textContent = String(n);
    const backs = $("#opp-backs");
    backs.replaceChildren(...Array.from({ length: Math.min(n, 27) }, () => {
      const b = document.createElement("i");
      b.className = "back";
      return b;
    }));
  }
}

function renderLast(view) {
  const lp = view.last_play;
  const cards = $("#last-cards");
  if (!lp) {
    const lead = view.phase === "playing" ? (view.turn === S.me ? "You lead: play any combination. 你先出" : `${view.turn} leads 先出`) : "";
    $("#last-who").textContent = view.phase === "playing" ? `Trick ${view.trick} · new trick 新一輪` : "";
    cards.replaceChildren();
    $("#last-reading").textContent = lead;
    $("#last").dataset.lastKind = "";
    $("#last").dataset.lastRank = "";
    return;
  }
  $("#last-who").textContent = `${nameOf(lp.player)} played · trick ${view.trick}`;
  cards.replaceChildren(...lp.cards.map((id) => cardElement(id, { attrs: { "data-table-card": id }, small: true })));
  $("#last-reading").textContent = readingWords(lp.reading, lp.describe);
  $("#last").dataset.lastKind = lp.reading.kind;
  $("#last").dataset.lastRank = lp.reading.rank;
}

function renderLog() {
  const log = $("#log");
  log.replaceChildren(...S.log.slice(-6).map((t) => {
    const li = document.createElement("li");
    li.textContent = t;
    return li;
  }));
}

function serverNow() {
  return Date.now() + (S.offset || 0);
}

function tickClock() {
  const view = S.view;
  const clock = $("#clock");
  if (!view || !view.deadline || view.phase === "finished") {
    clock.hidden = true;
    return;
  }
  clock.hidden = false;
  const d = view.deadline;
  const left = Math.max(0, d.at_ms - serverNow());
  if (S.clock.version !== `${view.match_id}/${d.version}/${d.at_ms}`) {
    S.clock = { version: `${view.match_id}/${d.version}/${d.at_ms}`, total: Math.max(left, 1000) };
  }
  const secs = Math.ceil(left / 1000);
  $("#clock-n").textContent = d.kind === "trustee" ? `託管 auto-play in ${secs}s` : d.kind === "ready" ? `準備 ready within ${secs}s` : `${secs}s`;
  $("#clock-bar").style.width = `${Math.round((100 * left) / S.clock.total)}%`;
  clock.dataset.urgent = left < 5000 ? "true" : "false";
}

function statusFor(view) {
  const seats = seatsOf(view);
  if (view.phase === "seating" || view.phase === "new") {
    if (S.spectator) return "Players are sitting down 入座中";
    const mine = seats.find((s) => s.player === S.me);
    if (seats.length < 2) return "Waiting for an opponent to sit 等待對手入座";
    if (mine && !mine.ready) return "Press Ready to deal 按準備開始";
    return "Waiting for the opponent to be ready 等待對手準備";
  }
  if (view.phase === "playing") {
    if (S.spectator) return `${view.turn}'s turn 出牌中`;
    if (view.your_turn) {
      const me = seats.find((s) => s.player === S.me);
      if (me && me.trustee) return "Your turn — trusteeship plays for you 託管中";
      return view.leading ? "Your turn: lead any combination 輪到你出牌" : "Your turn: beat it or pass 輪到你：壓過或過";
    }
    return `${view.turn}'s turn 對手出牌中`;
  }
  if (view.phase === "finished" && view.result) {
    const r = view.result;
    const kou = KOU[r.kou] || r.kou;
    const who = r.winner === S.me ? "You win 你贏了" : S.spectator ? `${r.winner} wins` : `${r.winner} wins 你輸了`;
    return `${who} — ${kou}` + (S.settled && S.settled.match === view.match_id ? "" : " · settling 結算中…");
  }
  return "";
}

function render() {
  const view = S.view;
  const inMatch = !!view;
  show("#match", inMatch);
  show("#lobby", !S.spectator && !!S.me && S.role === "player" && !S.lobby && !inMatch);
  root.dataset.phase = view ? view.phase : (S.lobby ? `lobby-${S.lobby.state}` : "lobby");
  root.dataset.yourTurn = view && view.your_turn && !S.spectator ? "true" : "false";
  root.dataset.match = view ? view.match_id : (S.lobby && S.lobby.match) || "";
  root.dataset.version = view ? String(view.version) : "";
  $("#me-name").textContent = S.me ? `${S.spectator || S.role !== "player" ? "watching as" : ""} ${S.me}`.trim() : "";
  $("#me-balance").textContent = S.balance !== null ? `${S.view && S.view.mode === "wealth" ? "金幣 coins" : "積分 points"} ${S.balance}` : "";
  const ready = $("[data-action=ready]");
  let wantReady = false;
  if (!S.spectator && S.lobby && S.lobby.state === "seated") {
    const mine = view ? seatsOf(view).find((s) => s.player === S.me) : null;
    const sameMatch = view && view.match_id === S.lobby.match;
    wantReady = !sameMatch || view.phase === "finished" || ((view.phase === "seating" || view.phase === "new") && !(mine && mine.ready));
    if (sameMatch && view.phase === "finished" && !(S.settled && S.settled.match === view.match_id)) wantReady = false;
  }
  ready.hidden = !wantReady;
  if (!view) {
    if (S.lobby && S.lobby.state === "queued") setStatus(`Waiting for an opponent in ${modeWords(S.lobby.room)} 等待對手…`);
    else if (S.lobby && S.lobby.state === "seated") setStatus(`Seated at table ${S.lobby.table || ""} — press Ready 按準備`);
    return;
  }
  const seats = seatsOf(view);
  if (S.spectator) {
    renderSeat("opp", seats[0], view, { count: "data-seat-count" });
    const s1 = seats[1];
    $("#mine-name").textContent = s1 ? s1.player + (s1.level !== undefined ? ` · level ${s1.level}, X=${s1.base}` : "") : "—";
    badges($("#mine-badges"), s1);
    $("#mine-contrib").textContent = s1 ? contribText(view, s1.player) : "";
    $("#mine").classList.toggle("on-turn", !!(s1 && view.phase === "playing" && view.turn === s1.player));
    $("#mine-count-row").hidden = false;
    const n1 = s1 ? s1.cards_left : 0;
    $("#mine-count").textContent = String(n1);
    $("#mine-count").setAttribute("data-seat-count", String(n1));
    $("#mine-backs").replaceChildren(...Array.from({ length: Math.min(n1, 27) }, () => Object.assign(document.createElement("i"), { className: "back" })));
    $("#hand").replaceChildren();
    $("#hand").hidden = true;
    $("#play-actions").hidden = true;
  } else {
    const mine = seats.find((s) => s.player === S.me);
    const opp = seats.find((s) => s.player !== S.me);
    renderSeat("opp", opp, view);
    renderSeat("mine", mine, view);
    renderHand(view);
    const myTurn = canActNow(view);
    $("[data-action=play]").disabled = !myTurn || S.selected.size === 0;
    $("[data-action=pass]").disabled = !myTurn || view.leading;
    $("[data-action=hint]").disabled = !myTurn;
    const playing = view.phase === "playing";
    $("#play-actions").hidden = !playing;
    $("[data-action=trustee]").hidden = !playing || !mine || !!mine.trustee;
    $("[data-action=cancel-trustee]").hidden = !playing || !mine || !mine.trustee || !["requested", "timeouts"].includes(mine.trustee);
  }
  $("#turn-who").textContent = view.phase === "playing" && view.turn
    ? (view.turn === S.me && !S.spectator ? "Turn 輪到: you 你" : `Turn 輪到: ${view.turn}`) : "";
  renderLast(view);
  renderLog();
  renderReadings();
  renderFair(view);
  tickClock();
  if (S.linkState === "open") setStatus(statusFor(view), view.your_turn ? "turn" : "");
}

// ---- readings and hints -----------------------------------------------------------------------

// why a player left the table, in words (docs/PROTOCOL.md lobby `removed` reasons)
function removedReason(code) {
  if (!code) return "left the table 離開";
  if (String(code).startsWith("seat_refused")) return `seat refused 入座被拒 (${String(code).replace(/^seat_refused:?\s*/, "")})`;
  return REMOVED_REASON[code] || code;
}

// my turn, the match being played, and not in trusteeship (R-13.3: the trustee plays until I cancel)
function canActNow(view) {
  if (!view || !view.your_turn || view.phase !== "playing") return false;
  const mine = seatsOf(view).find((s) => s.player === S.me);
  return !(mine && mine.trustee);
}

function lastPlayFields() {
  const lp = S.view && S.view.last_play;
  // the room's rules (R-2.2 chain bombs to 2, R-5.4 heavenly bomb) decide how cards read
  const room = S.lobby && S.lobby.room ? { room: S.lobby.room } : {};
  return lp ? { ...room, last_cards: lp.cards, last_kind: lp.reading.kind, last_rank: lp.reading.rank }
    : { ...room, last_cards: null };
}

async function refreshReadings() {
  const seq = ++S.readingsSeq;
  if (S.selected.size === 0 || S.spectator) {
    S.readings = [];
    renderReadings();
    return;
  }
  try {
    const r = await api("/api/readings", S.token, { cards: [...S.selected], ...lastPlayFields() });
    if (seq !== S.readingsSeq) return;
    S.readings = r.readings;
    const legal = S.readings.filter((x) => x.beats);
    S.reading = legal.length ? S.readings.indexOf(legal[0]) : 0;
  } catch (e) {
    if (seq === S.readingsSeq) S.readings = [];
  }
  renderReadings();
}

function renderReadings() {
  const box = $("#readings");
  if (S.spectator || S.selected.size === 0) {
    box.replaceChildren();
    return;
  }
  const legal = S.readings.filter((x) => x.beats);
  if (!S.readings.length) {
    box.replaceChildren(Object.assign(document.createElement("span"), { className: "muted", textContent: "not a combination 不成牌型" }));
    return;
  }
  if (legal.length <= 1) {
    const r = legal[0] || S.readings[0];
    const t = Object.assign(document.createElement("span"), { className: legal.length ? "reading-one" : "muted",
      textContent: (legal.length ? "= " : "does not beat the table 壓不過: ") + readingWords(r, r.describe) });
    box.replaceChildren(t);
    return;
  }
  const label = Object.assign(document.createElement("span"), { className: "muted", textContent: "Reading 讀法:" });
  const opts = legal.map((r) => {
    const i = S.readings.indexOf(r);
    const b = document.createElement("button");
    b.type = "button";
    b.className = "reading";
    b.dataset.reading = `${r.kind} ${r.rank}`;
    b.setAttribute("role", "radio");
    b.setAttribute("aria-checked", i === S.reading ? "true" : "false");
    b.textContent = readingWords(r, r.describe);
    b.addEventListener("click", () => {
      S.reading = i;
      renderReadings();
    });
    return b;
  });
  box.replaceChildren(label, ...opts);
}

async function hint() {
  if (!S.view || !S.view.hand) return;
  try {
    const r = await api("/api/hint", S.token, { hand: S.view.hand.ids, ...lastPlayFields() });
    S.selected = new Set(r.pass ? [] : r.cards);
    if (r.pass) notice("Hint: nothing beats it — pass 提示：過", "info", 4000);
    render();
    await refreshReadings();
    if (!r.pass) {
      const i = S.readings.findIndex((x) => x.kind === r.kind && x.rank === r.rank);
      if (i >= 0) S.reading = i;
      renderReadings();
    }
  } catch (e) {
    notice(`Hint failed: ${e.message}`, "error");
  }
}

// ---- actions --------------------------------------------------------------------------------------

function play() {
  if (!S.view || !S.selected.size) return;
  const msg = { type: "Play", cards: sortCards([...S.selected]), expected_version: S.view.version };
  const legal = S.readings.filter((x) => x.beats);
  const r = S.readings[S.reading];
  if (legal.length > 1 && r) {
    msg.reading_kind = r.kind;
    msg.reading_rank = r.rank;
  }
  S.link.send(msg);
  setStatus("Playing… 出牌中");
}

function pass() {
  if (!S.view) return;
  S.link.send({ type: "Pass", expected_version: S.view.version });
  S.selected.clear();
}

function bind() {
  $("#hand").addEventListener("click", (ev) => {
    const el = ev.target.closest("[data-card]");
    if (!el || el.disabled) return;
    const id = Number(el.dataset.card);
    if (S.selected.has(id)) S.selected.delete(id);
    else S.selected.add(id);
    el.setAttribute("aria-pressed", S.selected.has(id) ? "true" : "false");
    $("[data-action=play]").disabled = !canActNow(S.view) || S.selected.size === 0;
    refreshReadings();
  });
  $("[data-action=play]").addEventListener("click", play);
  $("[data-action=verify-deal]").addEventListener("click", verifyThisDeal);
  $("[data-action=pass]").addEventListener("click", pass);
  $("[data-action=hint]").addEventListener("click", hint);
  $("[data-action=trustee]").addEventListener("click", () => S.link.send({ type: "RequestTrustee" }));
  $("[data-action=cancel-trustee]").addEventListener("click", () => S.link.send({ type: "CancelTrustee" }));
  $("[data-action=ready]").addEventListener("click", () => {
    // a random client seed of our own: the operator cannot know it when committing (FAIRNESS.md)
    const seed = randomClientSeed();
    const id = randomClientSeed();
    S.pendingSeed = { seed, id };
    S.link.send({ type: "Ready", command_id: id, client_seed: seed });
    $("[data-action=ready]").hidden = true;
    setStatus("Ready — waiting for the opponent 已準備，等待對手");
  });
  $("[data-action=join]").addEventListener("click", () => {
    const room = document.querySelector("input[name=room]:checked").value;
    S.link.send({ type: "Join", room });
    setStatus(`Joining ${modeWords(room)}… 加入中`);
  });
  $("#login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = $("#login-name").value.trim();
    const role = $("#login-spectator").checked ? "spectator" : "player";
    try {
      start(await devToken(name, role));
    } catch (e) {
      setStatus(`Cannot sign in: ${e.message}`, "error");
    }
  });
  setInterval(tickClock, 250);
}

// ---- messages -------------------------------------------------------------------------------------

function noteEvents(events) {
  for (const e of events || []) {
    if (typeof e.ts === "number") {
      const off = e.ts - Date.now();
      if (S.offset === null || off > S.offset) S.offset = off;  // ts <= the server's now: a lower bound
    }
    const who = e.player === S.me ? "You 你" : e.player;
    switch (e.type) {
      case "CardsPlayed": {
        const r = eventReading(e.reading);
        const words = readingWords(r, describe(r));
        S.log.push(`${e.player}: ${words}${e.by !== "player" ? ` [${e.by}]` : ""}`);
        if (BOMB_KINDS.has(r.kind)) {
          S.bombs.push({ player: e.player, words });
          const mine = (S.bombsSeen[e.match_id] = S.bombsSeen[e.match_id] || {});
          (mine[e.player] = mine[e.player] || []).push({ cards: e.cards, kind: r.kind, rank: r.rank });
        }
        break;
      }
      case "Passed":
        S.log.push(`${e.player} passes 過${e.by !== "player" ? ` [${e.by === "auto" ? "auto-pass 自動過" : e.by}]` : ""}`);
        break;
      case "TurnTimedOut":
        notice(`${e.player === S.me ? "" : e.player + ": "}${e.notice_zh} — ${e.notice_en}`, "warn", 12000, "timeout");
        break;
      case "TrusteeshipStarted":
        notice(`${who}: 託管 trusteeship started (${TRUSTEE_REASON[e.reason] || e.reason})`, "warn", 8000, "trustee");
        break;
      case "TrusteeshipEnded":
        notice(`${who}: trusteeship ended, back in control 取消託管 (${e.reason})`, "info");
        break;
      case "PlayerDisconnected":
        notice(`${who}: 斷線 disconnected — trusteeship plays (R-13.4)`, "warn", 8000, "disconnect");
        break;
      case "PlayerReconnected":
        notice(`${who}: reconnected 已重新連線`, "info", 8000, "reconnect");
        break;
      case "PlayerEscaped":
        notice(`${who}: 逃跑 escaped (${e.policy})`, "warn");
        break;
      case "PlayerRemoved":
        notice(`${who}: removed from the table (${removedReason(e.reason)})`, "warn");
        break;
      case "MatchFinished":
        S.log.push(`${e.winner} wins — ${KOU[e.kou] || e.kou}`);
        break;
      default:
        break;
    }
  }
}

async function standing(view) {
  // R-8.5 "instant": recompute each player's contribution from the bombs seen in this match
  const seen = S.bombsSeen[view.match_id] || {};
  const seats = seatsOf(view);
  const bombs = {};
  for (const s of seats) bombs[s.player] = seen[s.player] || [];
  try {
    const r = await api("/api/standing", S.token, { room: S.lobby ? S.lobby.room : view.mode, bombs });
    const base = Math.min(...seats.map((s) => s.base));
    const out = {};
    for (const s of seats) {
      const prev = (view.contribution || {})[s.player] || { xiang: 0, c: 0, source: "no bomb" };
      const mine = r[s.player] && r[s.player].xiang >= prev.xiang ? r[s.player] : prev;
      out[s.player] = { ...mine };
    }
    for (const s of seats) {
      const o = seats.find((x) => x.player !== s.player);
      out[s.player].net = base * (out[s.player].c - (o ? out[o.player].c : 0));
    }
    return out;
  } catch (e) {
    return view.contribution;
  }
}

async function announceBombs(view, folded) {
  if (!S.bombs.length) return;
  const played = S.bombs.splice(0);
  if (folded) {
    const c = await standing(view);
    if (S.view && S.view.match_id === view.match_id && c) {
      S.view.contribution = c;
      render();
    }
  }
  for (const { player, words } of played) {
    const c = S.view && S.view.contribution ? S.view.contribution[player] : null;
    notice(`炸彈 bomb! ${player === S.me ? "You 你" : player}: ${words}${c ? ` — 貢獻 contribution c=${c.c}, net ${c.net > 0 ? "+" : ""}${c.net}` : ""}`, "bomb", 6000, "bomb");
  }
}

// The engine sends the full view with the deal, the finish and every few versions; between
// them an update carries only its events, and the page folds them into the last view (the
// same rules as engine/match/evolve.py, for what a view shows).
function roomOf() {
  // the room's clocks: from the lobby's room, else what the last full view's deadline showed
  const name = S.lobby && S.lobby.room;
  const room = (S.rooms || []).find((r) => r.name === name);
  if (room) return room;
  return { turn_seconds: S.learned.turn, trustee_delay_seconds: S.learned.trustee };
}

function learnClock(view, events) {
  const ts = (events || []).map((e) => e.ts).filter((t) => typeof t === "number");
  if (!view.deadline || !ts.length) return;
  const secs = (view.deadline.at_ms - Math.max(...ts)) / 1000;
  if (secs > 0 && view.deadline.kind === "turn") S.learned.turn = secs;
  if (secs >= 0 && view.deadline.kind === "trustee") S.learned.trustee = secs;
}

function foldEvents(view, events) {
  const v = JSON.parse(JSON.stringify(view));
  const seat = (p) => (v.seats || []).find((s) => s && s.player === p);
  const other = (p) => ((v.seats || []).find((s) => s && s.player !== p) || {}).player;
  let lastTs = null;
  for (const e of events) {
    if (typeof e.ts === "number") lastTs = e.ts;
    const s = e.player ? seat(e.player) : null;
    switch (e.type) {
      case "PlayerReady": if (s) s.ready = true; break;
      case "CardsPlayed": {
        const r = eventReading(e.reading);
        if (s) {
          s.cards_left -= e.cards.length;
          s.plays = (s.plays || 0) + 1;
          if (BOMB_KINDS.has(r.kind)) s.bombs = [...(s.bombs || []), describe(r)];
        }
        if (e.player === v.you && v.hand) v.hand.ids = v.hand.ids.filter((c) => !e.cards.includes(c));
        if (v.opponent && e.player === v.opponent.player) v.opponent.cards_left -= e.cards.length;
        v.last_play = { player: e.player, cards: e.cards, reading: r, describe: describe(r) };
        v.table_count = (v.table_count || 0) + e.cards.length;
        v.turn = other(e.player);
        v.leading = false;
        break;
      }
      case "Passed":
        v.turn = other(e.player);
        v.last_play = null;
        v.leading = true;
        v.trick = (v.trick || 0) + 1;
        break;
      case "TurnTimedOut": if (s) s.timeouts = e.count; break;
      case "TrusteeshipStarted": if (s) s.trustee = e.reason; break;
      case "TrusteeshipEnded": if (s) s.trustee = null; break;
      case "PlayerDisconnected": if (s) s.connected = false; break;
      case "PlayerReconnected": if (s) s.connected = true; break;
      case "PlayerEscaped": if (s) s.escaped = true; break;
      case "MatchFinished":
        v.phase = "finished";
        v.result = { winner: e.winner, loser: e.loser, kou: e.kou, reason: e.reason, cards_left: e.cards_left };
        v.turn = null;
        break;
      default:
        break;
    }
  }
  v.your_turn = v.phase === "playing" && !!v.you && v.turn === v.you;
  if (v.phase === "playing" && v.turn && lastTs !== null) {
    const room = roomOf();
    const t = seat(v.turn);
    if (t && t.trustee && room.trustee_delay_seconds !== undefined) {
      v.deadline = { at_ms: lastTs + 1000 * room.trustee_delay_seconds, kind: "trustee", version: v.version };
    } else if (room.turn_seconds) {
      v.deadline = { at_ms: lastTs + 1000 * room.turn_seconds, kind: "turn", version: v.version };
    } else {
      v.deadline = null;  // the room's clock is unknown here: the next full view brings it
    }
  } else if (v.phase !== "playing") {
    v.deadline = null;
  }
  return v;
}

// The update's brief (docs/PROTOCOL.md §8 "brief") is always current: what the fold guessed
// (the turn, the trick, the play to beat, the clock, the card counts) is taken from it.
function applyBrief(view, brief) {
  if (!brief || brief.version !== view.version) return view;
  const v = { ...view, phase: brief.phase, turn: brief.turn, trick: brief.trick };
  v.your_turn = v.phase === "playing" && !!v.you && v.turn === v.you;
  v.leading = v.phase === "playing" && !brief.last_play;
  if (brief.last_play) {
    const r = brief.last_play.reading;
    v.last_play = { ...brief.last_play, describe: describe(r) };
  } else {
    v.last_play = null;
  }
  if (brief.deadline_ms === null) v.deadline = null;
  else v.deadline = { ...(v.deadline || { kind: "turn" }), at_ms: brief.deadline_ms, version: brief.version };
  v.seats = (v.seats || []).map((s) => (s && s.player in brief.cards_left ? { ...s, cards_left: brief.cards_left[s.player] } : s));
  if (v.opponent && v.opponent.player in brief.cards_left) v.opponent = { ...v.opponent, cards_left: brief.cards_left[v.opponent.player] };
  return v;
}

function onUpdate(msg, brief) {
  const seen = S.versions[msg.match];
  if (seen !== undefined && msg.version <= seen) return;  // a duplicate or an old redelivery
  let view = msg.view;
  if (!view) {
    if (!S.view || S.view.match_id !== msg.match) {
      noteEvents(msg.events);
      S.link.sync();  // nothing to fold into: ask for the current view
      return;
    }
    view = applyBrief({ ...foldEvents(S.view, msg.events || []), version: msg.version }, brief);
  } else {
    learnClock(view, msg.events);
  }
  view = { ...view, version: msg.version };
  S.versions[msg.match] = msg.version;
  if (S.match !== msg.match) {
    S.match = msg.match;
    S.fair = freshFair();
    S.log = [];
    S.selected.clear();
    S.readings = [];
  }
  noteEvents(msg.events);
  noteFair(msg.events, view);
  S.view = view;
  announceBombs(view, !msg.view);
  if (view.phase === "playing" && S.settled && S.settled.match !== msg.match) show("[data-settlement]", false);
  render();
}

// ---- provably fair deals (docs/FAIRNESS.md) -----------------------------------------------

function noteFair(events, view) {
  if (!S.fair) S.fair = freshFair();
  const mySeat = S.spectator ? null : seatsOf(view).findIndex((s) => s.player === S.me);
  for (const e of events || []) {
    if (e.type === "PlayerReady" && e.player === S.me && S.pendingSeed && e.client_seed === S.pendingSeed.seed) {
      S.fair.mySeed = S.pendingSeed.seed;
    } else if (e.type === "HandDealt") {
      S.fair.first = e.first;
      S.fair.leadCard = e.lead_card;
      if (mySeat !== null && mySeat >= 0 && e.hands && e.hands[mySeat]) S.fair.dealtHand = e.hands[mySeat];
    } else if (e.type === "CardsPlayed") {
      (S.fair.played[e.player] = S.fair.played[e.player] || []).push(...e.cards);
    }
  }
}

function renderFair(view) {
  const fair = view && view.fair;
  show("#fair", !!fair);
  if (!fair) return;
  const code = $("[data-commitment]");
  code.textContent = fair.commitment;
  const revealed = view.phase === "finished" && !!fair.server_seed;
  show("[data-verify]", revealed);
  if (!revealed && S.fair) S.fair.result = null;
  const res = S.fair && S.fair.result;
  const out = $("[data-verify-result]");
  out.dataset.verifyResult = res ? (res.ok ? "ok" : "mismatch") : "";
  out.textContent = res ? (res.ok ? "✔ The deal is fair: it is the one the commitment and the seeds give. 發牌公平"
    : "✘ The deal does NOT match its commitment and seeds. 發牌不符") : "";
  const item = (c) => {
    const li = document.createElement("li");
    li.textContent = `${c.ok ? "✔" : "✘"} ${c.text}`;
    li.className = c.ok ? "ok" : "bad";
    return li;
  };
  $("[data-verify-checks]").replaceChildren(...(res ? res.checks.map(item) : []));
}

async function verifyThisDeal() {
  const view = S.view;
  if (!view || !view.fair || !view.fair.server_seed) return;
  const seats = seatsOf(view);
  const mySeat = S.spectator ? null : seats.findIndex((s) => s.player === S.me);
  const played = {};
  seats.forEach((s, i) => { if (s && S.fair && S.fair.played[s.player]) played[i] = S.fair.played[s.player]; });
  const f = S.fair || freshFair();
  try {
    f.result = await verifyDeal({
      matchId: view.match_id, commitment: view.fair.commitment, serverSeed: view.fair.server_seed,
      clientSeeds: view.fair.client_seeds, seat: mySeat !== null && mySeat >= 0 ? mySeat : null,
      dealtHand: f.dealtHand, hand: view.hand ? view.hand.ids : null, first: f.first, leadCard: f.leadCard,
      played, table: view.table_ids, mySeed: f.mySeed,
    });
  } catch (err) {
    f.result = { ok: false, checks: [{ ok: false, text: `could not recompute the deal: ${err.message}` }] };
  }
  S.fair = f;
  renderFair(view);
}

function renderSettlement(msg) {
  const panel = $("[data-settlement]");
  const b = msg.breakdown || {};
  const scores = msg.scores || {};
  const winner = b.winner || Object.keys(scores).find((p) => scores[p] > 0) || (S.view && S.view.result && S.view.result.winner);
  const h = (tag, text, attrs = {}) => {
    const el = document.createElement(tag);
    el.textContent = text;
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    return el;
  };
  const rows = [];
  const row = (k, v, attrs = {}) => {
    const tr = document.createElement("tr");
    tr.append(h("th", k), h("td", v, attrs));
    rows.push(tr);
  };
  row("X 對局分 base", `${b.X} — lower level of the two (R-8.2)`, { "data-term": "X" });
  for (const [p, x] of Object.entries(b.xiang || {})) {
    row(`${p}: 相 effective xiang`, `${x.xiang || 0} — ${x.source} · c=${x.c}, b=${x.b}`, { "data-xiang": p });
  }
  if (b.escape) {
    const e = b.escape;
    row("逃跑 escape", `${e.rule}: ${e.formula}`, { "data-term": "escape" });
    row("received", `${e.received_formula}${b.burned ? ` · burned ${b.burned}` : ""}`);
  } else {
    row("a 扣 kou", `${b.a} — ${KOU[b.kou] || b.kou} (${b.a_from || ""})`, { "data-term": "a" });
    row("b 翻倍 doubling", `${b.b} — ${b.b_from || ""}`, { "data-term": "b" });
    row("X·a·b", b.win_formula || "", { "data-term": "win" });
    row("X·c 貢獻 contribution", b.contribution_formula || "", { "data-term": "contribution" });
    if (b.cap && b.cap.applied) row("cap (R-11.2)", `${b.cap.payer} owed ${b.cap.owed}, paid ${b.cap.paid}`);
  }
  const table = document.createElement("table");
  table.append(...rows);
  const scoreList = document.createElement("ul");
  scoreList.className = "scores";
  for (const [p, v] of Object.entries(scores)) {
    const li = h("li", `${nameOf(p)}: `);
    li.append(h("b", v > 0 ? `+${v}` : `${v}`, { "data-score": p }));
    if (msg.balances && p in msg.balances) {
      li.append(h("span", ` → new balance 新餘額 `), h("b", `${msg.balances[p]}`, { "data-balance": p }));
    }
    scoreList.append(li);
  }
  const next = h("p", S.spectator ? "The table goes on with the next match. 下一局" : "Press Ready for the next match at this table. 按準備開始下一局", { class: "muted" });
  panel.replaceChildren(h("h2", "Settlement 結算"), h("p", `${winner ? nameOf(winner) + " wins" : ""} — ${KOU[b.kou] || b.kou || ""}`, { class: "result" }),
    scoreList, table, next);
  panel.dataset.match = msg.match;
  panel.hidden = false;
}

function onMessage(msg) {
  switch (msg.kind) {
    case "welcome":
      S.me = msg.player;
      S.role = msg.role;
      if (S.spectator || msg.role === "spectator" || msg.role === "operator") {
        S.spectator = true;
        if (S.watchMatch) S.link.send({ type: "Watch", match: S.watchMatch });
        else setStatus("A spectator token: open /watch/<match id> 觀戰");
      } else if (!S.view && !S.lobby) {
        setStatus("Choose a room and Join 選擇房間");
      }
      render();
      break;
    case "lobby":
      S.lobby = msg.state === "removed" ? null : msg;
      if (msg.state === "removed") {
        S.view = null;
        const why = removedReason(msg.reason);
        notice(`Removed from the table: ${why}`, "warn", 12000);
        setStatus(`Removed: ${why} — join again 重新加入`);
      }
      if (msg.state === "seated" && msg.match && S.view && S.view.match_id !== msg.match && S.view.phase !== "finished") S.view = null;
      render();
      break;
    case "update":
      onUpdate(msg, S.link.brief);
      break;
    case "rejected":
      if (S.pendingSeed && msg.command_id === S.pendingSeed.id && msg.code === "bad_command"
          && /client_seed/.test(msg.reason || "")) {
        // a gateway that does not forward client seeds yet: be ready with the default seed
        S.pendingSeed = null;
        S.link.send({ type: "Ready" });
        break;
      }
      setStatus(`Refused 不行: ${msg.reason} (${msg.code})`, "error");
      if (msg.view && msg.view.match_id) {
        S.view = msg.view;
        S.versions[msg.view.match_id] = Math.max(S.versions[msg.view.match_id] || 0, msg.view.version);
        render();
        setStatus(`Refused 不行: ${msg.reason} (${msg.code})`, "error");
      }
      break;
    case "settled":
      S.settled = msg;
      if (msg.balances && S.me in msg.balances) S.balance = msg.balances[S.me];
      renderSettlement(msg);
      render();
      break;
    default:
      break;
  }
}

function onLinkState(state, ev) {
  S.linkState = state;
  const el = $("#link");
  el.dataset.link = state;
  el.textContent = { connecting: "connecting 連線中…", open: "● online 在線", reconnecting: "reconnecting 重新連線中…",
    refused: "✕ closed 已關閉", closed: "closed" }[state] || state;
  if (state === "reconnecting") setStatus("Connection lost — reconnecting… 連線中斷，重新連線中", "error");
  if (state === "refused") {
    const why = ev && ev.reason ? ev.reason : "the gateway closed this session";
    setStatus(`Session closed: ${why} (${ev ? ev.code : ""})`, "error");
    if (ev && ev.code === 4401) {
      forgetToken();
      boot();
    }
  }
  if (state === "open" && S.view) render();
}

// ---- start ---------------------------------------------------------------------------------------

function start(token) {
  if (S.link) return;
  S.token = token;
  const c = claims(token);
  if (c) {
    S.me = c.sub;
    S.role = c.role;
    if (c.role !== "player") S.spectator = true;
  }
  show("#login", false);
  show("#no-token", false);
  const proto = window.location.protocol === "https:" ? "wss:" : "ws:";
  S.link = new Client({ url: `${proto}//${window.location.host}/ws`, token });
  for (const name of ["welcome", "lobby", "settled"]) S.link.on(name, onMessage);
  for (const name of ["update", "rejected"]) S.link.on(name, ({ message }) => onMessage(message));
  S.link.on("state", ({ state, code, reason }) => onLinkState(state, code === undefined ? undefined : { code, reason }));
  S.link.connect();
  render();
}

function roomPicker(rooms) {
  S.rooms = rooms || [];
  const wanted = new URL(window.location.href).searchParams.get("room");
  const list = [...(rooms || [])];
  if (wanted && !list.some((r) => r.name === wanted)) list.push({ name: wanted, mode: "points" });
  if (!list.length) return;
  const box = document.querySelector(".rooms");
  box.replaceChildren(...list.map((r, i) => {
    const l = document.createElement("label");
    const input = Object.assign(document.createElement("input"), { type: "radio", name: "room", value: r.name });
    input.checked = wanted ? r.name === wanted : i === 0;
    const clock = r.turn_seconds ? ` · ${r.turn_seconds}s turns` : "";
    l.append(input, ` ${r.name} — ${modeWords(r.mode)}${clock}`);
    return l;
  }));
}

async function boot() {
  S.link = null;
  const t = tokenFromUrl() || storedToken();
  if (t) {
    start(t);
    clientConfig().then((cfg) => roomPicker(cfg.rooms));
    return;
  }
  tokenFromHost(start);
  const cfg = await clientConfig();
  roomPicker(cfg.rooms);
  if (S.link) return;
  if (cfg.dev) {
    show("#login", true);
    setStatus("Type a name to sit down 輸入名字入座");
    $("#login-name").focus();
  } else {
    show("#no-token", true);
    setStatus("Waiting for a token from the operator's login 等待登入");
  }
}

bind();
boot();
