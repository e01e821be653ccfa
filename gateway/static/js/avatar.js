// Avatars drawn from a name (issue 36): no uploads, no images fetched.  The player id picks the
// colours (the same player looks the same on every page, whatever the language), the display
// name gives the initials: a CJK name its first character, a Latin one its first letters.
const SVG = "http://www.w3.org/2000/svg";

/** A 32-bit FNV-1a hash of a string (a stable seed for the colours). */
export function hashOf(text) {
  let h = 0x811c9dc5;
  for (const ch of String(text)) {
    h ^= ch.codePointAt(0);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** The one or two characters an avatar shows for `name`. */
export function initialsOf(name) {
  const text = String(name || "").trim();
  if (!text) return "?";
  const chars = [...text];
  if (/[\u3400-\u9fff\uf900-\ufaff]/u.test(chars[0])) return chars[0];
  const words = text.split(/[\s._-]+/).filter(Boolean);
  if (words.length > 1) return (words[0][0] + words[1][0]).toUpperCase();
  return (chars[0].toUpperCase() + (chars[1] || "")).slice(0, 2);
}

function node(tag, attrs) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
  return n;
}

/** An <svg> avatar for the player `key` called `name`. */
export function avatarSvg(key, name) {
  const h = hashOf(key);
  const hue = h % 360;
  const hue2 = (hue + 40 + ((h >>> 9) % 80)) % 360;
  const id = `av-${h.toString(36)}`;
  const svg = node("svg", { viewBox: "0 0 40 40", role: "img", "aria-hidden": "true", focusable: "false" });
  const defs = node("defs", {});
  const grad = node("linearGradient", { id, x1: 0, y1: 0, x2: 1, y2: 1 });
  grad.append(node("stop", { offset: "0", "stop-color": `hsl(${hue} 62% 52%)` }),
    node("stop", { offset: "1", "stop-color": `hsl(${hue2} 58% 32%)` }));
  defs.append(grad);
  svg.append(defs, node("circle", { cx: 20, cy: 20, r: 20, fill: `url(#${id})` }));
  // a ring of dots from the hash: two players with the same initials still look apart
  for (let i = 0; i < 8; i += 1) {
    if (!((h >>> (i + 16)) & 1)) continue;
    const a = (i / 8) * 2 * Math.PI;
    svg.append(node("circle", { cx: (20 + 15.5 * Math.cos(a)).toFixed(2), cy: (20 + 15.5 * Math.sin(a)).toFixed(2),
      r: 1.6, fill: "rgba(255,255,255,0.45)" }));
  }
  const initials = initialsOf(name);
  const text = node("text", { x: 20, y: 21, "text-anchor": "middle", "dominant-baseline": "central", fill: "#fff",
    "font-size": [...initials].length > 1 ? 15 : 19, "font-weight": 700, "font-family": "system-ui, sans-serif" });
  text.textContent = initials;
  svg.append(text);
  return svg;
}
