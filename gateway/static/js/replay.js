// The operator's replay viewer: /replay/<match_id> with an operator token (?token=, postMessage
// {type: "shuangkou-token"}, or a dev token), or an exported file (shuangkou export).  Read-only:
// GET /api/replay/<id> and POST /api/replay compute the timeline on the server
// (projections/timeline.py), the same one `shuangkou replay` prints.  Words from the i18n
// catalogues, one language at a time (i18n.js): each step is worded here from its event's
// fields (``fields``), not from the timeline's English line.
import { cardElement, sortCards } from "./cards.js";
import { byWords, escapeRuleId, eventReading, isBot, kouWords, modeWords, namedFormula, readingWords, receivedWords, signed } from "./words.js";
import { api, claims, clientConfig, devToken, storedToken, tokenFromHost, tokenFromUrl } from "./auth.js";
import { currentLang, cycleLang, has, onLang, startLang, t } from "./i18n.js";

const $ = (s) => document.querySelector(s);
const KEY = "shuangkou-operator-token";
const pathMatch = window.location.pathname.match(/^\/replay\/(.+)$/);
const matchId = pathMatch ? decodeURIComponent(pathMatch[1]) : null;
const V = { token: null, data: null, i: 0, timer: null };

// what the status line says, as a function: it is worded again when the language changes
let status = () => "";

function actorWords(actor) {
  return has(`replay.actor.${actor}`) ? t(`replay.actor.${actor}`) : actor;
}

function setStatus(words, kind = "") {
  status = typeof words === "function" ? words : () => words;
  const el = $("[data-status]");
  el.textContent = status();
  el.dataset.kind = kind;
}

function el(tag, text, attrs = {}) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 60000) return t("replay.seconds", { s: (ms / 1000).toFixed(1) });
  const s = Math.floor(ms / 1000);
  return t("replay.minutes", { m: Math.floor(s / 60), s: String(s % 60).padStart(2, "0") });
}

const utc = (time) => t("replay.utc", { time });

/** The room in the page's language: its mode, and its name when that is not the mode's (as on
 * the table page). */
function roomWords(d) {
  return !d.room || d.room === "points" || d.room === "wealth" ? modeWords(d.mode) : `${d.room} · ${modeWords(d.mode)}`;
}

/** Why the server refused, in the page's language where the catalogue has its code. */
function why(e) {
  if (!e.code || !has(`replay.err.${e.code}`)) return e.message;
  // a bad request has several causes (not an export, too large, too long an id): the server says which
  return e.code === "bad_request" && e.message ? `${t(`replay.err.${e.code}`)} (${e.message})` : t(`replay.err.${e.code}`);
}

/** A player as the viewer names them: their display name when the answer has one (`names`),
 * a bot by the word the table uses for it, else the id. */
function who(player) {
  const names = (V.data && V.data.names) || {};
  if (names[player]) return names[player];
  return isBot(player) ? t("lobby.bot") : player;
}

/** A step in the page's language, from its event's fields; the timeline's English line for an
 * event this page does not know. */
function stepWords(s) {
  const f = s.fields || {};
  const name = who(s.player);
  const because = (what, reason) => (reason && has(`replay.why.${reason}`)
    ? t("replay.ev.why", { what, why: t(`replay.why.${reason}`) }) : what);
  switch (s.type) {
    case "MatchCreated":
      return t("replay.ev.created", { id: V.data.match_id, room: roomWords(V.data) });
    case "PlayerSeated":
      return t("replay.ev.seated", { name, seat: f.seat, balance: f.balance, level: f.level, base: f.base });
    case "PlayerReady":
      return t("replay.ev.ready", { name });
    case "PlayerRemoved":
      return t("replay.ev.removed", { name, why: t(has(`removed.${f.reason}`) ? `removed.${f.reason}` : "removed.other") });
    case "HandDealt":
      return t("replay.ev.dealt", { name: s.first ? who(s.first) : "" });
    case "CardsPlayed":
      return t("log.play", { name, what: readingWords(eventReading(f.reading)) + byWords(f.by) });
    case "Passed":
      if (f.by === "auto") return t("log.autoPass", { name });
      return t("log.pass", { name }) + byWords(f.by);
    case "TurnTimedOut":
      return t("notice.timeoutOther", { name, n: f.count });
    case "TrusteeshipStarted":
      return because(t("notice.trusteeOn", { name }), f.reason);
    case "TrusteeshipEnded":
      return because(t("notice.trusteeOff", { name }), f.reason);
    case "PlayerDisconnected":
      return t("notice.disconnected", { name });
    case "PlayerReconnected":
      return t("notice.reconnected", { name });
    case "PlayerEscaped":
      return has(`replay.policy.${f.policy}`)
        ? t("replay.ev.why", { what: t("notice.escaped", { name }), why: t(`replay.policy.${f.policy}`) })
        : t("notice.escaped", { name });
    case "ClockExtended":
      return because(t("replay.ev.clock", { kind: t(`replay.clock.${f.kind}`), s: (f.by_ms / 1000).toFixed(1) }), f.reason);
    case "MatchFinished":
      return because(t("replay.ev.finished", { name: who(f.winner), kou: kouWords(f.kou),
        left: Object.entries(f.cards_left || {}).map(([p, n]) => `${who(p)} ${n}`).join(", ") }), f.reason);
    case "MatchAbandoned":
      return because(t("replay.ev.abandoned"), f.reason);
    default:
      return s.text;
  }
}

const call = (path, body) => api(path, V.token, body);

// ---- rendering ------------------------------------------------------------------------------------

function handsAt(i) {
  const steps = V.data.steps;
  for (let k = i; k >= 0; k--) if (steps[k].hands) return steps[k].hands;
  return null;
}

function finishIndex() {
  return V.data.steps.findIndex((s) => s.type === "MatchFinished");
}

function renderMeta() {
  const d = V.data;
  const meta = $("#meta");
  // the ids stay beside the names: an operator finds the player with them (shuangkou matches)
  const players = d.players.map((p) => t("replay.player", { name: who(p.player) === p.player ? p.player
    : `${who(p.player)} [${p.player}]`, seat: p.seat, balance: p.balance, level: p.level,
    base: p.base })).join(" · ");
  const ledger = d.stored_matches === true ? ["replay.ledger.ok", "ok-mark"]
    : d.stored_matches === false ? ["replay.ledger.bad", "bad-mark"]
      : d.phase === "abandoned" ? ["replay.ledger.abandoned", "muted"] : ["replay.ledger.none", "muted"];
  const phase = has(`replay.phase.${d.phase}`) ? t(`replay.phase.${d.phase}`) : d.phase;
  meta.replaceChildren(
    el("div", t("replay.meta", { id: d.match_id, room: roomWords(d), phase })),
    el("div", players),
    el("div", t("replay.events", { n: d.steps.length, time: d.steps.length ? utc(d.steps[0].time) : "" })
      + (d.finished_ms ? ` · ${t("replay.finishedAt", { time: utc(d.steps[d.steps.length - 1].time) })}` : "")),
    el("div", t(ledger[0]), { class: ledger[1], "data-ledger": d.stored_matches === null ? "none" : String(d.stored_matches) }),
  );
  $("#title").textContent = d.match_id;
  const probs = $("#problems");
  probs.hidden = !d.problems.length;
  // the check's own findings are an operator's diagnostics, in English like `shuangkou replay`
  probs.replaceChildren(el("b", t("replay.problems")), ...d.problems.map((p) => el("div", p, { lang: "en" })));
}

function renderList() {
  const list = $("#steps");
  const items = [];
  let trick = null;
  V.data.steps.forEach((s, i) => {
    if ((s.type === "CardsPlayed" || s.type === "Passed") && s.trick !== trick) {
      trick = s.trick;
      items.push(el("li", `──── ${t("log.trick", { n: trick })} ────`, { class: "trick", "data-trick": trick }));
    }
    const turn = s.turn_ms !== null ? ` +${fmtMs(s.turn_ms)}` : "";
    const li = el("li", `#${s.seq} ${s.time.slice(11)}${turn}  ${stepWords(s)}`, { "data-replay-step": i, "data-step-type": s.type });
    if (s.notice) li.classList.add("notice-step");
    li.addEventListener("click", () => go(i));
    items.push(li);
  });
  list.replaceChildren(...items);
}

function renderHands(i) {
  const hands = handsAt(i);
  const box = $("#hands");
  if (!hands) {
    box.replaceChildren(el("p", t("replay.noCards"), { class: "muted" }));
    return;
  }
  const s = V.data.steps[i];
  box.replaceChildren(...Object.entries(hands).map(([p, ids]) => {
    const seat = el("div", null, { class: "seat", "data-replay-hand": p });
    const onTurn = s.player === p && (s.type === "CardsPlayed" || s.type === "Passed");
    if (onTurn) seat.classList.add("on-turn");
    seat.append(el("div", t("replay.cardsLeft", { name: who(p), n: ids.length }), { class: "name", "data-cards-left": ids.length }));
    const hand = el("div", null, { class: "hand" });
    hand.append(...ids.map((id) => cardElement(id, { attrs: { "data-hand-card": id }, wild: true, small: true })));
    seat.append(hand);
    return seat;
  }));
}

function renderNow(i) {
  const s = V.data.steps[i];
  const now = $("#now");
  const parts = [
    el("div", `#${s.seq} · ${utc(s.time)}` + (s.turn_ms !== null ? ` · ${t("replay.turnTook", { d: fmtMs(s.turn_ms) })}` : "")
      + (s.trick ? ` · ${t("log.trick", { n: s.trick })}` : ""), { class: "when" }),
  ];
  const line = el("div", stepWords(s));
  line.append(el("span", actorWords(s.actor), { class: `actor ${s.actor}`, "data-actor": s.actor }));
  parts.push(line);
  if (s.cards) {
    const row = el("div", null, { class: "last-cards" });
    row.append(...sortCards(s.cards).map((id) => cardElement(id, { attrs: { "data-table-card": id }, small: true })));
    parts.push(row);
  }
  if (s.type === "HandDealt" && Number.isInteger((s.fields || {}).lead_card)) {
    const lead = el("div", t("replay.leadCard"), { class: "lead-card", "data-lead-card": s.fields.lead_card });
    lead.append(cardElement(s.fields.lead_card, { small: true }));
    parts.push(lead);
  }
  if (s.notice_zh) {  // a TurnTimedOut's step: the event carries the notice in both languages
    // what the player was sent, word for word (a quotation: the engine's text, not this page's)
    const zh = currentLang().startsWith("zh");
    const box = el("div", `${t("replay.noticeSent")} `, { class: "notice warn", "data-notice-sent": "" });
    box.append(el("q", zh ? s.notice_zh : s.notice_en, { lang: zh ? "zh-Hant" : "en" }));
    parts.push(box);
  }
  if (s.trick_break && s.type === "Passed") parts.push(el("div", `— ${t("replay.trickEnds")} (R-6.2) —`, { class: "muted" }));
  now.replaceChildren(...parts);
}

function renderSettlement(i) {
  const panel = $("[data-settlement]");
  const fin = finishIndex();
  const st = V.data.settlement;
  if (!st || fin < 0 || i < fin) {
    panel.hidden = true;
    return;
  }
  const b = st.breakdown || {};
  const rows = [];
  const row = (k, v, attrs = {}) => {
    const tr = el("tr");
    tr.append(el("th", k), el("td", v, attrs));
    rows.push(tr);
  };
  // the rule ids (R-8.2 ...) stay beside the words: an operator settles a dispute by them
  row(t("settle.X"), `${b.X} — ${t("settle.XWhy")} (R-8.2)`, { "data-term": "X" });
  for (const [p, x] of Object.entries(b.xiang || {})) {
    const rules = `R-8.3${/R-9/.test(x.source) ? ", R-9" : ""}${/R-10/.test(x.source) ? ", R-10" : ""}`;
    const words = x.xiang ? t("settle.xiangValue", { xiang: x.xiang, c: x.c, b: x.b }) : t("settle.xiangNone", { c: x.c, b: x.b });
    row(t("settle.xiang", { name: who(p) }), `${words} (${rules})`, { "data-xiang": p, "data-xiang-value": x.xiang });
  }
  // R-11.2: what the payer held capped what they paid (an escape's too, before its share)
  const cap = () => {
    if (b.cap && b.cap.applied) {
      row(`${t("settle.cap")} (R-11.2)`, t("settle.capText", { payer: who(b.cap.payer), owed: b.cap.owed, paid: b.cap.paid }), { "data-term": "cap" });
    }
  };
  if (b.escape) {
    row(t("settle.escape"), `${b.escape.formula} (${escapeRuleId(b.escape)})`, { "data-term": "escape" });
    cap();
    row(t("settle.received"), `${receivedWords(b.escape)}; ${t("replay.burned", { n: b.burned || 0 })}`, { "data-term": "received" });
  } else {
    row(t("settle.a"), `${b.a} — ${kouWords(b.kou)} (R-7)`, { "data-term": "a" });
    row(t("settle.b"), `${b.b} (R-8.4)`, { "data-term": "b" });
    row(t("settle.win.formula"), b.win_formula, { "data-term": "win" });
    row(t("settle.contribution"), namedFormula(b.contribution_formula, ((V.data && V.data.players) || []).map((p) => p.player), who), { "data-term": "contribution" });
    cap();
  }
  const table = el("table");
  table.append(...rows);
  const scores = el("ul", null, { class: "scores" });
  for (const [p, v] of Object.entries(st.scores)) {
    const li = el("li", `${who(p)}: `);
    li.append(el("b", signed(v), { "data-score": p }));
    scores.append(li);
  }
  // the same settlement as `shuangkou replay` prints it (English, like the command line), folded
  const lines = el("details", null, { class: "formula" });
  lines.append(el("summary", t("replay.cliText")),
    el("pre", V.data.settlement_lines.join("\n"), { class: "muted settlement-lines", lang: "en" }));  // no inline style (CSP)
  panel.replaceChildren(el("h2", `${t("settle.title")} — ${t("settle.wins", { name: who(st.winner) })} · ${kouWords(st.kou)}`),
    scores, table, lines);
  panel.hidden = false;
}

function go(i) {
  const n = V.data.steps.length;
  V.i = Math.max(0, Math.min(n - 1, i));
  for (const li of document.querySelectorAll("#steps li[aria-current]")) li.removeAttribute("aria-current");
  const cur = document.querySelector(`#steps li[data-replay-step="${V.i}"]`);
  if (cur) {
    cur.setAttribute("aria-current", "step");
    cur.scrollIntoView({ block: "nearest" });
  }
  $("#jump").value = String(V.i);
  $("#pos").textContent = t("replay.position", { n: V.i + 1, total: n });
  $("#pos").dataset.stepIndex = String(V.i);
  $("[data-action=back]").disabled = V.i === 0;
  $("[data-action=first]").disabled = V.i === 0;
  $("[data-action=forward]").disabled = V.i === n - 1;
  $("[data-action=last]").disabled = V.i === n - 1;
  renderNow(V.i);
  renderHands(V.i);
  renderSettlement(V.i);
  if (V.i === n - 1) stopAutoplay();
}

function stopAutoplay() {
  if (V.timer) clearInterval(V.timer);
  V.timer = null;
  $("[data-action=autoplay]").setAttribute("aria-pressed", "false");
  $("[data-action=autoplay]").dataset.i18n = "replay.autoplay";
  $("[data-action=autoplay]").textContent = t("replay.autoplay");
}

function toggleAutoplay() {
  if (V.timer) {
    stopAutoplay();
    return;
  }
  if (V.i >= V.data.steps.length - 1) go(0);
  V.timer = setInterval(() => go(V.i + 1), Number($("#speed").value));
  $("[data-action=autoplay]").setAttribute("aria-pressed", "true");
  $("[data-action=autoplay]").dataset.i18n = "replay.pause";
  $("[data-action=autoplay]").textContent = t("replay.pause");
}

function show(data) {
  V.data = data;
  $("#body").hidden = false;
  $("#jump").max = String(Math.max(0, data.steps.length - 1));
  renderMeta();
  renderList();
  go(0);
  document.getElementById("viewer").dataset.loaded = "true";
  const k = data.problems.length;
  setStatus(() => t(k ? "replay.loadedProblems" : "replay.loaded", { id: data.match_id, n: data.steps.length, k }),
    k ? "error" : "");
}

// ---- start ------------------------------------------------------------------------------------------

async function load() {
  if (!matchId || matchId === "file") {
    setStatus(() => t("replay.loadFile"));
    return;
  }
  setStatus(() => t("replay.loading", { id: matchId }));
  try {
    show(await call(`/api/replay/${encodeURIComponent(matchId)}`));
  } catch (e) {
    setStatus(() => t("replay.cannotLoad", { id: matchId, why: why(e) }), "error");
  }
}

function bind() {
  $("[data-action=first]").addEventListener("click", () => go(0));
  $("[data-action=back]").addEventListener("click", () => go(V.i - 1));
  $("[data-action=forward]").addEventListener("click", () => go(V.i + 1));
  $("[data-action=last]").addEventListener("click", () => go(V.data.steps.length - 1));
  $("[data-action=autoplay]").addEventListener("click", toggleAutoplay);
  $("#jump").addEventListener("input", (ev) => go(Number(ev.target.value)));
  $("[data-action=lang]").addEventListener("click", cycleLang);
  document.addEventListener("keydown", (ev) => {
    if (!V.data || ev.target.tagName === "INPUT") return;
    if (ev.key === "ArrowRight") go(V.i + 1);
    if (ev.key === "ArrowLeft") go(V.i - 1);
  });
  $("#file").addEventListener("change", async (ev) => {
    const f = ev.target.files[0];
    if (!f) return;
    if (!V.token) {
      setStatus(() => t("replay.needTokenFile"), "error");
      return;
    }
    try {
      const text = await f.text();
      const q = matchId && matchId !== "file" ? `?match=${encodeURIComponent(matchId)}` : "";
      show(await call(`/api/replay${q}`, text));
    } catch (e) {
      setStatus(() => t("replay.cannotRead", { file: f.name, why: why(e) }), "error");
    }
  });
  $("#login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      useToken(await devToken($("#login-name").value.trim(), "operator", KEY));
    } catch (e) {
      setStatus(() => (e.code && has(`refusal.${e.code}`) ? t(`refusal.${e.code}`) : e.message), "error");
    }
  });
}

/** Each token's source keeps it (auth.js, under this page's KEY); this only uses it. */
function useToken(token) {
  V.token = token;
  $("#login").hidden = true;
  load();
}

/** The tab's table token (auth.js's own key) when it is an operator's: the table page took it
 * from ?token= or its host page, and this tab may read replays with it. */
function operatorToken(token) {
  const c = token ? claims(token) : null;
  return c && c.role === "operator" ? token : null;
}

async function boot() {
  bind();
  // as the table page: ?token=, else this tab's kept token; the dev form only without one
  const token = tokenFromUrl(KEY) || storedToken(KEY) || operatorToken(storedToken());
  if (token) {
    useToken(token);
    return;
  }
  tokenFromHost(useToken, KEY);  // only from the --frame-ancestors origins
  const cfg = await clientConfig();
  if (V.token) return;  // the host page's token came first: nothing to offer
  if (cfg.dev) $("#login").hidden = false;
  setStatus(() => t("replay.needToken"));
}

/** The language changed: every word on the page again (the static ones are i18n.js's). */
function relabel() {
  document.title = t("replay.pageTitle");
  $("[data-status]").textContent = status();
  if (V.data) {
    renderMeta();
    renderList();
    go(V.i);
  }
}

onLang(relabel);
startLang().catch(() => {}).then(() => {
  relabel();
  boot();
});
