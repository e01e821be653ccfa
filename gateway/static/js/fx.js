// A table that feels alive (issue 25): sounds made with WebAudio (no files), card motion and
// the bomb effect.  The mute switch ([data-action=mute], aria-pressed="true" while sound is
// off) is remembered in localStorage ("shuangkou-mute"); prefers-reduced-motion turns the
// motion off (the CSS does the same for its own effects).
const MUTE_KEY = "shuangkou-mute";
let ctx = null;

export function muted() {
  try {
    return localStorage.getItem(MUTE_KEY) === "1";
  } catch (e) {
    return false;
  }
}

export function setMuted(on) {
  try {
    localStorage.setItem(MUTE_KEY, on ? "1" : "0");
  } catch (e) {
    // private mode: for this page only
  }
}

export function reducedMotion() {
  return !!(window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches);
}

/** The audio context, made on a user gesture (browsers start it suspended before one). */
export function unlockAudio() {
  const AC = window.AudioContext || window.webkitAudioContext;
  if (!AC) return;
  if (!ctx) {
    try {
      ctx = new AC();
    } catch (e) {
      ctx = null;
      return;
    }
  }
  if (ctx.state === "suspended") ctx.resume().catch(() => {});
}

// [frequency Hz, start s, length s, wave, gain] per note
const SOUNDS = {
  turn: [[660, 0, 0.12, "sine", 0.18], [880, 0.13, 0.16, "sine", 0.18]],
  play: [[220, 0, 0.06, "triangle", 0.25], [180, 0.03, 0.08, "square", 0.05]],
  pass: [[300, 0, 0.08, "sine", 0.1]],
  bomb: [[90, 0, 0.45, "sawtooth", 0.3], [60, 0.05, 0.5, "square", 0.18], [140, 0, 0.2, "triangle", 0.2]],
  warn: [[1040, 0, 0.08, "square", 0.08], [1040, 0.16, 0.08, "square", 0.08]],
  win: [[523, 0, 0.15, "triangle", 0.2], [659, 0.15, 0.15, "triangle", 0.2], [784, 0.3, 0.3, "triangle", 0.22]],
  lose: [[392, 0, 0.2, "sine", 0.18], [330, 0.2, 0.2, "sine", 0.18], [262, 0.4, 0.35, "sine", 0.18]],
};

/** Play one of the table's sounds (nothing when muted or before the first gesture). */
export function sound(name) {
  if (muted() || !ctx || ctx.state !== "running") return;
  const notes = SOUNDS[name];
  if (!notes) return;
  const now = ctx.currentTime;
  for (const [freq, at, len, wave, gain] of notes) {
    const osc = ctx.createOscillator();
    const amp = ctx.createGain();
    osc.type = wave;
    osc.frequency.setValueAtTime(freq, now + at);
    if (name === "bomb") osc.frequency.exponentialRampToValueAtTime(Math.max(30, freq / 3), now + at + len);
    amp.gain.setValueAtTime(0.0001, now + at);
    amp.gain.exponentialRampToValueAtTime(gain, now + at + 0.01);
    amp.gain.exponentialRampToValueAtTime(0.0001, now + at + len);
    osc.connect(amp).connect(ctx.destination);
    osc.start(now + at);
    osc.stop(now + at + len + 0.02);
  }
}

/** Move the cards now in `target` from where `from` (a DOMRect) was: the hand or a seat. */
export function flyIn(target, from) {
  if (!from || reducedMotion() || !target.animate) return;
  const cards = [...target.children];
  // every card's place is read before the first animation starts: a read after one would
  // compute the page's style again, once per card
  const places = cards.map((el) => el.getBoundingClientRect());
  cards.forEach((el, i) => {
    const to = places[i];
    const dx = from.left + from.width / 2 - (to.left + to.width / 2);
    const dy = from.top + from.height / 2 - (to.top + to.height / 2);
    el.animate([{ transform: `translate(${dx}px, ${dy}px) scale(0.8)`, opacity: 0.4 },
      { transform: "translate(0, 0) scale(1)", opacity: 1 }],
    { duration: 320, delay: i * 18, easing: "cubic-bezier(.2,.8,.3,1)", fill: "backwards" });
  });
}

/** The bomb's own effect on the play in the middle. */
export function boom(el) {
  if (reducedMotion()) return;
  el.classList.remove("boom");
  void el.offsetWidth;  // restart the animation
  el.classList.add("boom");
  setTimeout(() => el.classList.remove("boom"), 900);
}
