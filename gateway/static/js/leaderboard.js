// The leaderboard page (/leaderboard, docs/RANKED.md §5): a ranked room's top 100 in a season and,
// with the player's token (the table page's), "me" with my neighbours; a player may hide their
// name.  Data from GET /api/leaderboard; words from the i18n catalogues (one language at a time).
// Test hooks: [data-board=top|me] rows carry data-rank, data-player, data-tier; data-status.
import { api, clientConfig, storedToken } from "./auth.js";
import { cycleLang, onLang, startLang, t } from "./i18n.js";

const $ = (sel) => document.querySelector(sel);
const params = new URLSearchParams(window.location.search);
const S = { token: storedToken(), rooms: [], data: null };

function el(tag, text, attrs = {}) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) e.setAttribute(k, String(v));
  return e;
}

function row(entry, mine) {
  const tr = el("tr", null, { "data-rank": entry.rank, "data-player": entry.player, "data-tier": entry.tier,
    class: mine ? "me" : null });
  const name = entry.bot ? t("lobby.bot") : entry.name === null ? t("board.hidden") : entry.name;
  tr.append(el("td", String(entry.rank)), el("td", entry.name === null && mine ? t("board.me") : name),
    el("td", String(entry.rating)), el("td", ""));
  tr.lastChild.append(el("span", t(`tier.${entry.tier}`), { class: "badge tier", "data-tier": entry.tier }));
  return tr;
}

function render() {
  const d = S.data;
  const status = $("[data-status]");
  const top = $("[data-board=top] tbody");
  const me = $("[data-board=me] tbody");
  top.replaceChildren();
  me.replaceChildren();
  $("#me-section").hidden = true;
  if (!d) return;
  const mine = d.me ? d.me.player : null;
  top.append(...d.entries.map((e) => row(e, e.player === mine)));
  status.textContent = d.entries.length ? `${d.room} · ${d.season}` : t("board.empty");
  if (d.me) {
    me.append(...d.me.neighbours.map((e) => row(e, e.player === mine)));
    $("#me-section").hidden = false;
  } else if (d.me === null && S.token) {
    $("#me-section").hidden = false;
    me.append(el("tr", null).appendChild(el("td", t("board.notRated"), { colspan: 4 })).parentNode);
  }
  $("#board").dataset.loaded = "true";
}

async function load() {
  const room = $("#board-room").value;
  const season = $("#board-season").value.trim();
  if (!room) {
    $("[data-status]").textContent = t("board.noRoom");
    // no ranked room at all: nothing to choose and no table to fill, only the words
    $("#board-form").hidden = $("#top-section").hidden = !S.rooms.length;
    $("#board").dataset.loaded = "true";
    return;
  }
  const q = new URLSearchParams({ room, limit: "100" });
  if (season) q.set("season", season);
  if (S.token) q.set("around", "me");
  try {
    S.data = await api(`/api/leaderboard?${q}`, S.token);
    if (!season) $("#board-season").value = S.data.season;
  } catch (e) {
    S.data = null;
    $("[data-status]").textContent = e.message;
    $("#board").dataset.loaded = "true";
  }
  render();
}

async function boot() {
  const cfg = await clientConfig();
  S.rooms = (cfg.rooms || []).filter((r) => r.ranked);
  const sel = $("#board-room");
  sel.replaceChildren(...S.rooms.map((r) => el("option", r.name, { value: r.name })));
  if (params.get("room")) sel.value = params.get("room");
  if (params.get("season")) $("#board-season").value = params.get("season");
  $("#hide-row").hidden = !S.token;
  sel.addEventListener("change", () => { $("#board-season").value = ""; load(); });
  $("#board-season").addEventListener("change", load);
  $("#board-hide").addEventListener("change", async (ev) => {
    await api("/api/leaderboard/name", S.token, { hidden: ev.target.checked }).catch(() => {});
    load();
  });
  $("[data-action=lang]").addEventListener("click", cycleLang);
  await load();
}

onLang(render);
startLang().catch(() => {}).then(boot);
