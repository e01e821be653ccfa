// Quick phrases and emotes at the table (快捷語, docs/PROTOCOL.md §8 "Quick phrases").
// Testability contract: the picker button data-action=say (aria-expanded) opens data-say-picker,
// one button per id with data-phrase; a phrase said at the table shows at the sender's seat
// (the .seat whose data-player is the sender) for SHOW_MS as data-say, with data-say-player and
// data-phrase; the toggle data-action=mute-say (aria-pressed, data-muted) hides the opponent's
// phrases and is remembered in localStorage ("shuangkou-mute-say"). After a Say the picker's
// buttons rest for SAY_INTERVAL_MS (data-cooling), the gateway's limit.
import { EMOTES, PHRASES, SAY_INTERVAL_MS } from "./client.js";
import { t } from "./i18n.js";

export const SHOW_MS = 3000;
const MUTE_KEY = "shuangkou-mute-say";
const EMOJI = Object.freeze({
  emote_smile: "😊", emote_laugh: "😂", emote_cry: "😭", emote_angry: "😠", emote_cool: "😎",
  emote_surprised: "😮",
});

const $ = (sel) => document.querySelector(sel);
let send = () => null;  // the page's way to send a Say (its Client)
let me = () => null;  // the page's player (null: none yet)
let coolUntil = 0;
let coolTimer = null;

/** Whether the opponent's phrases are hidden (the page's stored choice). */
export function sayMuted() {
  try {
    return localStorage.getItem(MUTE_KEY) === "1";
  } catch (e) {
    return false;
  }
}

function setSayMuted(on) {
  try {
    if (on) localStorage.setItem(MUTE_KEY, "1");
    else localStorage.removeItem(MUTE_KEY);
  } catch (e) {
    /* a page without storage mutes for this visit only */
  }
}

/** What a phrase or emote shows: its words in the page's language, or its emoji. */
export function sayText(id) {
  return EMOJI[id] || t(`say.${id}`);
}

function button(id) {
  const b = document.createElement("button");
  b.type = "button";
  b.dataset.phrase = id;
  b.className = EMOJI[id] ? "say-emote" : "say-phrase";
  return b;
}

function openPicker(open) {
  const picker = $("[data-say-picker]");
  picker.hidden = !open;
  $("[data-action=say]").setAttribute("aria-expanded", open ? "true" : "false");
}

function cool() {
  const now = Date.now();
  const cooling = now < coolUntil;
  for (const b of document.querySelectorAll("[data-say-picker] [data-phrase]")) b.disabled = cooling;
  $("[data-say-picker]").dataset.cooling = cooling ? "true" : "false";
  clearTimeout(coolTimer);
  if (cooling) coolTimer = setTimeout(cool, coolUntil - now);
}

function say(id) {
  if (Date.now() < coolUntil) return;
  send(id);
  coolUntil = Date.now() + SAY_INTERVAL_MS;
  openPicker(false);
  cool();
}

/** The words of the picker, the toggle and the bubbles shown, in the page's language. */
export function relabelSay() {
  const open = $("[data-action=say]");
  open.setAttribute("aria-label", t("say.open"));
  open.title = t("say.open");
  $("[data-say-picker]").setAttribute("aria-label", t("say.open"));
  for (const b of document.querySelectorAll("[data-say-picker] [data-phrase]")) {
    b.textContent = sayText(b.dataset.phrase);
    if (EMOJI[b.dataset.phrase]) b.setAttribute("aria-label", t(`say.${b.dataset.phrase}`));
  }
  const mute = $("[data-action=mute-say]");
  const muted = sayMuted();
  mute.setAttribute("aria-pressed", muted ? "true" : "false");
  mute.dataset.muted = muted ? "true" : "false";
  mute.setAttribute("aria-label", t(muted ? "say.unmute" : "say.mute"));
  mute.title = t(muted ? "say.unmute" : "say.mute");
  for (const bubble of document.querySelectorAll("[data-say]")) bubble.textContent = sayText(bubble.dataset.phrase);
}

/** Build the picker and bind the buttons: `sendSay(id)` sends a Say, `player()` is the page's player. */
export function setupSay({ sendSay, player }) {
  send = sendSay;
  me = player;
  const picker = $("[data-say-picker]");
  picker.replaceChildren(...[...PHRASES, ...EMOTES].map(button));
  picker.addEventListener("click", (ev) => {
    const b = ev.target.closest("[data-phrase]");
    if (b && !b.disabled) say(b.dataset.phrase);
  });
  $("[data-action=say]").addEventListener("click", () => openPicker(picker.hidden));
  document.addEventListener("click", (ev) => {
    if (!picker.hidden && !ev.target.closest("[data-say-picker], [data-action=say]")) openPicker(false);
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && !picker.hidden) {
      openPicker(false);
      $("[data-action=say]").focus();
    }
  });
  $("[data-action=mute-say]").addEventListener("click", () => {
    const on = !sayMuted();
    setSayMuted(on);
    if (on) for (const bubble of document.querySelectorAll("[data-say]")) if (bubble.dataset.sayPlayer !== me()) bubble.remove();
    relabelSay();
  });
  relabelSay();
  cool();
}

/** Show or hide the picker (a player seated in a match not over) and the mute toggle (a player). */
export function renderSay({ canSay, player }) {
  $("[data-action=say]").hidden = !canSay;
  if (!canSay) openPicker(false);
  $("[data-action=mute-say]").hidden = !player;
}

/** A `say` message: a bubble at the sender's seat for SHOW_MS (none from a muted opponent). */
export function onSay(msg) {
  if (msg.player !== me() && sayMuted()) return;
  if (msg.player === me()) {  // the gateway's copy of my own (another tab's too): rest the picker
    coolUntil = Math.max(coolUntil, Date.now() + SAY_INTERVAL_MS);
    cool();
  }
  const seat = [...document.querySelectorAll("#match .seat[data-player]")].find((s) => s.dataset.player === msg.player);
  if (!seat) return;
  for (const old of seat.querySelectorAll("[data-say]")) old.remove();
  const bubble = document.createElement("div");
  bubble.className = EMOJI[msg.phrase] ? "say-bubble emote" : "say-bubble";
  bubble.dataset.say = "";
  bubble.dataset.sayPlayer = msg.player;
  bubble.dataset.phrase = msg.phrase;
  bubble.setAttribute("role", "status");
  bubble.textContent = sayText(msg.phrase);
  seat.append(bubble);
  setTimeout(() => bubble.remove(), SHOW_MS);
}
