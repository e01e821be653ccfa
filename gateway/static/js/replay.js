// The operator's replay viewer: /replay/<match_id> with an operator token (?token=, postMessage
// {type: "shuangkou-token"}, or a dev token), or an exported file (shuangkou export).  Read-only:
// GET /api/replay/<id> and POST /api/replay compute the timeline on the server
// (projections/timeline.py), the same one `shuangkou replay` prints.
import { cardElement } from "./cards.js";
import { KOU } from "./words.js";
import { clientConfig, tokenFromHost } from "./auth.js";

const $ = (s) => document.querySelector(s);
const KEY = "shuangkou-operator-token";
const pathMatch = window.location.pathname.match(/^\/replay\/(.+)$/);
const matchId = pathMatch ? decodeURIComponent(pathMatch[1]) : null;
const V = { token: null, data: null, i: 0, timer: null };

const ACTOR = { player: "player", timeout: "timeout 超時", trustee: "trustee 託管", auto: "auto-pass 自動過", system: "system" };

function setStatus(t, kind = "") {
  const el = $("[data-status]");
  el.textContent = t;
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
  if (ms < 60000) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.floor(ms / 1000);
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
}

async function call(path, body) {
  const r = await fetch(path, {
    method: body === undefined ? "GET" : "POST",
    headers: { Authorization: `Bearer ${V.token}` },
    body,
  });
  const data = await r.json().catch(() => ({ reason: `HTTP ${r.status}` }));
  if (!r.ok) throw new Error(data.reason || `HTTP ${r.status}`);
  return data;
}

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
  const players = d.players.map((p) => `${p.player} (seat ${p.seat}, balance ${p.balance}, level ${p.level}, X=${p.base})`).join(" · ");
  const ledger = d.stored_matches === true ? ["✓ the ledger's stored settlement equals the replay", "ok-mark"]
    : d.stored_matches === false ? ["✕ the ledger's stored settlement DIFFERS from the replay", "bad-mark"]
      : ["no stored settlement (not settled yet, or not in this file)", "muted"];
  meta.replaceChildren(
    el("div", `${d.match_id} · ${d.mode === "wealth" ? "財富 wealth" : "積分 points"} room ${d.room || ""} · ${d.phase}`),
    el("div", players),
    el("div", `${d.steps.length} events · started ${d.steps.length ? d.steps[0].time : ""} UTC`
      + (d.finished_ms ? ` · finished ${d.steps[d.steps.length - 1].time} UTC` : "")),
    el("div", ledger[0], { class: ledger[1], "data-ledger": d.stored_matches === null ? "none" : String(d.stored_matches) }),
  );
  $("#title").textContent = d.match_id;
  const probs = $("#problems");
  probs.hidden = !d.problems.length;
  probs.replaceChildren(el("b", "Problems found by the check:"), ...d.problems.map((p) => el("div", p)));
}

function renderList() {
  const list = $("#steps");
  const items = [];
  let trick = null;
  V.data.steps.forEach((s, i) => {
    if ((s.type === "CardsPlayed" || s.type === "Passed") && s.trick !== trick) {
      trick = s.trick;
      items.push(el("li", `──── trick ${trick} ────`, { class: "trick", "data-trick": trick }));
    }
    const turn = s.turn_ms !== null ? ` +${fmtMs(s.turn_ms)}` : "";
    const li = el("li", `#${s.seq} ${s.time.slice(11)}${turn}  ${s.text}`, { "data-replay-step": i });
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
    box.replaceChildren(el("p", "No cards dealt yet at this step. 尚未發牌", { class: "muted" }));
    return;
  }
  const s = V.data.steps[i];
  box.replaceChildren(...Object.entries(hands).map(([p, ids]) => {
    const seat = el("div", null, { class: "seat", "data-replay-hand": p });
    const onTurn = s.player === p && (s.type === "CardsPlayed" || s.type === "Passed");
    if (onTurn) seat.classList.add("on-turn");
    seat.append(el("div", `${p} — ${ids.length} cards left 剩 ${ids.length} 張`, { class: "name", "data-cards-left": ids.length }));
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
    el("div", `#${s.seq} · ${s.time} UTC` + (s.turn_ms !== null ? ` · turn took ${fmtMs(s.turn_ms)}` : "")
      + (s.trick ? ` · trick ${s.trick}` : ""), { class: "when" }),
  ];
  const line = el("div", s.text);
  line.append(el("span", ACTOR[s.actor] || s.actor, { class: `actor ${s.actor}`, "data-actor": s.actor }));
  parts.push(line);
  if (s.cards) {
    const row = el("div", null, { class: "last-cards" });
    row.append(...s.cards.map((id) => cardElement(id, { attrs: { "data-table-card": id }, small: true })));
    parts.push(row);
  }
  if (s.notice_zh) parts.push(el("div", `${s.notice_zh} — ${s.notice_en}`, { class: "notice warn" }));
  if (s.trick_break && s.type === "Passed") parts.push(el("div", "— the trick ends (R-6.2) 本輪結束 —", { class: "muted" }));
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
  row("X 對局分", `${b.X}`, { "data-term": "X" });
  for (const [p, x] of Object.entries(b.xiang || {})) {
    row(`${p} 相`, `${x.xiang} — ${x.source} (R-8.3${/R-9/.test(x.source) ? ", R-9" : ""}${/R-10/.test(x.source) ? ", R-10" : ""}) · c=${x.c} · b=${x.b}`,
      { "data-xiang": p, "data-xiang-value": x.xiang });
  }
  if (b.escape) {
    row("逃跑 escape", `${b.escape.rule}: ${b.escape.formula}`, { "data-term": "escape" });
    row("received", `${b.escape.received_formula}; burned ${b.burned || 0}`);
  } else {
    row("a (kou)", `${b.a} — ${KOU[b.kou] || b.kou}: ${b.a_from}`, { "data-term": "a" });
    row("b (翻倍)", `${b.b} — ${b.b_from}`, { "data-term": "b" });
    row("X·a·b", b.win_formula, { "data-term": "win" });
    row("X·c (貢獻)", b.contribution_formula, { "data-term": "contribution" });
    if (b.cap && b.cap.applied) row("cap R-11.2", `${b.cap.payer} owed ${b.cap.owed}, paid ${b.cap.paid}`);
  }
  const table = el("table");
  table.append(...rows);
  const scores = el("ul", null, { class: "scores" });
  for (const [p, v] of Object.entries(st.scores)) {
    const li = el("li", `${p}: `);
    li.append(el("b", v > 0 ? `+${v}` : `${v}`, { "data-score": p }));
    scores.append(li);
  }
  const lines = el("pre", V.data.settlement_lines.join("\n"), { class: "muted settlement-lines" });  // no inline style (CSP)
  panel.replaceChildren(el("h2", `Settlement 結算 — ${st.winner} wins, ${KOU[st.kou] || st.kou}`), scores, table, lines);
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
  $("#pos").textContent = `step ${V.i + 1} / ${n}`;
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
  $("[data-action=autoplay]").textContent = "Autoplay ▶▶";
}

function toggleAutoplay() {
  if (V.timer) {
    stopAutoplay();
    return;
  }
  if (V.i >= V.data.steps.length - 1) go(0);
  V.timer = setInterval(() => go(V.i + 1), Number($("#speed").value));
  $("[data-action=autoplay]").setAttribute("aria-pressed", "true");
  $("[data-action=autoplay]").textContent = "Pause ❚❚";
}

function show(data) {
  V.data = data;
  $("#body").hidden = false;
  $("#jump").max = String(Math.max(0, data.steps.length - 1));
  renderMeta();
  renderList();
  go(0);
  document.getElementById("viewer").dataset.loaded = "true";
  setStatus(`${data.match_id}: ${data.steps.length} events${data.problems.length ? `, ${data.problems.length} problem(s)` : ", the check found no problem"}`,
    data.problems.length ? "error" : "");
}

// ---- start ------------------------------------------------------------------------------------------

async function load() {
  if (!matchId || matchId === "file") {
    setStatus("Load an exported file 載入匯出檔");
    return;
  }
  setStatus(`Loading ${matchId}… 載入中`);
  try {
    show(await call(`/api/replay/${encodeURIComponent(matchId)}`));
  } catch (e) {
    setStatus(`Cannot load ${matchId}: ${e.message}`, "error");
  }
}

function bind() {
  $("[data-action=first]").addEventListener("click", () => go(0));
  $("[data-action=back]").addEventListener("click", () => go(V.i - 1));
  $("[data-action=forward]").addEventListener("click", () => go(V.i + 1));
  $("[data-action=last]").addEventListener("click", () => go(V.data.steps.length - 1));
  $("[data-action=autoplay]").addEventListener("click", toggleAutoplay);
  $("#jump").addEventListener("input", (ev) => go(Number(ev.target.value)));
  document.addEventListener("keydown", (ev) => {
    if (!V.data || ev.target.tagName === "INPUT") return;
    if (ev.key === "ArrowRight") go(V.i + 1);
    if (ev.key === "ArrowLeft") go(V.i - 1);
  });
  $("#file").addEventListener("change", async (ev) => {
    const f = ev.target.files[0];
    if (!f) return;
    if (!V.token) {
      setStatus("An operator token is needed 需要操作員權限", "error");
      return;
    }
    try {
      const text = await f.text();
      const q = matchId && matchId !== "file" ? `?match=${encodeURIComponent(matchId)}` : "";
      show(await call(`/api/replay${q}`, text));
    } catch (e) {
      setStatus(`Cannot read ${f.name}: ${e.message}`, "error");
    }
  });
  $("#login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const r = await fetch("/api/dev/token", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ name: $("#login-name").value.trim(), role: "operator" }) });
    const body = await r.json();
    if (!r.ok) {
      setStatus(body.reason || "refused", "error");
      return;
    }
    useToken(body.token);
  });
}

function useToken(t) {
  V.token = t;
  sessionStorage.setItem(KEY, t);
  $("#login").hidden = true;
  load();
}

async function boot() {
  bind();
  const url = new URL(window.location.href);
  const t = url.searchParams.get("token");
  if (t) {
    url.searchParams.delete("token");
    window.history.replaceState(null, "", url.pathname + url.search);
  }
  const token = t || sessionStorage.getItem(KEY);
  if (token) {
    useToken(token);
    return;
  }
  tokenFromHost(useToken, KEY);  // only from the --frame-ancestors origins
  const cfg = await clientConfig();
  if (cfg.dev) $("#login").hidden = false;
  setStatus("An operator token is needed: ?token=… 需要操作員權限");
}

boot();
