// Private tables (好友房, issue 39) in the browser: the create-table and join-by-code form of the
// lobby, /t/<code> (joins right after sign-in), the table's code with a copy-link button, the series'
// tally (always shown during the series), the vote dialog with its countdown, what came of the vote
// (a line of the tally), and the final standings.
// Testability contract: data-action=create-table | join-table | copy-link | cancel-table (the
// owner's, while nobody joined: CancelTable) | request-end | vote-agree | vote-refuse | standings-close; data-private-hands, data-private-spectators, data-private-bots,
// data-private-join-code, data-private-join-error (a code that is not 6 letters or digits),
// data-private-created, data-private-code, data-private-link, data-series-tally (data-hand, data-hands),
// data-vote-dialog (data-vote-by), data-vote-countdown, data-standings (data-reason),
// data-standings-row (data-player, data-total), data-vote-result (passed | refused: the last vote's
// outcome, a lasting line in the series tally until the next vote opens or the series ends; empty
// and hidden when there is none; data-answered-by: who answered, data-timed-out: nobody did).
import { onLang, t } from "./i18n.js";
import { setText, signed } from "./words.js";

const P = { link: null, me: () => null, name: (p) => p, room: () => null, closed: () => {}, shown: () => null,
  laidOut: () => {}, created: null, series: null,
  vote: null, result: null, final: null, tick: null, joined: false };
const $ = (s) => document.querySelector(s);

/** The code of a /t/<code> page, or null. */
export function pathCode() {
  const m = window.location.pathname.match(/^\/t\/([A-Za-z0-9]{6})\/?$/);
  return m ? m[1].toUpperCase() : null;
}

function el(tag, text = "", attrs = {}) {
  const e = document.createElement(tag);
  if (text !== "") e.textContent = text;
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  return e;
}

/** Wire the private-table UI to a client.js link (called once per link). */
export function setupPrivate(link, { me, name, room, seriesClosed, shown, laidOut }) {
  P.link = link;
  // the page's layout under the tally (table.js: the result sheet's top), kept as the tally changes
  P.laidOut = laidOut || (() => {});
  P.shown = shown || (() => null);
  P.closed = seriesClosed || (() => {});
  P.me = me;
  P.name = name || ((p) => p);
  P.room = room;
  // the names come with the lobby's seated, the updates and settled (table.js keeps them): the
  // tally is written again after each, so a player is shown by name as soon as the page knows it
  for (const kind of ["lobby", "update", "settled"]) link.on(kind, () => renderTally());
  link.on("welcome", (m) => {
    const code = pathCode();
    if (code && !P.joined && m.role === "player") {
      P.joined = true;
      link.joinTable(code);
    }
  });
  link.on("private_table", (m) => {
    P.created = m;
    P.final = P.result = null;
    render();
    // on a phone the panel with the code opens under the lobby's form, below the fold: bring it
    // into view and say on the status line that the table waits for the friend
    $("[data-private-created]").scrollIntoView({ block: "center" });
    const status = $("[data-status]");
    status.textContent = t("status.tableOpen");
    status.dataset.kind = "";
    delete status.dataset.code;
  });
  link.on("series", onSeries);
  link.on("settled", (m) => { if (m.series) { P.series = m.series; render(); } });
  link.on("lobby", (m) => {
    if (m.state === "seated" && P.created && m.table === P.created.series_id) {
      P.series = P.series || { series_id: P.created.series_id, hand: 0, hands: P.created.hands, totals: {} };
      P.created = null;
      render();
    }
  });
  render();
}

function onSeries(m) {
  if (m.state === "tally") {
    P.series = { series_id: m.series_id, hand: m.hand, hands: m.hands, totals: m.totals, dissolving: !!m.dissolving };
    if (P.result && P.result.series_id !== m.series_id) P.result = null;
  } else if (m.state === "vote") {
    P.vote = m;
    P.result = null;
  } else if (m.state === "vote_passed" || m.state === "vote_refused") {
    // the dialog closes; what came of it stays said in the tally (a passed vote during a hand
    // ends the series only when that hand is settled)
    P.vote = null;
    P.result = { series_id: m.series_id, passed: m.state === "vote_passed", by: m.by, timed_out: !!m.timed_out };
    if (P.series && P.result.passed) P.series.dissolving = true;  // as a reconnect's tally says it
  } else if (m.state === "finished") {
    P.series = P.vote = P.created = P.result = null;
    if (m.reason === "cancelled") {  // the owner's own doing, before any hand: no standings to show
      P.final = null;
      render();
      P.closed(m.series_id);
      const status = $("[data-status]");
      status.textContent = t("status.tableCancelled");
      status.dataset.kind = "";
      delete status.dataset.code;
      return;
    }
    P.final = m;
  }
  render();
}

export function bindPrivate() {
  $("[data-action=create-table]").addEventListener("click", () => {
    const room = P.room();
    if (!P.link || !room) return;
    P.link.createTable(room, Number($("[data-private-hands]").value),
      { spectators: $("[data-private-spectators]").checked, bots: $("[data-private-bots]").checked });
  });
  $("[data-action=join-table]").addEventListener("click", () => {
    const code = $("[data-private-join-code]").value.trim();
    // a code has 6 letters or digits: anything else is said here, never sent (the gateway would
    // only answer that it did not understand the move)
    const bad = !/^[A-Za-z0-9]{6}$/.test(code);
    const why = $("[data-private-join-error]");
    why.hidden = !bad;
    why.textContent = bad ? t("private.badCode") : "";
    if (P.link && !bad) P.link.joinTable(code);
  });
  $("[data-action=copy-link]").addEventListener("click", async () => {
    const url = $("[data-private-link]").textContent;
    try {
      await navigator.clipboard.writeText(url);
      $("[data-action=copy-link]").textContent = t("private.copied");
    } catch (e) {
      /* no clipboard (an insecure page): the link stays shown to copy by hand */
    }
  });
  $("[data-action=cancel-table]").addEventListener("click", () => P.link && P.link.cancelTable());
  $("[data-action=request-end]").addEventListener("click", () => P.link && P.link.requestEnd());
  $("[data-action=vote-agree]").addEventListener("click", () => P.link && P.link.voteEnd(true));
  $("[data-action=vote-refuse]").addEventListener("click", () => P.link && P.link.voteEnd(false));
  $("[data-action=standings-close]").addEventListener("click", () => {
    const id = P.final && P.final.series_id;
    P.final = null;
    render();
    if (id) P.closed(id);  // table.js: the series' last hand leaves the table, the lobby shows
  });
  onLang(render);
}

function others(totals) {
  const me = P.me();
  return Object.keys(totals || {}).sort((a, b) => (a === me ? -1 : b === me ? 1 : a.localeCompare(b)));
}

function render() {
  const created = $("[data-private-created]");
  if (!created) return;
  created.hidden = !P.created;
  if (P.created) {
    $("[data-private-code]").textContent = P.created.code;
    $("[data-private-link]").textContent = `${window.location.origin}${P.created.link}`;
    $("[data-action=copy-link]").textContent = t("private.copy");
  }
  const why = $("[data-private-join-error]");
  if (!why.hidden) why.textContent = t("private.badCode");  // in the page's language
  renderTally();
  renderVote();
  renderStandings();
}

/** The hand the table shows: a series' hands are matches <series_id>-1, -2, …; with none shown,
 * the next one to be dealt. */
function handShown() {
  const view = P.shown();
  const prefix = `${P.series.series_id}-`;
  if (view && typeof view.match_id === "string" && view.match_id.startsWith(prefix)) {
    const n = Number(view.match_id.slice(prefix.length));
    if (Number.isInteger(n) && n > 0) return n;
  }
  return Math.min(P.series.hand + 1, P.series.hands);
}

/** The series' tally: the hand being played (data-hand: the hands settled), then each player's
 * name and running total; then the layout under it (``laidOut``) in the same task, so nothing
 * under the tally is covered until a resize observer catches up. */
export function renderTally() {
  drawTally();
  P.laidOut();
}

function drawTally() {
  const tally = $("[data-series-tally]");
  if (!tally) return;
  // while nobody joined, the code's panel says it all (a reload's tally of hand 0 is not shown)
  tally.hidden = !P.series || !!P.created;
  // nothing to ask once a vote passed: the series ends when the running hand is settled; nor
  // while nobody joined (a reload's tally): the owner cancels the table instead
  $("[data-action=request-end]").hidden = !P.series || !!P.vote || P.series.dissolving || !!P.created;
  if (!P.series) return;
  tally.dataset.hand = String(P.series.hand);
  tally.dataset.hands = String(P.series.hands);
  const parts = others(P.series.totals).map((p) => `${P.name(p)} ${signed(P.series.totals[p])}`);
  setText(tally.querySelector("[data-tally-text]"),
    [t("series.tally", { hand: handShown(), hands: P.series.hands }), ...parts].join(" · "));
  renderResult();
}

/** The last vote's outcome, a line of the tally ([data-vote-result]). */
function renderResult() {
  const line = $("[data-vote-result]");
  const r = P.result;
  line.hidden = !r;
  line.dataset.voteResult = r ? (r.passed ? "passed" : "refused") : "";
  if (!r) {
    setText(line, "");
    delete line.dataset.answeredBy;
    delete line.dataset.timedOut;
    return;
  }
  line.dataset.answeredBy = r.by || "";
  line.dataset.timedOut = String(r.timed_out);
  const mine = r.by === P.me();
  let key = r.passed ? "series.votePassed" : "series.voteRefused";
  if (r.passed && r.timed_out) key = "series.votePassedTimeout";
  else if (mine) key += "You";
  setText(line, t(key, { name: P.name(r.by) }));
}

function renderVote() {
  const box = $("[data-vote-dialog]");
  clearInterval(P.tick);
  box.hidden = !P.vote;
  if (!P.vote) return;
  const mine = P.vote.by === P.me();
  box.dataset.voteBy = P.vote.by;
  box.querySelector("[data-vote-text]").textContent = mine ? t("series.voteWaiting")
    : t("series.voteAsk", { name: P.name(P.vote.by) });
  $("[data-action=vote-agree]").hidden = mine;
  $("[data-action=vote-refuse]").hidden = mine;
  const count = () => {
    const left = Math.max(0, Math.ceil((P.vote ? P.vote.deadline_ms - Date.now() : 0) / 1000));
    $("[data-vote-countdown]").textContent = t("series.voteLeft", { s: left });
  };
  count();
  P.tick = setInterval(count, 1000);
}

function renderStandings() {
  const box = $("[data-standings]");
  box.hidden = !P.final;
  if (!P.final) return;
  const s = P.final.standings;
  box.dataset.reason = P.final.reason;
  box.querySelector("[data-standings-reason]").textContent = t(`series.reason.${P.final.reason}`);
  const rows = others(s.totals).map((p) => {
    const tr = el("tr", "", { "data-standings-row": "", "data-player": p, "data-total": s.totals[p] });
    tr.append(el("td", P.name(p)), el("td", signed(s.totals[p])), el("td", String((s.hands_won || {})[p] || 0)));
    return tr;
  });
  const head = el("tr");
  head.append(el("th", ""), el("th", t("series.total")), el("th", t("series.handsWon")));
  box.querySelector("[data-standings-table]").replaceChildren(head, ...rows);
  box.querySelector("[data-standings-hands]").textContent = t("series.handsPlayed", { n: s.per_hand.length });
}
