// Where the page's token comes from: ?token=, a postMessage from the host page
// ({type: "shuangkou-token", token}), or -- with `shuangkou gateway --dev` -- a name typed
// into the page (POST /api/dev/token).  Kept in sessionStorage so a reload keeps the seat;
// each tab has its own (two tabs can be two players).  A page with a token of its own (the
// replay viewer's operator token) passes its storage key.
const KEY = "shuangkou-token";

export function claims(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(decodeURIComponent(escape(atob(part + "===".slice((part.length + 3) % 4)))));
  } catch (e) {
    return null;
  }
}

export function tokenFromUrl(storageKey = KEY) {
  const url = new URL(window.location.href);
  const t = url.searchParams.get("token");
  if (t) {
    url.searchParams.delete("token");  // keep it out of the address bar and the history
    window.history.replaceState(null, "", url.pathname + url.search + url.hash);
    sessionStorage.setItem(storageKey, t);
  }
  return t;
}

export function storedToken(storageKey = KEY) {
  return sessionStorage.getItem(storageKey);
}

export function forgetToken() {
  sessionStorage.removeItem(KEY);
}

/** Calls onToken with each token the host page posts ({type: "shuangkou-token", token}): only
 * from the origins of `shuangkou gateway --frame-ancestors` (none by default), so no other page
 * can plant a token.  A later token renews the socket's (docs/PROTOCOL.md §8). */
export function tokenFromHost(onToken, storageKey = KEY) {
  if (window.parent === window) return;
  clientConfig().then((cfg) => {
    const allowed = Array.isArray(cfg.frame_ancestors) ? cfg.frame_ancestors : [];
    window.addEventListener("message", (ev) => {
      if (ev.source !== window.parent || !allowed.includes(ev.origin)) return;
      const d = ev.data;
      if (d && typeof d === "object" && d.type === "shuangkou-token" && typeof d.token === "string") {
        sessionStorage.setItem(storageKey, d.token);
        onToken(d.token);
      }
    });
    for (const origin of allowed) window.parent.postMessage({ type: "shuangkou-ready" }, origin);
  });
}

export async function devToken(name, role, storageKey = KEY) {
  const r = await fetch("/api/dev/token", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ name, role }),
  });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw Object.assign(new Error(body.reason || `HTTP ${r.status}`), { code: body.error || "rejected" });
  sessionStorage.setItem(storageKey, body.token);
  return body.token;
}

export async function clientConfig() {
  try {
    const r = await fetch("/api/client-config");
    return r.ok ? await r.json() : { dev: false, bots: false };
  } catch (e) {
    return { dev: false, bots: false };
  }
}

export async function api(path, token, body) {
  const r = await fetch(path, {
    method: body === undefined ? "GET" : "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : (typeof body === "string" ? body : JSON.stringify(body)),
  });
  const data = await r.json().catch(() => ({ reason: `HTTP ${r.status}` }));
  if (!r.ok) throw Object.assign(new Error(data.reason || `HTTP ${r.status}`), { code: data.error });
  return data;
}
