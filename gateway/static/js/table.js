// The table page: join a room, play a match, settle, play the next one; or watch (/watch/<id>).
// Renders from the view the gateway sends (docs/PROTOCOL.md "WebSocket"); uses events for
// notices, the play log, sounds and motion.  One language at a time (i18n.js).
// Testability contract (issues 15, 25): hand cards data-card, buttons data-action,
// data-opponent-count, data-opponent-name, data-status (+ data-code on a refusal),
// data-settlement, data-score, data-balance, data-cards-left, data-fair, data-your-turn,
// table cards data-table-card (never data-card).  The scene (issue 36): seats data-seat="top" |
// "bottom" with data-player and an avatar data-avatar, the level badge data-level, the 理牌
// toggle data-action=arrange (data-arrange="rank" | "groups"), the hand's groups data-group,
// the history drawer data-history, the fairness info data-action=fair-info / data-fair-panel;
// data-tier (a tier badge, ranked rooms), data-rating-change (the settlement's rating line),
// the Leave button data-action=leave (data-leave="queue" | "table").
// The socket is client.js's Client (the page's
// one networking seam: auth, resume, command ids, expected versions, the brief).
import { api, claims, clientConfig, devToken, forgetToken, storedToken, tokenFromHost, tokenFromUrl } from "./auth.js";
import { cardElement, sortCards } from "./cards.js";
import { Client } from "./client.js";
import { fairDeal, randomClientSeed, verifyDeal } from "./fair.js";
import { BOMB_KINDS, byWords, eventReading, isBot, kouWords, modeWords, namedFormula, readingWords, receivedWords, setText, signed } from "./words.js";
import { currentLang, cycleLang, has, onLang, startLang, t } from "./i18n.js";
import { boom, flyIn, muted, setMuted, sound, unlockAudio } from "./fx.js";
import { avatarSvg } from "./avatar.js";
import { onSay, relabelSay, renderSay, setupSay } from "./say.js";
import { bindPrivate, renderTally, setupPrivate } from "./private.js";

const $ = (sel) => document.querySelector(sel);
const root = $("#table");
const watchPath = window.location.pathname.match(/^\/watch\/(.+)$/);
const NOTICE_MS = 4500;  // a transient notice is gone within 5 s
const ARRANGE_KEY = "shuangkou-arrange";
const ROOM_KEY = "shuangkou-room";  // the room this browser last joined: the lobby's choice next time

function storedRoom() {
  try {
    return localStorage.getItem(ROOM_KEY);
  } catch (e) {
    return null;
  }
}

function storedArrange() {
  try {
    return localStorage.getItem(ARRANGE_KEY) === "groups";
  } catch (e) {
    return false;
  }
}

const S = {
  token: null, me: null, role: null,
  spectator: !!watchPath, watchMatch: watchPath ? decodeURIComponent(watchPath[1]) : null,
  link: null, linkState: "connecting", dev: false, renewTimer: null,
  lobby: null, match: null, views: {}, versions: {},
  hold: null,  // a finished match that stays on the table until the player presses Ready
  left: {},  // match -> true: a match the player was removed from (its later updates are not shown)
  closedSeries: null,  // a private series whose final standings were closed: its hands leave the page
  per: {},  // match -> what this page saw of it: fair, log, bombs, trick
  selected: new Set(), readings: [], reading: 0, readingsSeq: 0, readingsKey: null, readingsAsked: null, sent: null,
  settled: {}, ratings: {}, tiers: {}, tierAsked: {}, balance: null, clock: { version: null, total: null }, offset: null,
  rooms: [], lobbyRooms: null, names: {}, learned: {}, pendingSeed: null, refusal: null,
  warned: null, wasMyTurn: null, shownPlay: null, finishSounded: null, readyFor: null, flyFrom: null, cardW: null,
  leaving: false,  // a Leave sent, not answered yet
  cooldownUntil: 0,  // the leave cooldown's end (Date.now() ms): Join waits until then
  arrange: storedArrange(), groups: { key: null, groups: null }, arrangeSeq: 0, arrangeAsked: null,
};

function shown() {
  return S.views[S.hold || S.match] || null;
}

function per(match) {
  if (!S.per[match]) {
    S.per[match] = { fair: { dealtHand: null, first: null, leadCard: null, played: {}, mySeed: null, result: null },
      log: [], bombs: {}, trick: null, deal: null, dealFor: null };
  }
  return S.per[match];
}

// ---- words ---------------------------------------------------------------------------------

/** What a player is called: the display name the gateway passed, else the bot's word, else the id. */
function nameOf(p) {
  if (!p) return "";
  if (S.names[p]) return S.names[p];
  if (isBot(p)) {
    const level = S.lobby && S.lobby.bot_level;
    return level && has(`botLevel.${level}`) ? t("lobby.botLevel", { level: t(`botLevel.${level}`) }) : t("lobby.bot");
  }
  return p;
}

/** Whether ``p`` is the player this page plays for (never on a spectator's page). */
function isMe(p) {
  return !S.spectator && p === S.me;
}

function refusalText(code) {
  const c = String(code || "").split(":")[0];
  return has(`refusal.${c}`) ? t(`refusal.${c}`) : t("refusal.other");
}

/** A removal's reason without its detail ("left", "not_ready", …). */
function removalCode(code) {
  return String(code || "").split(":")[0];
}

function isLeave(code) {
  return removalCode(code) === "left";
}

function removedText(code) {
  const c = removalCode(code);
  return has(`removed.${c}`) ? t(`removed.${c}`) : t("removed.other");
}

function el(tag, text = "", attrs = {}) {
  const e = document.createElement(tag);
  if (text) e.textContent = text;
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  return e;
}

// ---- status, notices ------------------------------------------------------------------------

function setStatus(text, kind = "", code = null) {
  const s = $("[data-status]");
  // a refusal is written again even when its words are the same (a screen reader says it again);
  // the status of each update only when it changes
  if (code) s.textContent = text;
  else setText(s, text);
  s.dataset.kind = kind;
  if (code) s.dataset.code = code;
  else delete s.dataset.code;
}

/** A transient notice: gone after NOTICE_MS; a newer one with the same tag replaces it. */
function notice(text, kind = "info", tag = kind) {
  const box = $("#notices");
  // the result panel counts the bombs: a late bomb notice would only cover it (a 375 px screen)
  if (kind === "bomb" && !$("[data-settlement]").hidden) return;
  for (const old of box.querySelectorAll(`[data-notice="${CSS.escape(tag)}"]`)) old.remove();
  const n = el("div", text, { class: `notice ${kind}`, "data-notice": tag });
  box.prepend(n);
  while (box.children.length > 3) box.lastChild.remove();
  setTimeout(() => n.remove(), NOTICE_MS);
}

/** The result sheet starts under the top bar and under a private table's series tally when it is
 * shown: --topbar-h is the lower bottom edge of the two (kept as they wrap, and on each render:
 * the tally moves up when the lobby above it hides, without changing its size). */
function sheetTop() {
  const edge = (e) => (!e || e.hidden ? 0 : e.offsetTop + e.offsetHeight);
  const px = `${Math.ceil(Math.max(edge($(".topbar")), edge($("[data-series-tally]"))))}px`;
  if (document.documentElement.style.getPropertyValue("--topbar-h") !== px) {
    document.documentElement.style.setProperty("--topbar-h", px);
  }
}

/** The result sheet ends above the floating Ready button: --ready-h is the button's height (48 px,
 * more when the text is larger), kept as it changes; a hidden button keeps the last one. */
function readyHeight() {
  const h = $("[data-action=ready]").offsetHeight;
  const px = `${Math.ceil(h)}px`;
  if (h && document.documentElement.style.getPropertyValue("--ready-h") !== px) {
    document.documentElement.style.setProperty("--ready-h", px);
  }
}

function show(id, on) {
  $(id).hidden = !on;
}

// ---- the view -------------------------------------------------------------------------------

function seatsOf(view) {
  return (view && view.seats ? view.seats : []).filter(Boolean);
}

function roomCfg() {
  const name = S.lobby && S.lobby.room;
  return (S.rooms || []).find((r) => r.name === name) || {};
}

/** the room's number of timeouts before trusteeship, worded ("三" in Chinese). */
function trusteeLimit() {
  const n = roomCfg().timeouts_before_trustee || 3;
  return has(`num.${n}`) ? t(`num.${n}`) : String(n);
}

function badges(box, seat, view) {
  box.replaceChildren();
  if (!seat) return;
  const add = (text, cls, why = "") => box.append(el("span", text, { class: `badge ${cls}`, "data-badge": cls, title: why || null }));
  if (seat.trustee) {
    const key = has(`badge.trustee.${seat.trustee}`) ? `badge.trustee.${seat.trustee}` : "badge.trustee";
    add(t(key, { limit: trusteeLimit() }), "trustee", seat.player !== S.me && seat.trustee === "disconnect" ? t("explain.disconnectOther", { name: nameOf(seat.player) }) : "");
  }
  // a disconnect's trusteeship says "(disconnected)" already: one badge, not two
  if (seat.connected === false && seat.trustee !== "disconnect") add(t("badge.offline"), "offline");
  if (seat.escaped) add(t("badge.escaped"), "escaped");
  if (seat.timeouts && view.phase === "playing") add(t("badge.timeouts", { n: seat.timeouts }), "timeouts");
  if (view.phase === "seating") add(seat.ready ? t("badge.ready") : t("badge.notReady"), seat.ready ? "ready" : "not-ready");
  const tier = S.tiers[seat.player];  // ranked rooms (docs/RANKED.md): the tier from the ladder
  if (tier) box.append(el("span", t(`tier.${tier.tier}`), { class: "badge tier", "data-badge": "tier", "data-tier": tier.tier, title: `${t("rating.label")} ${tier.rating}` }));
}

/** Ranked rooms: the tiers of the table's players, once per match (GET /api/leaderboard?players=). */
function loadTiers(view) {
  const room = S.lobby && S.lobby.room;
  if (!view || !room || !roomCfg().ranked || S.tierAsked[view.match_id] || !S.token) return;
  const players = seatsOf(view).map((s) => s.player).filter(Boolean);
  if (players.length < 2) return;  // once both are seated
  S.tierAsked[view.match_id] = true;
  const q = `room=${encodeURIComponent(room)}&limit=1&players=${players.map(encodeURIComponent).join(",")}`;
  api(`/api/leaderboard?${q}`, S.token).then((board) => {
    for (const [p, e] of Object.entries(board.players || {})) if (e) S.tiers[p] = { tier: e.tier, rating: e.rating };
    render();
  }).catch(() => {});
}

function contribText(view, player) {
  const c = view && view.contribution ? view.contribution[player] : null;
  if (!c || !c.xiang) return t("seat.noBomb");
  return t("seat.contribution", { xiang: c.xiang, net: signed(c.net) });
}

function backs(n) {
  return Array.from({ length: Math.min(n, 27) }, () => el("i", "", { class: "back" }));
}

/** A seat's ``n`` card backs (27 at most) in ``box``: only the difference is added or taken away. */
function showBacks(box, n) {
  const want = Math.min(n, 27);
  while (box.childElementCount > want) box.lastElementChild.remove();
  if (box.childElementCount < want) box.append(...backs(want - box.childElementCount));
}

// ---- the hand: a fan of large overlapping cards, in rank order or grouped (理牌) ------------

/** The rows of the fan for `groups` (lists of ids) in a box `width` wide with cards `cardW` wide:
 * as few rows as keep each card's corner (rank and suit) in sight, the step between cards, and
 * the rows themselves (lists of groups; a group stays on one row unless it is longer than one). */
function fanLayout(groups, width, cardW, maxRows = 4) {
  const n = groups.reduce((a, g) => a + g.length, 0);
  let gap = groups.length > 1 ? cardW * 0.25 : 0;
  const minStep = Math.max(cardW * 0.37, 20);
  const maxStep = cardW * 0.62;
  const spread = 2 * (cardW / 0.7) * Math.sin((5 * Math.PI) / 180) + 4;  // the fan's tilt (±5°) widens a row
  const stepOf = (row) => {
    const cards = row.reduce((a, g) => a + g.length, 0);
    return cards > 1 ? (width - spread - cardW - (row.length - 1) * gap) / (cards - 1) : maxStep;
  };
  let best = null;
  for (let r = 1; r <= maxRows; r += 1) {
    const per = Math.ceil(n / r);
    const rows = [];
    let row = [];
    let count = 0;
    for (const g of groups) {
      for (let i = 0; i < g.length; i += per) {
        const part = g.slice(i, i + per);
        if (count && count + part.length > per) {
          rows.push(row);
          row = [];
          count = 0;
        }
        row.push(part);
        count += part.length;
      }
    }
    if (row.length) rows.push(row);
    let step = Math.min(maxStep, ...rows.map(stepOf));
    if (step < minStep && r === maxRows && gap) {
      gap = cardW * 0.12;  // the last chance: narrower gaps between the groups
      step = Math.min(maxStep, ...rows.map(stepOf));
    }
    if (!best || step > best.step) best = { rows, step };
    if (step >= minStep) break;
  }
  return { rows: best.rows, step: Math.max(best.step, 8), gap };
}

/** A card's width in the hand: a probe's, measured again only when the viewport changes (the
 * card's size follows the viewport alone: table.css --card-h), so a render reads no layout for it. */
function cardWidth(box) {
  const key = `${window.innerWidth}x${window.innerHeight}`;
  if (S.cardW && S.cardW.key === key) return S.cardW.width;
  const probe = el("span", "", { class: "card", "aria-hidden": "true" });
  probe.style.visibility = "hidden";
  probe.style.position = "absolute";
  box.append(probe);
  const width = probe.getBoundingClientRect().width;
  probe.remove();
  if (width) S.cardW = { key, width };
  return width || 48;
}

function handGroups(ids) {
  const key = ids.join(",");
  if (S.arrange && S.groups.key === key && S.groups.groups) {
    const seen = new Set();
    const out = [];
    for (const g of S.groups.groups) {
      const cards = g.cards.filter((c) => ids.includes(c) && !seen.has(c));
      cards.forEach((c) => seen.add(c));
      if (cards.length) out.push({ kind: g.kind, cards });
    }
    const rest = ids.filter((c) => !seen.has(c));
    if (rest.length) out.push({ kind: "single", cards: rest });
    return out;
  }
  return [{ kind: "rank", cards: ids }];
}

/** Ask the gateway how this hand splits into combinations (POST /api/arrange). */
async function arrangeHand(ids) {
  const key = ids.join(",");
  if (!S.arrange || !ids.length || S.groups.key === key || S.arrangeAsked === key) return;
  S.arrangeAsked = key;  // one question per hand, however many renders come before the answer
  const seq = ++S.arrangeSeq;
  let groups = null;
  try {
    const room = S.lobby && S.lobby.room ? { room: S.lobby.room } : {};
    groups = (await api("/api/arrange", S.token, { cards: ids, ...room })).groups;
  } catch (e) {
    groups = null;
  }
  if (seq !== S.arrangeSeq) return;
  S.arrangeAsked = null;
  if (!Array.isArray(groups)) {
    notice(t("notice.arrangeFailed"), "error", "arrange");
    S.arrange = false;
    renderArrange();
  } else {
    S.groups = { key, groups };
  }
  const view = shown();
  if (view) renderHand(view);
}

function renderArrange() {
  const b = $("[data-action=arrange]");
  b.setAttribute("aria-pressed", S.arrange ? "true" : "false");
  b.dataset.arrange = S.arrange ? "groups" : "rank";
  b.title = t(S.arrange ? "arrange.on" : "arrange.off");
}

/** The player's hand, fanned over ``laid`` px (the hand's width as laid out: read now unless given). */
function renderHand(view, laid = $("#hand").clientWidth) {
  const hand = $("#hand");
  const ids = view.hand ? sortCards(view.hand.ids) : [];
  for (const id of [...S.selected]) if (!ids.includes(id)) S.selected.delete(id);
  const canAct = view.phase === "playing";
  if (S.arrange) arrangeHand(ids);
  const groups = handGroups(ids);
  const grouped = groups.length > 1 || (groups[0] && groups[0].kind !== "rank");
  hand.dataset.arranged = grouped ? "groups" : "rank";
  if (!ids.length) {
    hand.replaceChildren();
    return;
  }
  const cardW = cardWidth(hand);
  const width = laid || window.innerWidth - 16;
  // one row on a wide screen (a phone in landscape, a desktop), up to four on a tall one
  const maxRows = window.innerHeight <= window.innerWidth ? 1 : 4;
  // the same fan as the one shown (an update that leaves the hand as it was) is kept; which of
  // its cards are raised is the selection's (a tap or a hint changes it without a new fan)
  const fan = JSON.stringify([document.documentElement.lang, groups.map((g) => [g.kind, g.cards]), canAct,
    width, cardW, maxRows]);
  if (hand.firstElementChild && hand.firstElementChild.fan === fan) {
    for (const slot of hand.querySelectorAll("[data-card]")) {
      slot.setAttribute("aria-pressed", S.selected.has(Number(slot.dataset.card)) ? "true" : "false");
    }
    return;
  }
  const { rows, step, gap } = fanLayout(groups.map((g) => g.cards), width, cardW, maxRows);
  hand.style.setProperty("--step", `${step.toFixed(1)}px`);
  hand.style.setProperty("--group-gap", `${gap.toFixed(1)}px`);
  const kinds = new Map(groups.flatMap((g) => g.cards.map((c) => [c, g.kind])));
  const out = rows.map((row) => {
    const r = el("div", "", { class: "hand-row" });
    const count = row.reduce((a, g) => a + g.length, 0);
    const tilt = Math.min(0.9, 10 / Math.max(count, 1));  // the ends at ±5° at most
    let i = 0;
    for (const g of row) {
      const box = grouped ? el("span", "", { class: "hand-group", "data-group": kinds.get(g[0]) || "single" }) : r;
      for (const id of g) {
        const slot = el("button", "", { type: "button", class: "slot", "data-card": id,
          "aria-pressed": S.selected.has(id) ? "true" : "false" });
        const face = cardElement(id, { wild: true });
        slot.setAttribute("aria-label", face.getAttribute("aria-label"));
        face.removeAttribute("aria-label");
        slot.append(face);
        const off = i - (count - 1) / 2;
        slot.style.setProperty("--rot", `${(off * tilt).toFixed(2)}deg`);
        slot.style.setProperty("--arc", `${(Math.abs(off * tilt) ** 2 * 0.12).toFixed(1)}px`);
        slot.disabled = !canAct;
        box.append(slot);
        i += 1;
      }
      if (box !== r) r.append(box);
    }
    return r;
  });
  hand.replaceChildren(...out);
  out[0].fan = fan;
}

function renderAvatar(prefix, seat) {
  const box = $(`#${prefix}-avatar`);
  const name = seat ? nameOf(seat.player) : "";
  const key = seat ? `${seat.player}|${name}` : "";
  $(`#${prefix}`).dataset.player = seat ? seat.player : "";
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  box.dataset.avatar = seat ? seat.player : "";
  box.replaceChildren(...(seat ? [avatarSvg(seat.player, name)] : []));
}

/** The room's R-11 level table ([{level, need, base}]) for this view, when the page knows it. */
function levelTable(view) {
  const mode = (view && view.mode) || roomCfg().mode;
  const room = roomCfg().levels ? roomCfg() : (S.lobbyRooms || S.rooms || []).find((r) => r.mode === mode && r.levels);
  return room && room.levels ? room.levels : null;
}

/** The level badge says what it is (积分等级 N, R-11) and opens the room's table; hidden in a
 * room whose levels all have the same base, where the level changes nothing. */
function renderLevel(prefix, seat, view) {
  const b = $(`#${prefix}-level`);
  const table = levelTable(view);
  const matters = !table || new Set(table.map((l) => l.base)).size > 1;
  if (!seat || seat.level === undefined || seat.level === null || !matters) {
    b.hidden = true;
    b.dataset.level = "";
    return;
  }
  const mode = (view && view.mode) || roomCfg().mode || "points";
  b.hidden = false;
  b.dataset.level = String(seat.level);
  b.dataset.levelMode = mode;
  setText(b, t(mode === "wealth" ? "level.wealth" : "level.points", { level: seat.level }));
  const unit = t(mode === "wealth" ? "unit.coins" : "unit.points");
  b.title = [t("level.why", { unit }), ...(table || []).map((l) => `${l.level}: ${l.need} → ${l.base}`)].join("\n");
}

function showLevelTable(button) {
  const panel = $("[data-level-table]");
  if (!panel.hidden && panel.dataset.for === button.id) {
    panel.hidden = true;
    return;
  }
  const view = shown();
  const mode = button.dataset.levelMode || "points";
  const unit = t(mode === "wealth" ? "unit.coins" : "unit.points");
  const levels = new Set(seatsOf(view).map((s) => String(s.level)));
  const rows = (levelTable(view) || []).map((l) => {
    const tr = el("tr", "", { "data-level-row": l.level, "data-current": levels.has(String(l.level)) ? "" : null });
    tr.append(el("td", String(l.level)), el("td", String(l.need)), el("td", String(l.base)));
    return tr;
  });
  const parts = [el("h2", button.textContent), el("p", t("level.why", { unit }))];
  if (rows.length) {
    const table = el("table");
    const head = el("tr");
    head.append(el("th", t("level.level")), el("th", t("level.need", { unit })), el("th", t("level.base")));
    table.append(head, ...rows);
    parts.push(table);
  }
  panel.replaceChildren(...parts);
  panel.dataset.for = button.id;
  panel.hidden = false;
}

/** Whether the view's match has its hands out (or had: finished); not before the deal, nor a
 * match abandoned before it. */
function dealt(view) {
  return view.phase === "playing" || view.phase === "finished";
}

function renderSeat(prefix, seat, view, { countAttr = "data-opponent-count", isMine = false } = {}) {
  const nameEl = $(`#${prefix}-name`);
  const name = seat ? nameOf(seat.player) : "—";
  const you = isMine && seat && isMe(seat.player) ? ` (${t("seat.you")})` : "";
  if (nameEl.textContent !== name + you) {  // written again only when it changes
    nameEl.textContent = name;
    if (you) nameEl.append(el("small", you, { class: "you" }));
  }
  if (prefix === "opp") nameEl.dataset.player = seat ? seat.player : "";
  renderAvatar(prefix, seat);
  renderLevel(prefix, seat, view);
  badges($(`#${prefix}-badges`), seat, view);
  setText($(`#${prefix}-contrib`), seat && view.phase === "playing" ? contribText(view, seat.player) : "");
  $(`#${prefix}`).classList.toggle("on-turn", !!(view.phase === "playing" && seat && view.turn === seat.player));
  if (prefix === "opp") {
    // a bot opponent's level (the lobby's bot_level; nameOf shows it in the page's language)
    const level = !S.spectator && S.lobby && S.lobby.bot_level && seat && isBot(seat.player) ? S.lobby.bot_level : "";
    if (level) nameEl.dataset.botLevel = level;
    else delete nameEl.dataset.botLevel;
    const n = seat ? seat.cards_left : 0;
    const c = $("#opp-count");
    c.removeAttribute("data-opponent-count");
    c.removeAttribute("data-seat-count");
    c.setAttribute(countAttr, String(n));
    setText(c, String(n));
    c.parentElement.hidden = !dealt(view);  // nothing dealt (yet, or ever): no "0 cards"
    showBacks($("#opp-backs"), n);
  }
}

function playKey(view) {
  const lp = view.last_play;
  return lp ? `${view.match_id}|${view.trick}|${lp.player}|${lp.cards.join(",")}` : `${view.match_id}|${view.trick}|-`;
}

/** The plays of the current trick: the brief's, else the view's history of this trick. */
function trickPlays(view) {
  if (Array.isArray(view.trick_plays)) return view.trick_plays;
  return (view.history || []).filter((h) => h.trick === view.trick);
}

/** The play the one in front beat, smaller, above it: what the trick went through. */
function renderTrickPrev(view) {
  const box = $("#trick-prev");
  const plays = view.phase === "playing" && view.last_play ? trickPlays(view) : [];
  const prev = plays.length >= 2 ? plays[plays.length - 2] : null;
  box.hidden = !prev;
  if (!prev) {
    box.replaceChildren();
    return;
  }
  const cards = el("span", "", { class: "prev-cards" });
  cards.append(...sortCards(prev.cards).map((id) => cardElement(id, { attrs: { "data-trick-card": id } })));
  box.dataset.player = prev.player;
  const what = readingWords({ ...prev.reading, jokers_as: [] });
  const mine = isMe(prev.player);
  box.replaceChildren(el("span", mine ? t("last.prevYou", { what }) : t("log.play", { name: nameOf(prev.player), what }),
    { class: "prev-who" }), cards);
}

function renderLast(view, from) {
  renderTrickPrev(view);
  const lp = view.last_play;
  const cards = $("#last-cards");
  const last = $("#last");
  if (!lp) {
    let lead = "";
    if (view.phase === "playing") lead = isMe(view.turn) ? t("last.youLead") : t("last.leads", { name: nameOf(view.turn) });
    setText($("#last-who"), view.phase === "playing" ? t("last.newTrick", { n: view.trick }) : "");
    cards.replaceChildren();
    setText($("#last-reading"), lead);
    last.dataset.lastKind = "";
    last.dataset.lastRank = "";
    S.shownPlay = playKey(view);
    return;
  }
  const played = isMe(lp.player) ? t("last.playedYou") : t("last.played", { name: nameOf(lp.player) });
  setText($("#last-who"), `${t("last.trick", { n: view.trick })} · ${played}`);
  cards.replaceChildren(...sortCards(lp.cards).map((id) => cardElement(id, { attrs: { "data-table-card": id }, small: true })));
  cards.style.setProperty("--n", String(lp.cards.length));  // a long play overlaps more (table.css)
  setText($("#last-reading"), readingWords(lp.reading));
  last.dataset.lastKind = lp.reading.kind;
  last.dataset.lastRank = lp.reading.rank;
  const key = playKey(view);
  let fly = null;
  if (S.shownPlay !== null && key !== S.shownPlay && from) {
    fly = () => flyIn(cards, from);
    if (BOMB_KINDS.has(lp.reading.kind)) {
      boom(last);
      sound("bomb");
    } else {
      sound("play");
    }
  }
  S.shownPlay = key;
  return fly;
}

/** The history drawer ([data-history]): every play of the match so far, the newest first,
 * with a separator per trick. */
function renderLog(match) {
  const entries = per(match).log;
  const out = [];
  let trick = null;
  for (const e of [...entries].reverse()) {  // the newest first: always in sight
    if (e.trick !== trick) {
      trick = e.trick;
      out.push(el("li", t("log.trick", { n: e.trick }), { class: "trick-sep", "data-trick": e.trick }));
    }
    const li = el("li", e.text(), { class: e.kind, "data-history-entry": e.kind, "data-player": e.player || null });
    if (e.cards && e.cards.length) {
      const mini = el("span", "", { class: "mini", "aria-hidden": "true" });
      mini.append(...sortCards(e.cards).map((id) => cardElement(id, { attrs: { "data-history-card": id } })));
      li.append(mini);
    }
    out.push(li);
  }
  $("#log").replaceChildren(...out);
}

function openHistory(open) {
  const drawer = $("[data-history]");
  drawer.hidden = !open;
  $("[data-action=history]").setAttribute("aria-expanded", open ? "true" : "false");
  if (open) $("[data-action=history-close]").focus();
}

function serverNow() {
  return Date.now() + (S.offset || 0);
}

function tickClock() {
  const view = shown();
  const clock = $("#clock");
  if (!view || !view.deadline || view.phase === "finished") {
    clock.hidden = true;
    return;
  }
  clock.hidden = false;
  const d = view.deadline;
  const left = Math.max(0, d.at_ms - serverNow());
  const id = `${view.match_id}/${d.version}/${d.at_ms}`;
  if (S.clock.version !== id) S.clock = { version: id, total: Math.max(left, 1000) };
  const secs = Math.ceil(left / 1000);
  // each write only on a change, and the bar steps without a transition: a page at a table
  // repaints at most four times a second, never every frame
  const label = t(d.kind === "trustee" ? "clock.trustee" : d.kind === "ready" ? "clock.ready" : "clock.turn", { s: secs });
  setText($("#clock-n"), label);
  const width = `${Math.round((100 * left) / S.clock.total)}%`;
  if ($("#clock-bar").style.width !== width) $("#clock-bar").style.width = width;
  const urgent = left < 5000;
  if (clock.dataset.urgent !== String(urgent)) clock.dataset.urgent = String(urgent);
  if (urgent && left > 0 && d.kind === "turn" && view.your_turn && !S.spectator && S.warned !== id) {
    S.warned = id;
    sound("warn");
  }
}

function statusFor(view) {
  const seats = seatsOf(view);
  if (view.phase === "seating" || view.phase === "new") {
    if (S.spectator) return t("status.sitting");
    const mine = seats.find((s) => s.player === S.me);
    if (seats.length < 2) return t("status.waitOpponent");
    if (mine && !mine.ready) return t("status.pressReady");
    return t("status.waitReady");
  }
  if (view.phase === "playing") {
    if (S.spectator || !view.your_turn) return t("status.turnOf", { name: nameOf(view.turn) });
    const me = seats.find((s) => s.player === S.me);
    if (me && me.trustee) return t("status.yourTurnTrustee");
    return view.leading ? t("status.yourLead") : t("status.yourFollow");
  }
  // the opponent left after the result: the result stays on the sheet, the status says what now
  const queued = !S.spectator && S.lobby && S.lobby.state === "queued";
  if (view.phase === "finished" && view.result && !queued) return verdictText(view, S.settled[view.match_id]);
  // a match never dealt (abandoned: the opponent was not ready in time): what the lobby does next
  if (queued) return t("status.queued", { room: roomWords(S.lobby.room) });
  return "";
}

/** The page drawn from the state. Geometry is read before the drawing's writes (the layout the
 * last frame left: free) and then after them all (a play's flight, then ``laidOut``), so an update
 * forces one layout (two when the sheet's edges move), not one per read. */
function render() {
  const width = $("#hand").clientWidth;
  const fly = draw(width);
  if (fly) fly();
  laidOut(width);
}

/** What depends on the layout the drawing made: the result sheet's edges, and the hand again
 * when its width is not the one it was fanned over (the match was just shown, a bar wrapped). */
function laidOut(width) {
  renderTally();
  sheetTop();
  readyHeight();
  const view = shown();
  if (view && !S.spectator) {
    const now = $("#hand").clientWidth;
    if (now !== width) renderHand(view, now);
  }
}

function draw(handWidth) {
  const view = shown();
  const inMatch = !!view;
  show("#match", inMatch);
  show("#lobby", !S.spectator && !!S.me && S.role === "player" && !S.lobby && S.linkState !== "refused"
    && (!inMatch || view.phase === "finished"));
  root.dataset.phase = view ? view.phase : (S.lobby ? `lobby-${S.lobby.state}` : "lobby");
  root.dataset.yourTurn = view && view.your_turn && !S.spectator ? "true" : "false";
  root.dataset.spectator = S.spectator ? "true" : "false";
  root.dataset.match = view ? view.match_id : (S.lobby && S.lobby.match) || "";
  root.dataset.version = view ? String(view.version) : "";
  setText($("#me-name"), S.me ? (S.spectator ? t("status.watchingAs", { name: nameOf(S.me) }) : nameOf(S.me)) : "");
  const mode = (view && view.mode) || roomCfg().mode || "points";
  setText($("#me-balance"), S.balance !== null && !S.spectator ? `${t(mode === "wealth" ? "unit.coins" : "unit.points")} ${S.balance}` : "");
  renderReady(view);
  renderLeave();
  loadTiers(view);
  renderFinished(view);
  renderSay({ canSay: !S.spectator && !!view && (view.phase === "seating" || view.phase === "playing")
    && seatsOf(view).some((s) => s.player === S.me), player: !S.spectator && !!view });
  if (!view) {
    if (S.lobby && S.lobby.state === "queued") setStatus(t("status.queued", { room: roomWords(S.lobby.room) }));
    else if (S.lobby && S.lobby.state === "seated") setStatus(t("status.seatedPressReady"));
    renderFair(null);
    $("#log").replaceChildren();  // no match on the page: the history of the one left goes with it
    return null;
  }
  const seats = seatsOf(view);
  if (S.spectator) {
    renderSeat("opp", seats[0], view, { countAttr: "data-seat-count" });
    const s1 = seats[1];
    renderSeat("mine", s1, view);
    $("#mine-count-row").hidden = !dealt(view);  // as the other seat: no "0 cards" before the deal
    const n1 = s1 ? s1.cards_left : 0;
    setText($("#mine-count"), String(n1));
    $("#mine-count").setAttribute("data-seat-count", String(n1));
    showBacks($("#mine-backs"), n1);
    $("#hand").replaceChildren();
    $("#hand").hidden = true;
    $("#play-actions").hidden = true;
    $("#play-why").hidden = true;
    $("#explain").hidden = true;
  } else {
    const mine = seats.find((s) => s.player === S.me);
    const opp = seats.find((s) => s.player !== S.me);
    renderSeat("opp", opp, view);
    renderSeat("mine", mine, view, { isMine: true });
    renderHand(view, handWidth);
    const myTurn = canActNow(view);
    $("[data-action=pass]").disabled = !myTurn || view.leading || awaitingAnswer(view);
    $("[data-action=hint]").disabled = !myTurn;
    const playing = view.phase === "playing";
    $("#play-actions").hidden = !playing;
    $("#play-why").hidden = !playing;
    const room = roomCfg();
    const reclaim = !!(mine && mine.trustee === "disconnect" && room.reclaim_after_reconnect && mine.connected !== false);
    $("[data-action=trustee]").hidden = !playing || !mine || !!mine.trustee;
    $("[data-action=cancel-trustee]").hidden = !playing || !mine || !mine.trustee
      || !(["requested", "timeouts"].includes(mine.trustee) || reclaim);
    renderExplain(view, mine, room, reclaim);
    renderPlayButton(view);
    // a socket closed for good (another tab took the seat, the token was refused) sends nothing
    if (S.linkState === "refused") for (const b of document.querySelectorAll("#play-actions button")) b.disabled = true;
  }
  setText($("#turn-who"), view.phase === "playing" && view.turn
    ? `${t("turn.label")} ${isMe(view.turn) ? t("turn.you") : nameOf(view.turn)}` : "");
  const fly = renderLast(view, S.flyFrom);
  S.flyFrom = null;
  renderLog(view.match_id);
  renderReadings();
  renderFair(view);
  tickClock();
  if (S.linkState === "open" && !(S.refusal && S.refusal.version === view.version)) {
    setStatus(statusFor(view), view.your_turn && !S.spectator ? "turn" : "");
  }
  const myTurn = !!(view.your_turn && !S.spectator && view.phase === "playing");
  if (myTurn && S.wasMyTurn !== view.match_id) sound("turn");
  S.wasMyTurn = myTurn ? view.match_id : null;
  return fly;
}

function renderReady(view) {
  const ready = $("[data-action=ready]");
  let want = false;
  // a socket closed for good (the table opened in another tab): nothing here can send it
  if (!S.spectator && S.lobby && S.lobby.state === "seated" && S.linkState !== "refused") {
    const current = S.views[S.lobby.match];
    const mine = current ? seatsOf(current).find((s) => s.player === S.me) : null;
    if (S.hold) want = !!S.settled[S.hold] || S.lobby.match !== S.hold;
    else want = !current || ((current.phase === "seating" || current.phase === "new") && !(mine && mine.ready));
  }
  ready.hidden = !want;
}

/** The Leave button (``data-leave``: ``queue`` or ``table``): out of the room's queue while
 * waiting, or away from the table while the page knows the match is not dealt (its view says
 * new, or seating and this player not ready yet) or is over (finished, or held until Ready);
 * never while a hand is played, once this player is ready (the opponent's Ready deals at once),
 * nor before the page has the match's view (after a reload: a Leave after the deal is an
 * escape, R-12.1), nor at a private table (its series ends by a vote). The engine's queue decides it
 * wherever the player is (docs/PROTOCOL.md §8). */
function renderLeave() {
  const b = $("[data-action=leave]");
  let kind = "";
  const privateTable = !$("[data-series-tally]").hidden || !$("[data-private-created]").hidden;
  if (!S.spectator && S.lobby && !S.leaving && !privateTable && S.linkState !== "refused") {
    if (S.lobby.state === "queued") kind = "queue";
    else if (S.lobby.state === "seated") {
      const current = S.views[S.lobby.match];
      const phase = current ? current.phase : null;
      const mine = current ? seatsOf(current).find((s) => s.player === S.me) : null;
      // once this player is ready the opponent's Ready deals: a Leave then in flight would be an escape
      const readied = phase === "seating" && !!mine && !!mine.ready;
      if (phase === "new" || (phase === "seating" && !readied) || phase === "finished" || (!current && S.hold)) {
        kind = "table";
      }
    }
  }
  b.hidden = !kind;
  b.dataset.leave = kind;
  if (kind) setText(b, t(kind === "queue" ? "btn.leaveQueue" : "btn.leaveTable"));
}

function leave() {
  S.leaving = true;
  S.link.leave();
  render();
  setStatus(t("status.leaving"));
}

function renderExplain(view, mine, room, reclaim) {
  const box = $("#explain");
  let text = "";
  if (view.phase === "playing" && mine && mine.trustee === "disconnect") {
    text = t(reclaim ? "explain.disconnectReclaim" : "explain.disconnect", { s: room.reconnect_grace_seconds || 10 });
  } else if (view.phase === "playing" && mine && mine.trustee === "timeouts") {
    text = t("explain.timeouts", { limit: trusteeLimit() });
  }
  setText(box, text);
  box.hidden = !text;
  box.dataset.explain = text ? mine.trustee : "";
}

// ---- readings, the Play button, hints ----------------------------------------------------------

function canActNow(view) {
  if (!view || !view.your_turn || view.phase !== "playing" || S.hold) return false;
  const mine = seatsOf(view).find((s) => s.player === S.me);
  return !(mine && mine.trustee);
}

function lastPlayFields(view) {
  const lp = view && view.last_play;
  const room = S.lobby && S.lobby.room ? { room: S.lobby.room } : {};
  return lp ? { ...room, last_cards: lp.cards, last_kind: lp.reading.kind, last_rank: lp.reading.rank } : { ...room, last_cards: null };
}

function selectionKey(view) {
  return `${[...S.selected].sort((a, b) => a - b).join(",")}|${view ? playKey(view) : ""}`;
}

/** Play is enabled only when the selection is a combination that beats the play in front;
 * otherwise it is disabled with the reason under the hand ([data-play-why]). */
function renderPlayButton(view) {
  const btn = $("[data-action=play]");
  const why = $("#play-why");
  let reason = "";
  let ok = false;
  if (!canActNow(view)) {
    reason = S.selected.size && view && view.phase === "playing" && !S.hold ? t("reading.notYourTurn") : "";
  } else if (awaitingAnswer(view)) {
    reason = "";  // the command is on its way: the status line says so
  } else if (!S.selected.size) {
    reason = "";
  } else if (S.readingsKey !== selectionKey(view)) {
    reason = t("reading.checking");
    // a selection made before the play in front changed (cards chosen while waiting for the
    // turn): ask for its readings against the new play, once per selection and play
    if (S.readingsAsked !== selectionKey(view)) queueMicrotask(refreshReadings);
  } else if (S.readings === null) {
    ok = true;  // the readings endpoint did not answer: the engine decides
  } else if (!S.readings.length) {
    reason = t("reading.notCombo");
  } else if (!S.readings.some((r) => r.beats)) {
    reason = t("reading.cannotBeat", { what: view.last_play ? readingWords(view.last_play.reading) : "" });
  } else {
    ok = true;
  }
  btn.disabled = !ok;
  setText(why, reason);
  why.dataset.reason = ok ? "" : (reason ? "blocked" : "");
  if (reason) btn.setAttribute("aria-describedby", "play-why");
  else btn.removeAttribute("aria-describedby");
}

async function refreshReadings() {
  const view = shown();
  const seq = ++S.readingsSeq;
  const key = selectionKey(view);
  S.readingsAsked = key;
  if (S.selected.size === 0 || S.spectator || !view) {
    S.readings = [];
    S.readingsKey = key;
    renderReadings();
    renderPlayButton(view);
    return;
  }
  renderPlayButton(view);
  let readings;
  try {
    readings = (await api("/api/readings", S.token, { cards: [...S.selected], ...lastPlayFields(view) })).readings;
  } catch (e) {
    readings = null;
  }
  if (seq !== S.readingsSeq) return;
  S.readings = readings;
  S.readingsKey = key;
  const legal = (readings || []).filter((x) => x.beats);
  S.reading = legal.length ? readings.indexOf(legal[0]) : 0;
  renderReadings();
  renderPlayButton(shown());
}

function renderReadings() {
  const box = $("#readings");
  const readings = S.readings || [];
  if (S.spectator || S.selected.size === 0 || !readings.length) {
    box.replaceChildren();
    return;
  }
  const legal = readings.filter((x) => x.beats);
  if (legal.length <= 1) {
    const r = legal[0] || readings[0];
    box.replaceChildren(el("span", `= ${readingWords(r)}`, { class: legal.length ? "reading-one" : "muted" }));
    return;
  }
  const opts = legal.map((r) => {
    const i = readings.indexOf(r);
    const b = el("button", readingWords(r), { type: "button", class: "reading", "data-reading": `${r.kind} ${r.rank}`,
      role: "radio", "aria-checked": i === S.reading ? "true" : "false" });
    b.addEventListener("click", () => {
      S.reading = i;
      renderReadings();
    });
    return b;
  });
  box.replaceChildren(el("span", t("reading.label"), { class: "muted" }), ...opts);
}

async function hint() {
  const view = shown();
  if (!view || !view.hand) return;
  try {
    const r = await api("/api/hint", S.token, { hand: view.hand.ids, ...lastPlayFields(view) });
    S.selected = new Set(r.pass ? [] : r.cards);
    if (r.pass) notice(t("notice.hintPass"), "info", "hint");
    render();
    await refreshReadings();
    if (!r.pass) {
      const i = (S.readings || []).findIndex((x) => x.kind === r.kind && x.rank === r.rank);
      if (i >= 0) S.reading = i;
      renderReadings();
    }
  } catch (e) {
    notice(t("notice.hintFailed"), "error", "hint");
  }
}

// ---- actions --------------------------------------------------------------------------------------

function play() {
  const view = shown();
  if (!view || !S.selected.size || $("[data-action=play]").disabled) return;
  const msg = { type: "Play", cards: sortCards([...S.selected]), expected_version: view.version };
  const readings = S.readings || [];
  const legal = readings.filter((x) => x.beats);
  const r = readings[S.reading];
  if (legal.length > 1 && r) {
    msg.reading_kind = r.kind;
    msg.reading_rank = r.rank;
  }
  S.link.send(msg);
  justSent(view);
  setStatus(t("status.playing"));
}

function pass() {
  const view = shown();
  if (!view || $("[data-action=pass]").disabled) return;
  S.link.send({ type: "Pass", expected_version: view.version });
  justSent(view);
  S.selected.clear();
}

/** A Play or Pass went out at this version: Play and Pass stay disabled until the answer (a new
 * version or a refusal), or for SENT_HOLD_MS at most (a command lost with the link is not waited for). */
const SENT_HOLD_MS = 3000;
function justSent(view) {
  S.sent = { match: view.match_id, version: view.version, at: Date.now() };
  setTimeout(render, SENT_HOLD_MS + 50);
  render();
}

function awaitingAnswer(view) {
  const s = S.sent;
  return !!(s && view && s.match === view.match_id && s.version === view.version && Date.now() - s.at < SENT_HOLD_MS);
}

function ready() {
  // a random client seed of our own: the operator cannot know it when committing (FAIRNESS.md)
  const seed = randomClientSeed();
  const id = randomClientSeed();
  S.pendingSeed = { seed, id };
  S.hold = null;  // the finished match leaves the table now
  S.readyFor = S.lobby ? S.lobby.match : null;  // the match this Ready is for: no hold when it starts
  S.selected.clear();
  S.shownPlay = null;
  S.link.send({ type: "Ready", command_id: id, client_seed: seed });
  $("[data-action=ready]").hidden = true;
  render();
  setStatus(t("status.readyWait"));
}

function renderLangButton() {
  const b = $("[data-action=lang]");
  b.dataset.lang = currentLang();
  b.textContent = t("lang.name");
  b.setAttribute("aria-label", `${t("lang.label")}: ${t("lang.name")}`);
  b.title = t("lang.label");
}

function renderMute() {
  const b = $("[data-action=mute]");
  const off = muted();
  b.setAttribute("aria-pressed", off ? "true" : "false");
  b.setAttribute("aria-label", t(off ? "sound.off" : "sound.on"));
  b.title = t(off ? "sound.off" : "sound.on");
}

function bind() {
  document.addEventListener("pointerdown", unlockAudio, { capture: true });
  document.addEventListener("keydown", unlockAudio, { capture: true });
  $("#hand").addEventListener("click", (ev) => {
    const c = ev.target.closest("[data-card]");
    if (!c || c.disabled) return;
    const id = Number(c.dataset.card);
    if (S.selected.has(id)) S.selected.delete(id);
    else S.selected.add(id);
    c.setAttribute("aria-pressed", S.selected.has(id) ? "true" : "false");
    refreshReadings();
  });
  $("[data-action=play]").addEventListener("click", play);
  $("[data-action=arrange]").addEventListener("click", () => {
    S.arrange = !S.arrange;
    try {
      localStorage.setItem(ARRANGE_KEY, S.arrange ? "groups" : "rank");
    } catch (e) {
      // private mode: for this page only
    }
    renderArrange();
    const view = shown();
    if (view) renderHand(view);
  });
  $("[data-action=history]").addEventListener("click", () => openHistory($("[data-history]").hidden));
  $("[data-action=history-close]").addEventListener("click", () => {
    openHistory(false);
    $("[data-action=history]").focus();
  });
  $("[data-action=fair-info]").addEventListener("click", () => {
    const panel = $("[data-fair-panel]");
    panel.hidden = !panel.hidden;
    $("[data-action=fair-info]").setAttribute("aria-expanded", panel.hidden ? "false" : "true");
  });
  for (const b of document.querySelectorAll("button[data-level]")) b.addEventListener("click", () => showLevelTable(b));
  document.addEventListener("keydown", (ev) => {
    if (ev.key !== "Escape") return;
    $("[data-fair-panel]").hidden = true;
    $("[data-level-table]").hidden = true;
    openHistory(false);
  });
  document.addEventListener("click", (ev) => {
    // a tap outside a popover closes it
    if (!ev.target.closest("[data-fair-panel], [data-action=fair-info]")) {
      $("[data-fair-panel]").hidden = true;
      $("[data-action=fair-info]").setAttribute("aria-expanded", "false");
    }
    if (!ev.target.closest("[data-level-table], button[data-level]")) $("[data-level-table]").hidden = true;
  });
  // the top bar's height changes as it wraps (a phone, a long balance); the tally's as its text wraps
  if (typeof ResizeObserver === "function") {
    const watch = new ResizeObserver(sheetTop);
    watch.observe($(".topbar"));
    watch.observe($("[data-series-tally]"));
    new ResizeObserver(readyHeight).observe($("[data-action=ready]"));
  }
  sheetTop();
  readyHeight();
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      const view = shown();
      if (view && !S.spectator) renderHand(view);
    }, 60);
  });
  $("[data-action=verify]").addEventListener("click", verifyThisDeal);
  $("[data-action=pass]").addEventListener("click", pass);
  $("[data-action=hint]").addEventListener("click", hint);
  $("[data-action=trustee]").addEventListener("click", () => S.link.send({ type: "RequestTrustee" }));
  $("[data-action=cancel-trustee]").addEventListener("click", () => S.link.send({ type: "CancelTrustee" }));
  $("[data-action=ready]").addEventListener("click", ready);
  $("[data-action=leave]").addEventListener("click", leave);
  $("[data-action=lang]").addEventListener("click", cycleLang);
  $("[data-action=mute]").addEventListener("click", () => {
    setMuted(!muted());
    renderMute();
    unlockAudio();
  });
  $("[data-action=join]").addEventListener("click", () => {
    const picked = document.querySelector("input[name=room]:checked");
    if (!picked) return;
    S.link.send({ type: "Join", room: picked.value });
    try {
      localStorage.setItem(ROOM_KEY, picked.value);
    } catch (e) {
      // private mode: for this page only
    }
    setStatus(t("status.joining", { room: roomWords(picked.value) }));
  });
  document.querySelector(".rooms").addEventListener("change", renderLobbyWhy);
  $("#login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = $("#login-name").value;
    const role = S.watchMatch || $("#login-spectator").checked ? "spectator" : "player";
    const err = $("#login-error");
    try {
      err.hidden = true;
      start(await devToken(name, role));
    } catch (e) {
      err.textContent = e.code === "bad_name" || e.code === "bad_request" ? t("login.badName") : t("login.failed", { why: refusalText(e.code) });
      err.dataset.code = e.code || "";
      err.hidden = false;
    }
  });
  setInterval(tickClock, 250);
}

// ---- messages -------------------------------------------------------------------------------------

function noteEvents(match, events, view) {
  const p = per(match);
  if (p.trick === null) p.trick = view && view.trick ? view.trick : 1;
  for (const e of events || []) {
    if (typeof e.ts === "number") {
      const off = e.ts - Date.now();
      if (S.offset === null || off > S.offset) S.offset = off;  // ts <= the server's now: a lower bound
    }
    const you = isMe(e.player);
    const name = () => nameOf(e.player);
    switch (e.type) {
      case "HandDealt":
        p.trick = 1;
        break;
      case "CardsPlayed": {
        const r = eventReading(e.reading);
        p.log.push({ trick: p.trick, player: e.player, cards: e.cards, kind: BOMB_KINDS.has(r.kind) ? "bomb" : "play", text: () => t("log.play", { name: name(), what: readingWords(r) + byWords(e.by) }) });
        if (BOMB_KINDS.has(r.kind)) {
          (p.bombs[e.player] = p.bombs[e.player] || []).push({ cards: e.cards, kind: r.kind, rank: r.rank });
          p.pendingBombs = [...(p.pendingBombs || []), { player: e.player, r }];
        }
        break;
      }
      case "Passed":
        p.log.push({ trick: p.trick, player: e.player, kind: "pass", text: () => t(e.by === "auto" ? "log.autoPass" : "log.pass", { name: name() }) });
        p.trick += 1;
        break;
      case "TurnTimedOut":
        if (you && e.count >= (roomCfg().timeouts_before_trustee || 3)) {
          // the timeout that starts auto-play: its own notice says so, a warning would come after it
          for (const old of document.querySelectorAll('#notices [data-notice="timeout"]')) old.remove();
          break;
        }
        notice(you ? t("notice.timeout", { n: e.count, limit: trusteeLimit() }) : t("notice.timeoutOther", { name: name(), n: e.count }), "warn", "timeout");
        break;
      case "ClockExtended":
        notice(t("notice.clockPaused", { s: Math.round(e.by_ms / 1000) }), "info", "clock");
        break;
      case "TrusteeshipStarted":
        notice(you ? t("notice.trusteeOnYou") : t("notice.trusteeOn", { name: name() }), "warn", `trustee-${e.player}`);
        break;
      case "TrusteeshipEnded":
        notice(you ? t("notice.trusteeOffYou") : t("notice.trusteeOff", { name: name() }), "info", `trustee-${e.player}`);
        break;
      case "PlayerDisconnected":
        if (!you) notice(t("notice.disconnected", { name: name() }), "warn", `link-${e.player}`);
        break;
      case "PlayerReconnected":
        if (!you) notice(t("notice.reconnected", { name: name() }), "info", `link-${e.player}`);
        break;
      case "PlayerEscaped":
        notice(t("notice.escaped", { name: name() }), "warn", `escape-${e.player}`);
        break;
      case "PlayerRemoved":
        if (you) break;  // the lobby's removal says it to the player, in their own words
        // a plain leave is said once ("Carol left the table"), not "left the table: left"
        notice(isLeave(e.reason) ? t("notice.left", { name: name() })
          : t("notice.removed", { name: name(), why: removedText(e.reason) }), "warn", `removed-${e.player}`);
        break;
      case "MatchFinished":
        p.log.push({ trick: p.trick, kind: "end", text: () => `${t("log.wins", { name: nameOf(e.winner) })} · ${kouWords(e.kou)}` });
        break;
      default:
        break;
    }
  }
}

/** A full view's `history` (every play so far) fills what this page did not see itself: after
 * a reload, the drawer's plays (a trick that ended, ended with the other player's pass, R-6.2),
 * the bombs drawn at the end, and the plays the deal check needs. */
function noteHistory(match, view) {
  const hist = Array.isArray(view.history) ? view.history : null;
  const p = per(match);
  if (!hist || p.log.filter((e) => e.kind === "play" || e.kind === "bomb").length >= hist.length) return;
  const seats = seatsOf(view);
  const log = [];
  const bombs = {};
  const played = {};
  hist.forEach((h, i) => {
    const r = { ...h.reading, jokers_as: [] };
    const bomb = BOMB_KINDS.has(r.kind);
    log.push({ trick: h.trick, player: h.player, cards: h.cards, kind: bomb ? "bomb" : "play",
      text: () => t("log.play", { name: nameOf(h.player), what: readingWords(r) }) });
    if (bomb) (bombs[h.player] = bombs[h.player] || []).push({ cards: h.cards, kind: r.kind, rank: r.rank });
    (played[h.player] = played[h.player] || []).push(...h.cards);
    const next = hist[i + 1];
    const other = (seats.find((s) => s.player !== h.player) || {}).player;
    if (other && (next ? next.trick > h.trick : view.trick > h.trick)) {
      log.push({ trick: h.trick, player: other, kind: "pass", text: () => t("log.pass", { name: nameOf(other) }) });
    }
  });
  const r = view.result;
  if (view.phase === "finished" && r) {
    const last = hist.length ? hist[hist.length - 1].trick : 1;
    log.push({ trick: last, kind: "end", text: () => `${t("log.wins", { name: nameOf(r.winner) })} · ${kouWords(r.kou)}` });
  }
  p.log = log;
  p.bombs = bombs;
  p.trick = view.trick || p.trick;
  if (!Object.keys(p.fair.played).length) p.fair.played = played;
}

async function standing(view) {
  // R-8.5 "instant": each player's contribution from the bombs seen in this match
  const seen = per(view.match_id).bombs;
  const seats = seatsOf(view);
  const bombs = {};
  for (const s of seats) bombs[s.player] = seen[s.player] || [];
  try {
    const r = await api("/api/standing", S.token, { room: S.lobby ? S.lobby.room : view.mode, bombs });
    const base = Math.min(...seats.map((s) => s.base));
    const out = {};
    for (const s of seats) {
      const prev = (view.contribution || {})[s.player] || { xiang: 0, c: 0, source: "" };
      out[s.player] = { ...(r[s.player] && r[s.player].xiang >= prev.xiang ? r[s.player] : prev) };
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
  const p = per(view.match_id);
  if (!p.pendingBombs || !p.pendingBombs.length) return;
  const played = p.pendingBombs.splice(0);
  if (folded) {
    const c = await standing(view);
    const now = S.views[view.match_id];
    if (now && c) {
      now.contribution = c;
      render();
    }
  }
  for (const { player, r } of played) notice(t("notice.bomb", { name: nameOf(player), what: readingWords(r) }), "bomb", "bomb");
}

// The engine sends the full view with the deal, the finish and every few versions; between
// them an update carries only its events, and the page folds them into the last view (the
// same rules as engine/match/evolve.py, for what a view shows).
function roomOf() {
  const room = roomCfg();
  if (room.name) return room;
  return { turn_seconds: S.learned.turn, trustee_delay_seconds: S.learned.trustee };
}

function learnClock(view, events) {
  const ts = (events || []).map((e) => e.ts).filter((x) => typeof x === "number");
  if (!view.deadline || !ts.length) return;
  if ((events || []).some((e) => e.type === "ClockExtended")) return;  // a paused clock: not the room's length
  const secs = (view.deadline.at_ms - Math.max(...ts)) / 1000;
  if (secs > 0 && view.deadline.kind === "turn") S.learned.turn = secs;
  if (secs >= 0 && view.deadline.kind === "trustee") S.learned.trustee = secs;
}

function foldEvents(view, events) {
  const v = JSON.parse(JSON.stringify(view));
  delete v.trick_plays;  // the brief's, when this update has one (applyBrief); else the history's
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
          if (BOMB_KINDS.has(r.kind)) s.bombs = [...(s.bombs || []), readingWords(r)];
        }
        if (e.player === v.you && v.hand) v.hand.ids = v.hand.ids.filter((c) => !e.cards.includes(c));
        if (v.opponent && e.player === v.opponent.player) v.opponent.cards_left -= e.cards.length;
        v.last_play = { player: e.player, cards: e.cards, reading: r, describe: "" };
        v.history = [...(v.history || []), { trick: v.trick, player: e.player, cards: e.cards,
          reading: { kind: r.kind, rank: r.rank, xiang: r.xiang === undefined ? null : r.xiang } }];
        v.table_ids = [...(v.table_ids || []), ...e.cards];
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
    const s = seat(v.turn);
    if (s && s.trustee && room.trustee_delay_seconds !== undefined) {
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
  v.last_play = brief.last_play ? { ...brief.last_play, describe: "" } : null;
  if (brief.deadline_ms === null) v.deadline = null;
  else v.deadline = { ...(v.deadline || { kind: "turn" }), at_ms: brief.deadline_ms, version: brief.version };
  v.seats = (v.seats || []).map((s) => (s && s.player in brief.cards_left ? { ...s, cards_left: brief.cards_left[s.player] } : s));
  if (Array.isArray(brief.hand) && v.hand) v.hand = { ...v.hand, ids: brief.hand };
  if (Array.isArray(brief.trick_plays)) v.trick_plays = brief.trick_plays;
  if (v.opponent && v.opponent.player in brief.cards_left) v.opponent = { ...v.opponent, cards_left: brief.cards_left[v.opponent.player] };
  return v;
}

function flySource(view, events) {
  // where the cards of this update's play come from: my hand, or the opponent's seat
  const playedBy = [...(events || [])].reverse().find((e) => e.type === "CardsPlayed");
  if (!playedBy || !view) return null;
  if (isMe(playedBy.player)) {
    const mine = [...document.querySelectorAll("#hand [data-card]")].filter((c) => playedBy.cards.includes(Number(c.dataset.card)));
    const rects = mine.map((c) => c.getBoundingClientRect());
    if (rects.length) {
      const left = Math.min(...rects.map((r) => r.left));
      const right = Math.max(...rects.map((r) => r.right));
      return { left, top: rects[0].top, width: right - left, height: rects[0].height };
    }
    return $("#hand").getBoundingClientRect();
  }
  const seats = seatsOf(view);
  const idx = seats.findIndex((s) => s.player === playedBy.player);
  const box = S.spectator && idx === 1 ? $("#mine") : $("#opp");
  return box.getBoundingClientRect();
}

function onUpdate(msg, brief) {
  if (msg.names) Object.assign(S.names, msg.names);
  if (S.left[msg.match]) return;  // a table the player was removed from
  const seen = S.versions[msg.match];
  if (seen !== undefined && msg.version <= seen) return;  // a duplicate or an old redelivery
  const prev = S.views[msg.match];
  let view = msg.view;
  if (!view) {
    if (!prev) {
      noteEvents(msg.match, msg.events, null);
      S.link.sync();  // nothing to fold into: ask for the current view
      return;
    }
    view = applyBrief({ ...foldEvents(prev, msg.events || []), version: msg.version }, brief);
  } else {
    learnClock(view, msg.events);
  }
  view = { ...view, version: msg.version };
  S.versions[msg.match] = msg.version;
  if (S.spectator && S.watchMatch && msg.match !== S.watchMatch) {
    // the gateway follows the table to its next match: a reconnect (or a reload) watches that one
    S.watchMatch = msg.match;
    window.history.replaceState(null, "", `/watch/${encodeURIComponent(msg.match)}${window.location.search}`);
  }
  if (S.match !== msg.match) {
    const old = S.views[S.match];
    // the finished match stays on the table until Ready (a spectator: until the next one plays)
    if (old && old.phase === "finished" && S.hold === null && S.readyFor !== msg.match) S.hold = S.match;
    S.match = msg.match;
    S.selected.clear();
    S.readings = [];
  }
  if (S.spectator && S.hold && S.hold !== msg.match && view.phase === "playing") S.hold = null;  // the next one plays
  S.flyFrom = (msg.match === (S.hold || S.match)) ? flySource(prev || view, msg.events) : null;
  noteEvents(msg.match, msg.events, prev || view);
  noteFair(msg.match, msg.events, view);
  if (msg.view) noteHistory(msg.match, msg.view);
  S.views[msg.match] = view;
  if (view.phase === "finished" && prev && prev.phase !== "finished") onFinished(view);
  announceBombs(view, !msg.view);
  render();
}

function onFinished(view) {
  if (S.finishSounded === view.match_id) return;
  S.finishSounded = view.match_id;
  const r = view.result;
  if (!S.spectator && r) sound(r.winner === S.me ? "win" : "lose");
}

// ---- provably fair deals (docs/FAIRNESS.md) -----------------------------------------------

function noteFair(match, events, view) {
  const f = per(match).fair;
  const mySeat = S.spectator ? null : seatsOf(view).findIndex((s) => s.player === S.me);
  for (const e of events || []) {
    if (e.type === "PlayerReady" && e.player === S.me && S.pendingSeed && e.client_seed === S.pendingSeed.seed) {
      f.mySeed = S.pendingSeed.seed;
    } else if (e.type === "HandDealt") {
      f.first = e.first;
      f.leadCard = e.lead_card;
      if (mySeat !== null && mySeat >= 0 && e.hands && e.hands[mySeat]) f.dealtHand = e.hands[mySeat];
    } else if (e.type === "CardsPlayed") {
      (f.played[e.player] = f.played[e.player] || []).push(...e.cards);
    }
  }
}

function renderSheet() {
  $("#sheet").hidden = $("[data-settlement]").hidden && $("[data-verify]").hidden;
}

/** The fairness commitment behind an info icon ([data-action=fair-info] opens [data-fair-panel]
 * with the explanation and the hex); the deal check of a finished match sits under its result. */
function renderFair(view) {
  const fair = view && view.fair;
  show("#fair", !!fair);
  if (!fair) {
    show("[data-verify]", false);
    $("[data-fair-panel]").hidden = true;
    renderSheet();
    return;
  }
  setText($("[data-commitment]"), fair.commitment);  // the shown match's own commitment
  const revealed = view.phase === "finished" && !!fair.server_seed;
  show("[data-verify]", revealed);
  const res = revealed ? per(view.match_id).fair.result : null;
  const out = $("[data-verify-result]");
  out.dataset.verifyResult = res ? (res.ok ? "ok" : "mismatch") : "";
  out.dataset.fair = res ? (res.ok ? "verified" : "failed") : "";
  setText(out, res ? t(res.ok ? "fair.ok" : "fair.bad") : "");
  $("[data-verify-checks]").replaceChildren(...(res ? res.checks.map((c) => el("li",
    `${c.ok ? "✔" : "✘"} ${checkWords(c, view)}`, { class: c.ok ? "ok" : "bad", "data-check": c.key || "" })) : []));
  renderSheet();
}

/** A deal check in the page's words; a seat's check names its player ("you" for the player's own). */
function checkWords(c, view) {
  if (!c.key || !has(`fair.check.${c.key}`)) return c.text;
  if (c.key !== "played") return t(`fair.check.${c.key}`, c.params || {});
  const seat = seatsOf(view)[c.params.seat];
  if (seat && isMe(seat.player)) return t("fair.check.playedYou");
  return t("fair.check.played", { name: seat ? nameOf(seat.player) : String(c.params.seat) });
}

async function verifyThisDeal() {
  const view = shown();
  if (!view || !view.fair || !view.fair.server_seed) return;
  const seats = seatsOf(view);
  const mySeat = S.spectator ? null : seats.findIndex((s) => s.player === S.me);
  const f = per(view.match_id).fair;
  const played = {};
  seats.forEach((s, i) => { if (f.played[s.player]) played[i] = f.played[s.player]; });
  try {
    f.result = await verifyDeal({
      matchId: view.match_id, commitment: view.fair.commitment, serverSeed: view.fair.server_seed,
      clientSeeds: view.fair.client_seeds, seat: mySeat !== null && mySeat >= 0 ? mySeat : null,
      dealtHand: f.dealtHand, hand: view.hand ? view.hand.ids : null, first: f.first, leadCard: f.leadCard,
      played, table: view.table_ids, mySeed: f.mySeed,
    });
  } catch (err) {
    f.result = { ok: false, checks: [{ ok: false, key: "cannot", params: { why: err.message }, text: err.message }] };
  }
  renderFair(shown());
  // the checks open under the button, below the sheet's fold on a phone: scroll the sheet to them
  // (the sheet ends above the floating Ready button)
  const panel = $("[data-verify]");
  if (!panel.hidden) panel.scrollIntoView({ block: "end" });
}

// ---- the end of a match: verdict, both hands, bombs, the formula behind a toggle ---------------

function verdictText(view, settled) {
  const r = view.result;
  if (!r) return "";
  const parts = [];
  if (S.spectator) parts.push(t("settle.wins", { name: nameOf(r.winner) }));
  else parts.push(t(r.winner === S.me ? "settle.win" : "settle.lose"));
  parts.push(kouWords(r.kou));
  if (settled && settled.scores && !S.spectator && S.me in settled.scores) {
    parts.push(signed(settled.scores[S.me]));
    if (settled.balances && S.me in settled.balances) parts.push(t("settle.newBalance", { n: settled.balances[S.me] }));
  } else if (!settled && !S.spectator) {  // a spectator is never sent the settlement (balances)
    parts.push(t("status.settling"));
  }
  return parts.join(" · ");
}

/** Both final hands: mine from the view; the others' from the revealed fair deal (the server seed
 * and both client seeds give every dealt card: the cards a seat holds at the end are its dealt
 * cards that were never played).  Null for a seat the page cannot know (a fixed deal). */
async function finalHands(view) {
  const p = per(view.match_id);
  const seats = seatsOf(view);
  if (p.dealFor !== view.version) {
    p.dealFor = view.version;
    p.deal = null;
    const fair = view.fair;
    if (fair && fair.server_seed && fair.client_seeds) {
      try {
        p.deal = await fairDeal(fair.server_seed, fair.client_seeds, view.match_id);
      } catch (e) {
        p.deal = null;
      }
    }
  }
  const played = new Set(view.table_ids || []);
  const out = {};
  seats.forEach((s) => {
    const i = s.seat !== undefined ? s.seat : seats.indexOf(s);
    if (s.player === S.me && view.hand) out[s.player] = sortCards(view.hand.ids);
    else if (s.cards_left === 0) out[s.player] = [];
    else if (p.deal) out[s.player] = sortCards(p.deal.hands[i].filter((c) => !played.has(c)));
    else out[s.player] = null;
  });
  return out;
}

function renderFinished(view) {
  const panel = $("[data-settlement]");
  if (!view || view.phase !== "finished" || !view.result) {
    panel.hidden = true;
    panel.replaceChildren();
    delete panel.dataset.match;
    renderSheet();
    return;
  }
  const settled = S.settled[view.match_id] || null;
  const key = `${view.match_id}|${view.version}|${settled ? 1 : 0}|${S.ratings[view.match_id] ? 1 : 0}|${currentLang()}|${S.lobby ? S.lobby.state : ""}`;
  if (panel.dataset.key === key) return;
  panel.dataset.key = key;
  if (panel.dataset.match !== view.match_id) {
    for (const n of $("#notices").querySelectorAll("[data-notice=bomb]")) n.remove();  // see notice()
  }
  panel.dataset.match = view.match_id;
  panel.hidden = false;
  renderSheet();
  const r = view.result;
  const verdict = el("p", verdictText(view, settled), { class: "verdict", "data-verdict": S.spectator ? "watch" : (r.winner === S.me ? "win" : "lose") });
  const hands = el("div", "", { class: "final-hands" });
  const bombs = per(view.match_id).bombs;
  for (const s of seatsOf(view)) {
    const block = el("div", "", { class: "final-seat", "data-final-seat": s.player });
    const n = (r.cards_left || {})[s.player] !== undefined ? r.cards_left[s.player] : s.cards_left;
    block.append(el("div", n ? t("settle.cardsLeft", { name: nameOf(s.player), n }) : t("settle.noCardsLeft", { name: nameOf(s.player) }), { class: "final-name" }));
    const cards = el("div", "", { class: "final-cards", "data-cards-left": s.player });
    block.append(cards);
    const mine = bombs[s.player] || [];
    if (mine.length) {
      block.append(el("div", t("settle.bombs", { name: nameOf(s.player) }), { class: "final-label" }));
      const row = el("div", "", { class: "final-bombs", "data-bombs": s.player });
      for (const b of mine) {
        const g = el("span", "", { class: "bomb-group", title: readingWords({ kind: b.kind, rank: b.rank }) });
        g.append(...b.cards.map((id) => cardElement(id, { small: true, attrs: { "data-table-card": id } })));
        row.append(g);
      }
      block.append(row);
    } else if ((s.bombs || []).length) {
      block.append(el("div", `${t("settle.bombs", { name: nameOf(s.player) })}: ${s.bombs.length}`, { class: "final-label" }));
    } else {
      block.append(el("div", t("settle.noBombs", { name: nameOf(s.player) }), { class: "final-label muted" }));
    }
    hands.append(block);
  }
  const scoreList = el("ul", "", { class: "scores" });
  if (settled) {
    for (const [p, v] of Object.entries(settled.scores || {})) {
      const li = el("li", `${t("settle.scoreOf", { name: nameOf(p) })} `);
      // the number as a number (int() / Number() read it): ASCII signs, as before
      li.append(el("b", signed(v), { "data-score": p, "data-score-value": v }));
      if (settled.balances && p in settled.balances) {
        li.append(el("span", ` · ${t("settle.balanceLabel")} `), el("b", `${settled.balances[p]}`, { "data-balance": p }));
      }
      scoreList.append(li);
    }
  }
  // "Press Ready…" only while the player still sits at the table (not after a private series ended)
  const seated = !!(S.lobby && S.lobby.state === "seated");
  const next = el("p", S.spectator ? t("settle.nextWatch") : t("settle.next"), { class: "muted" });
  const parts = [el("h2", t("settle.title")), verdict, scoreList];
  const rated = S.ratings[view.match_id];  // ranked rooms: my rating before → after
  if (rated && !S.spectator) {
    const line = el("p", `${t("rating.change", { before: rated.before.rating, after: rated.after.rating })} · `, {
      class: "rating-change", "data-rating-change": rated.after.rating - rated.before.rating,
      "data-rating": rated.after.rating });
    line.append(el("span", t(`tier.${rated.after.tier}`), { class: "badge tier", "data-tier": rated.after.tier }));
    if (rated.provisional) line.append(el("small", ` (${t("rating.provisional")})`, { class: "muted" }));
    parts.push(line);
  }
  parts.push(hands);
  if (settled) parts.push(formulaDetails(settled));
  if (S.spectator ? settled : seated) parts.push(next);
  panel.replaceChildren(...parts);
  finalHands(view).then((cards) => {
    if (panel.dataset.key !== key) return;
    for (const [p, ids] of Object.entries(cards)) {
      const box = panel.querySelector(`[data-cards-left="${CSS.escape(p)}"]`);
      if (!box) continue;
      if (ids === null) {
        const n = (r.cards_left || {})[p] || 0;
        box.replaceChildren(...backs(n));
        box.dataset.known = "false";
      } else {
        box.replaceChildren(...ids.map((id) => cardElement(id, { small: true, attrs: { "data-card": id } })));
        box.dataset.known = "true";
      }
    }
  });
}

function formulaDetails(msg) {
  const b = msg.breakdown || {};
  const box = el("details", "", { class: "formula" });
  box.append(el("summary", t("btn.details")));
  const rows = [];
  const row = (k, v, attrs = {}) => {
    const tr = document.createElement("tr");
    tr.append(el("th", k), el("td", v, attrs));
    rows.push(tr);
  };
  const names = (text) => namedFormula(text, Object.keys(msg.scores || b.xiang || {}), nameOf);
  row(t("settle.X"), `${b.X} — ${t("settle.XWhy")}`, { "data-term": "X" });
  for (const [p, x] of Object.entries(b.xiang || {})) {
    // the bomb's strength in the page's language (xiang, 相), or "no bomb" when none was played
    const words = x.xiang ? t("settle.xiangValue", { xiang: x.xiang, c: x.c, b: x.b }) : t("settle.xiangNone", { c: x.c, b: x.b });
    row(t("settle.xiang", { name: nameOf(p) }), words, { "data-xiang": p, "data-xiang-value": x.xiang || 0 });
  }
  // what the payer held capped what they paid (an escape's too, before its share)
  const cap = () => {
    if (b.cap && b.cap.applied) {
      row(t("settle.cap"), t("settle.capText", { payer: nameOf(b.cap.payer), owed: b.cap.owed, paid: b.cap.paid }), { "data-term": "cap" });
    }
  };
  if (b.escape) {
    row(t("settle.escape"), names(b.escape.formula), { "data-term": "escape" });
    cap();
    row(t("settle.received"), receivedWords(b.escape), { "data-term": "received" });
  } else {
    row(t("settle.a"), `${b.a} — ${kouWords(b.kou)}`, { "data-term": "a" });
    row(t("settle.b"), `${b.b}`, { "data-term": "b" });
    row(t("settle.win.formula"), b.win_formula || "", { "data-term": "win" });
    row(t("settle.contribution"), names(b.contribution_formula), { "data-term": "contribution" });
    cap();
  }
  const table = document.createElement("table");
  table.append(...rows);
  box.append(table);
  return box;
}

// ---- lobby ---------------------------------------------------------------------------------------

function roomWords(name) {
  const r = (S.rooms || []).find((x) => x.name === name);
  const mode = r ? r.mode : name;
  return name === "points" || name === "wealth" || !r ? modeWords(mode) : `${name} · ${modeWords(mode)}`;
}

function renderRooms() {
  const list = S.lobbyRooms || S.rooms || [];
  const box = document.querySelector(".rooms");
  const wanted = new URL(window.location.href).searchParams.get("room");
  const before = (document.querySelector("input[name=room]:checked") || {}).value;
  const rooms = [...list];
  if (wanted && !rooms.some((r) => r.name === wanted)) rooms.push({ name: wanted, mode: "points" });
  // chosen first: the room the player picked on this page, the link's ?room=, the room this
  // browser joined last, else the first room that seats the player (then the first at all)
  const last = storedRoom();
  const open = rooms.filter((r) => r.admits !== false);
  const choice = before || wanted || (rooms.some((r) => r.name === last && r.admits !== false) ? last : null)
    || (open[0] || rooms[0] || {}).name;
  box.replaceChildren(...rooms.map((r) => {
    const l = el("label", "", { class: "room", "data-room": r.name });
    const input = el("input", "", { type: "radio", name: "room", value: r.name });
    input.checked = r.name === choice;
    const facts = [];
    if (r.base !== undefined) facts.push(t("lobby.base", { x: r.base }));
    if (r.need !== undefined) facts.push(r.need > 0 ? t("lobby.need", { n: r.need }) : t("lobby.open"));
    if (r.turn_seconds) facts.push(t("lobby.turn", { s: r.turn_seconds }));
    const text = el("span", "", { class: "room-text" });
    text.append(el("b", roomWords(r.name)), el("span", facts.join(" · "), { class: "room-facts" }));
    if (r.balance !== undefined) {
      text.append(el("span", t("lobby.balance", { n: `${r.balance} ${t(r.mode === "wealth" ? "unit.coins" : "unit.points")}` }),
        { class: "room-balance", "data-room-balance": r.balance }));
    }
    if (r.admits === false) {
      l.classList.add("closed");
      text.append(el("span", t("lobby.cannot", { need: r.need, balance: r.balance }), { class: "room-why", "data-room-why": "balance" }));
    }
    l.append(input, text);
    return l;
  }));
  renderLobbyWhy();
}

function renderLobbyWhy() {
  const picked = (document.querySelector("input[name=room]:checked") || {}).value;
  const r = (S.lobbyRooms || []).find((x) => x.name === picked);
  const why = $("#lobby-why");
  const blocked = !!(r && r.admits === false);
  why.hidden = !blocked;
  why.textContent = blocked ? t("lobby.cannot", { need: r.need, balance: r.balance }) : "";
  const join = $("[data-action=join]");
  const cooling = (S.cooldownUntil || 0) > Date.now();
  join.disabled = blocked || cooling;
  join.toggleAttribute("data-cooldown", cooling);
}

async function loadLobbyRooms() {
  if (!S.token || S.spectator || S.role !== "player") return;
  try {
    const r = await api("/api/rooms", S.token);
    S.lobbyRooms = r.rooms;
    if (S.balance === null && r.rooms.length) {
      const first = r.rooms[0];
      S.balance = first.balance;
    }
    renderRooms();
    render();
  } catch (e) {
    // an older gateway: the room list from /api/client-config stays
  }
}

// ---- the socket's messages -----------------------------------------------------------------------

function onMessage(msg) {
  if (msg.names) Object.assign(S.names, msg.names);
  switch (msg.kind) {
    case "welcome":
      if (msg.renewed) break;  // the token was renewed: same socket, same place
      S.me = msg.player;
      S.role = msg.role;
      if (msg.name) S.names[msg.player] = msg.name;
      if (S.spectator || msg.role === "spectator" || msg.role === "operator") {
        S.spectator = true;
        if (S.watchMatch) S.link.send({ type: "Watch", match: S.watchMatch });
        else setStatus(t("status.spectatorToken"));
      } else if (!S.match && !S.lobby) {
        setStatus(t("status.chooseRoom"));
        loadLobbyRooms();
      }
      render();
      break;
    case "lobby":
      S.lobby = msg.state === "removed" ? null : msg;
      S.leaving = false;
      if (msg.state === "queued" && S.match && S.views[S.match] && S.views[S.match].phase !== "finished") {
        // back in the queue (the other player left before the deal): that table is gone
        S.left[S.match] = true;
        delete S.views[S.match];
        S.match = null;
      }
      if (msg.state === "removed") {
        const why = removedText(msg.reason);
        const words = isLeave(msg.reason) ? t(msg.table ? "status.left" : "status.leftQueue") : t("status.removed", { why });
        // the table is left: a match there that never finished leaves the page, and its later
        // updates (the other player's removal, an abandoned hand) do not bring it back
        if (msg.match) S.left[msg.match] = true;
        for (const m of [msg.match, S.match]) {
          if (m && S.views[m] && S.views[m].phase !== "finished") delete S.views[m];
        }
        // a result held until Ready leaves with the table: the lobby is the page now (a private
        // series' last hand leaves when its final standings close, dropClosedSeries)
        if (removalCode(msg.reason) !== "series_over") {
          for (const m of [S.hold, S.match]) if (m) S.left[m] = true;
          S.hold = null;
          S.match = null;
        }
        if (!isLeave(msg.reason)) notice(words, "warn", "removed");  // the player's own Leave: the status says it
        setStatus(words);
        loadLobbyRooms();
        dropClosedSeries();
      }
      render();
      break;
    case "update":
      onUpdate(msg, S.link.brief);
      break;
    case "rejected":
      onRejected(msg);
      break;
    case "rating":  // a ranked match moved my rating (docs/RANKED.md)
      S.ratings[msg.match] = msg;
      S.tiers[S.me] = { tier: msg.after.tier, rating: msg.after.rating };
      render();
      break;
    case "settled":
      S.settled[msg.match] = msg;
      if (msg.balances && S.me in msg.balances) S.balance = msg.balances[S.me];
      if (!S.hold && S.views[msg.match] && S.views[msg.match].phase === "finished" && S.match !== msg.match) S.hold = msg.match;
      render();
      break;
    default:
      break;
  }
}

function onRejected(msg) {
  S.leaving = false;  // a refused Leave: the button comes back
  // the Ready that carried our seed was refused: the seed is not in the deal (the page and the
  // gateway that serves it ship together, so a refusal is never "seeds not forwarded")
  if (S.pendingSeed && msg.command_id === S.pendingSeed.id) S.pendingSeed = null;
  if (msg.view && msg.view.match_id) {
    S.views[msg.view.match_id] = msg.view;
    S.versions[msg.view.match_id] = Math.max(S.versions[msg.view.match_id] || 0, msg.view.version);
  }
  const view = shown();
  S.sent = null;  // refused: the player may act again at once
  S.refusal = { code: msg.code, version: view ? view.version : null };
  render();
  // the catalogue's words for the code; the code itself stays in data-code (for support)
  if (msg.code === "cooldown" && msg.retry_after_ms > 0) {
    // Join waits with the cooldown: a tap before it ends would only be refused again
    const until = Date.now() + msg.retry_after_ms;
    S.cooldownUntil = until;
    renderLobbyWhy();
    setTimeout(renderLobbyWhy, msg.retry_after_ms + 50);
    countDown(until);
    return;
  }
  // the owner's private table waits for the friend: the way out is to cancel it (private.js)
  const words = msg.code === "already_placed" && !$("[data-private-created]").hidden
    ? t("refusal.ownTableOpen") : refusalText(msg.code);
  $("#notices").replaceChildren();  // a refusal is read whole, never under a notice
  setStatus(words, "error", msg.code || "rejected");
}

/** The leave cooldown's refusal, counting down the seconds until a Join is taken again; then
 * the lobby's own words.  Another status written meanwhile (or a newer cooldown) ends it. */
function countDown(until) {
  const s = $("[data-status]");
  const left = Math.ceil((until - Date.now()) / 1000);
  if (left > 0) {
    setStatus(t("refusal.cooldownWait", { s: left }), "error", "cooldown");
    s.dataset.until = String(until);
    setTimeout(() => {
      if (s.dataset.code === "cooldown" && s.dataset.until === String(until)) countDown(until);
    }, until - Date.now() - (left - 1) * 1000);
  } else if (s.dataset.code === "cooldown" && !S.lobby) {
    setStatus(t("status.chooseRoom"));
  }
}

function onLinkState(state, ev) {
  S.linkState = state;
  const l = $("#link");
  l.dataset.link = state;
  l.textContent = has(`link.${state}`) ? t(`link.${state}`) : state;
  l.hidden = !S.link;  // no socket yet (the sign-in form): nothing is connecting
  if (state === "reconnecting") setStatus(t("status.connLost"), "error");
  if (state === "refused") {
    // why, by the close code (docs/PROTOCOL.md "Close codes"); the badge word for any other
    const why = ev && has(`close.${ev.code}`) ? t(`close.${ev.code}`) : t("link.refused");
    render();  // a closed socket takes no command: the lobby's buttons go
    setStatus(t("status.sessionClosed", { why }), "error", ev ? String(ev.code) : null);
    if (ev && ev.code === 4401) {
      forgetToken();
      S.link = null;
      boot();
    }
  }
  if (state === "open" && shown()) render();
}

/** The final standings of a private series were closed: its last hand leaves the table and the
 * player is back in the lobby, as after any table ends. */
function seriesClosed(seriesId) {
  S.closedSeries = seriesId;
  dropClosedSeries();
  render();
}

/** Let go of the closed series' hands once the player has left its table (the lobby's removal,
 * `series_over`, may come after the standings were closed). */
function dropClosedSeries() {
  const seriesId = S.closedSeries;
  const ofSeries = (m) => !!m && m.startsWith(`${seriesId}-`);
  if (!seriesId || (S.lobby && ofSeries(S.lobby.match))) return;  // still seated there
  S.closedSeries = null;
  if (ofSeries(S.hold)) S.hold = null;
  if (ofSeries(S.match)) {
    S.left[S.match] = true;
    S.match = null;
  }
  if (!S.lobby) {
    setStatus(t("status.chooseRoom"));
    loadLobbyRooms();
  }
}

// ---- start ---------------------------------------------------------------------------------------

function start(token) {
  if (S.link) {
    S.token = token;  // the host page's (or --dev's) next token: same socket, same place
    S.link.renew(token);
    scheduleRenewal(token);
    return;
  }
  S.token = token;
  scheduleRenewal(token);
  const c = claims(token);
  if (c) {
    S.me = c.sub;
    S.role = c.role || "player";
    if (c.name) S.names[c.sub] = c.name;
    if (S.role !== "player") S.spectator = true;
  }
  show("#login", false);
  show("#no-token", false);
  const proto = window.location.protocol === "https:" ? "wss:" : "ws:";
  S.link = new Client({ url: `${proto}//${window.location.host}/ws`, token });
  for (const name of ["welcome", "lobby", "settled", "rating"]) S.link.on(name, onMessage);
  for (const name of ["update", "rejected"]) S.link.on(name, ({ message }) => onMessage(message));
  S.link.on("say", onSay);
  setupPrivate(S.link, { me: () => S.me, name: (p) => nameOf(p),
    room: () => (document.querySelector("input[name=room]:checked") || {}).value || null,
    seriesClosed, shown, laidOut: sheetTop });
  S.link.on("state", ({ state, code, reason }) => onLinkState(state, code === undefined ? undefined : { code, reason }));
  S.link.connect();
  $("#link").hidden = false;
  render();
}

/** With --dev the page mints its own next token a minute before this one's exp; a framed page
 * waits for its host page's (tokenFromHost). */
function scheduleRenewal(token) {
  const c = claims(token);
  clearTimeout(S.renewTimer);
  if (!c || typeof c.exp !== "number") return;
  const due = c.exp * 1000 - Date.now() - 60000;
  S.renewTimer = setTimeout(async () => {
    const cfg = await clientConfig();
    if (!cfg.dev || !S.link) return;
    try {
      start(await devToken(c.sub, c.role || "player"));
    } catch (e) {
      /* the socket closes 4401 at exp and the page says so */
    }
  }, Math.min(Math.max(due, 1000), 2 ** 31 - 1));
}

function usable(token) {
  // /watch/<id> opens as a spectator: a player's token kept from the table does not watch
  const c = token ? claims(token) : null;
  if (!c) return null;
  if (S.watchMatch && (c.role || "player") === "player") return null;
  return token;
}

async function boot() {
  S.link = null;
  const urlToken = tokenFromUrl();
  const token = urlToken || usable(storedToken());
  const cfg = clientConfig().then((x) => {
    S.dev = !!x.dev;
    S.rooms = x.rooms || [];
    renderRooms();
    if (S.link) render();  // what depends on the room's config (a ranked room's tier badges)
    return x;
  });
  if (token) {
    start(token);
    return;
  }
  tokenFromHost(start);
  const conf = await cfg;
  if (S.link) return;
  if (conf.dev) {
    const watching = !!S.watchMatch;
    $("#login-title").dataset.i18n = watching ? "login.titleWatch" : "login.title";
    $("#login-submit").dataset.i18n = watching ? "login.submitWatch" : "login.submit";
    $("#login-title").textContent = t($("#login-title").dataset.i18n);
    $("#login-submit").textContent = t($("#login-submit").dataset.i18n);
    $("#login-watch-row").hidden = watching;
    show("#login", true);
    setStatus(t(watching ? "status.typeNameWatch" : "status.typeName"));
    $("#login-name").focus();
  } else {
    show("#no-token", true);
    setStatus(t("status.waitToken"));
  }
}

function relabel() {
  renderLangButton();
  relabelSay();
  renderArrange();
  renderMute();
  const terms = document.querySelector(".glossary [data-i18n='glossary.terms']");
  if (terms) terms.lang = currentLang() === "en" ? "zh-Hans" : currentLang();
  $("[data-settlement]").dataset.key = "";
  onLinkState(S.linkState);
  renderRooms();
  render();
  if (!shown() && !S.lobby) {
    if (!$("#login").hidden) setStatus(t(S.watchMatch ? "status.typeNameWatch" : "status.typeName"));
    else if (S.me && !S.spectator) setStatus(t("status.chooseRoom"));
  }
}

onLang(relabel);
bind();
bindPrivate();
setupSay({ sendSay: (phrase) => S.link && S.link.say(phrase), player: () => S.me });
startLang().catch(() => {}).then(() => {
  relabel();
  boot();
});
