// The WebSocket link to the gateway (docs/PROTOCOL.md "WebSocket"): Auth first, then JSON both
// ways.  On a drop it reconnects with a growing delay and resumes with the last match version
// it saw, so the gateway sends every later update with no gap; updates are deduplicated on
// (match, version) by the caller.
export class Link {
  constructor(token, { onMessage, onState }) {
    this.token = token;
    this.onMessage = onMessage;
    this.onState = onState;
    this.version = null;   // last match version seen (resume)
    this.delay = 250;
    this.closedByUs = false;
    this.ws = null;
    this.queue = [];
  }

  url() {
    const proto = window.location.protocol === "https:" ? "wss:" : "ws:";
    return `${proto}//${window.location.host}/ws`;
  }

  connect() {
    this.onState("connecting");
    const ws = new WebSocket(this.url());
    this.ws = ws;
    ws.addEventListener("open", () => {
      const auth = { type: "Auth", token: this.token };
      if (this.version !== null) auth.version = this.version;
      ws.send(JSON.stringify(auth));
      this.delay = 250;
      this.onState("open");
      for (const m of this.queue.splice(0)) ws.send(JSON.stringify(m));
    });
    ws.addEventListener("message", (ev) => {
      let msg;
      try {
        msg = JSON.parse(ev.data);
      } catch (e) {
        return;
      }
      this.onMessage(msg);
    });
    ws.addEventListener("close", (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (this.closedByUs) {
        this.onState("closed", ev);
        return;
      }
      if (ev.code === 4401 || ev.code === 4403 || ev.code === 4409) {
        // bad token / not allowed / replaced by a newer tab: reconnecting would not help
        this.onState("refused", ev);
        return;
      }
      this.onState("reconnecting", ev);
      setTimeout(() => this.connect(), this.delay);
      this.delay = Math.min(this.delay * 2, 5000);
    });
  }

  /** A fresh token for the same player before the old one's exp: the open socket sends it as a
   * new Auth and keeps its place (docs/PROTOCOL.md §8); a reconnect uses it too. */
  renew(token) {
    this.token = token;
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: "Auth", token }));
  }

  send(msg) {
    if (!msg.command_id) msg.command_id = (crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2));
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
    else this.queue.push(msg);
    return msg.command_id;
  }

  close() {
    this.closedByUs = true;
    if (this.ws) this.ws.close(1000, "bye");
  }
}
