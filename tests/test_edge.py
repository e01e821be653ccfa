"""The gateway's edge against a hostile client (issue 23), on a real redis-server, ``shuangkou
serve``, a dramatiq worker and ``shuangkou gateway`` processes, over real WebSockets:

* size limits at the transport (a frame over ``--max-message-bytes`` closes 1009 unread, before
  and after the Auth; 30 sockets × 16 MB frames leave the gateway's RSS within 50 MB);
* the token's lifetime on an open socket (4401 at ``exp``; renewal by a new Auth);
* rate limits (``rate_limited``, 4429, the Sync rate to the engine, unauthenticated sockets
  per address with and without ``--trusted-proxy``), each refusal counted in ``/metrics``;
* browser hardening (CSP and friends on every page, the Origin check on ``/ws``, CSP blocking
  an injected inline script in Chromium);
* bounded dead letters: 100 × 1 MB hostile inbox entries and one of 100 MB leave Redis
  within 20 MB of where it started once handled.

Nothing here asserts on a clock: tests wait for the outcome they check (a close, an answer, a
memory level) with a generous bound that only stops a broken run from hanging.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.request
from typing import Any

import pytest

from tests.gateway_support import Client, Closed, Gateway, kind, lobby, start_stack
from tests.processes import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]

ROOMS: dict[str, dict[str, Any]] = {"pairs": {"trustee_delay_seconds": 0.0}}
MB = 1024 * 1024


@pytest.fixture(scope="module")
def stack(redis_server, tmp_path_factory):
    s = start_stack(redis_server.db_url(2), redis_server.db_url(3), tmp_path_factory.mktemp("edge"), ROOMS)
    try:
        s.start_gateway("E", "--max-unauthenticated-per-address", "3")
        s.start_gateway("P", "--max-unauthenticated-per-address", "3", "--trusted-proxy", "127.0.0.1/32")
        s.start_gateway("R", "--rate", "0.001", "--burst", "5", "--rate-close-after", "1")
        s.start_gateway("S", "--sync-rate", "0.001", "--max-sockets-per-watcher", "2")
        s.start_gateway("C", "--sync-rate", "0.001", "--connect-rate", "0.001", "--connect-burst", "2")
        s.start_gateway("O", "--allowed-origin", "https://casino.example", "--frame-ancestors",
                        "https://casino.example")
        s.start_gateway("F", "--frame-ancestors", "http://casino.example")
        s.start_gateway("Z", "--ws-compression")
        yield s
    finally:
        s.stop()


def gw(stack, name: str) -> Gateway:
    return next(g for g in stack.gateways if f"gateway-{name}.out" == g.out.name)


def run(coro):
    return asyncio.run(coro)


def refusals(g: Gateway) -> dict[str, float]:
    text = urllib.request.urlopen(g.http + "/metrics", timeout=10).read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r'^shuangkou_gateway_refusals_total\{reason="([a-z_]+)"\} (\S+)$', text, re.M)}


async def handshake_status(url: str, **kw: Any) -> tuple[int, str]:
    """The HTTP status of a WebSocket handshake (101 when it opened) and the refusal's body."""
    import websockets

    try:
        ws = await websockets.connect(url, open_timeout=20, **kw)
    except websockets.InvalidStatus as exc:
        return exc.response.status_code, bytes(exc.response.body or b"").decode(errors="replace")
    await ws.close()
    return 101, ""


# -- 1. size limits ---------------------------------------------------------------------------

def test_a_frame_over_the_limit_closes_the_socket_before_and_after_the_auth(stack):
    g = gw(stack, "E")

    async def main() -> tuple[Closed, Closed, dict[str, Any]]:
        c = await Client.connect(g.url, stack.token("sz-alice"), "sz-alice")
        welcome = await c.expect(kind("welcome"))
        await c.ws.send(json.dumps({"type": "Join", "room": "pairs", "pad": "x" * 17_000}))
        after = await c.closed()
        raw = await Client.connect(g.url, None, "sz-anon")  # nothing sent yet: the Auth is awaited
        await raw.ws.send("{" + " " * 17_000 + "}")
        before = await raw.closed()
        return after, before, welcome

    after, before, welcome = run(main())
    assert after.code == 1009 and before.code == 1009
    assert isinstance(welcome["expires_at"], int) and welcome["renewed"] is False


def _rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def measure_flood(url: str, pid: int, sockets: int = 30, frame_bytes: int = 16_000_000) -> dict[str, float]:
    """``sockets`` unauthenticated sockets each send one ``frame_bytes`` frame; the gateway's
    RSS (MB) at the start, its sampled peak, and after they are all closed.  (bench/edge.py
    prints the same figure.)"""
    import websockets

    start = _rss_kb(pid)
    peak = [start]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_kb(pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    payload = "x" * frame_bytes

    async def one() -> int | None:
        ws = await websockets.connect(url, open_timeout=30, max_size=None, close_timeout=5)
        try:
            await ws.send(payload)
            await asyncio.wait_for(ws.wait_closed(), 60)
        except websockets.ConnectionClosed:
            pass
        except asyncio.TimeoutError:
            return None
        return ws.close_code

    async def main() -> list[int | None]:
        return await asyncio.gather(*(one() for _ in range(sockets)))

    try:
        codes = asyncio.run(main())
        time.sleep(0.5)  # let the sampler see the settled process (a sample, not an assertion)
    finally:
        done.set()
        sampler.join()
    after = _rss_kb(pid)
    return {"start_mb": start / 1024, "peak_mb": peak[0] / 1024, "after_mb": after / 1024,
            "closed": sum(1 for c in codes if c is not None), "codes": sorted({c for c in codes if c})}


def test_thirty_sixteen_megabyte_frames_before_login_cost_the_gateway_under_50_mb(stack):
    g = stack.start_gateway("M", "--max-unauthenticated-per-address", "100")  # all 30 from one address
    figures = measure_flood(g.url, g.proc.pid)
    print(f"gateway RSS: start {figures['start_mb']:.1f} MB, peak {figures['peak_mb']:.1f} MB, "
          f"after {figures['after_mb']:.1f} MB (30 x 16 MB frames)")
    # each closed unread: 1009 at its frame's header, or 4401 when the machine was too slow to even
    # start sending the frame within the Auth deadline
    assert figures["closed"] == 30 and 1009 in figures["codes"] and set(figures["codes"]) <= {1009, 4401}
    assert figures["peak_mb"] - figures["start_mb"] <= 50, figures
    assert figures["after_mb"] - figures["start_mb"] <= 50, figures
    # and the gateway still serves
    assert run(handshake_status(g.url))[0] == 101


# -- 2. token lifetime -------------------------------------------------------------------------

def test_a_socket_closes_4401_at_its_tokens_exp_and_a_renewal_keeps_it(stack):
    g = gw(stack, "E")
    before = refusals(g).get("token_expired", 0)

    async def main() -> tuple[Closed, list[dict[str, Any]], dict[str, Any]]:
        short = await Client.connect(g.url, stack.token("tl-alice", ttl=2), "tl-alice")
        await short.expect(kind("welcome"))
        expired = await short.closed()
        renewing = await Client.connect(g.url, stack.token("tl-bob", ttl=2), "tl-bob", auth_message=True)
        first = await renewing.expect(kind("welcome"))
        refused = []
        for cid, token in (("other", stack.token("tl-carol")), ("spectator", stack.token("tl-bob", role="spectator")),
                           ("junk", "not-a-token")):
            await renewing.send({"type": "Auth", "token": token, "command_id": cid})
            refused.append(await renewing.expect(lambda m, cid=cid: m.get("command_id") == cid))
        await renewing.send({"type": "Auth", "token": stack.token("tl-bob", ttl=600)})
        renewed = await renewing.expect(kind("welcome"))
        assert renewed["renewed"] is True and renewed["expires_at"] > first["expires_at"]
        while time.time() < first["expires_at"] + 1.5:  # past the first token's exp
            await asyncio.sleep(0.2)
        await renewing.send({"type": "Join", "room": "no-such-room", "command_id": "alive"})
        alive = await renewing.expect(lambda m: m.get("command_id") == "alive")
        await renewing.close()
        return expired, refused, alive

    expired, refused, alive = run(main())
    assert (expired.code, expired.reason) == (4401, "the token has expired")
    assert [r["code"] for r in refused] == ["not_allowed"] * 3
    assert "same player" in refused[0]["reason"] and "same player" in refused[1]["reason"]
    assert "refused" in refused[2]["reason"]
    assert alive["code"] == "unknown_room"  # the renewed socket is still open past the old exp
    assert refusals(g)["token_expired"] >= before + 1


# -- 5. rate limits ------------------------------------------------------------------------------

def test_over_the_rate_is_refused_and_a_socket_that_stays_over_is_closed_4429(stack):
    g = gw(stack, "R")  # --rate 0.001 --burst 5 --rate-close-after 1

    async def main() -> tuple[list[str], Closed]:
        c = await Client.connect(g.url, stack.token("rl-alice"), "rl-alice")
        welcome = await c.expect(kind("welcome"))  # the rates in force, so a client paces itself (issue 36)
        assert (welcome["rate"], welcome["burst"], welcome["sync_rate"]) == (0.001, 5, 2.0)
        for i in range(10):
            await c.send({"type": "Join", "room": "no-such-room", "command_id": f"j{i}"})
        codes = [(await c.expect(lambda m, i=i: m.get("command_id") == f"j{i}"))["code"] for i in range(10)]
        import websockets

        while True:  # stays over: refused until closed
            try:
                await c.ws.send(json.dumps({"type": "Join", "room": "no-such-room"}))
                await c.recv(5)
            except Closed as closed:
                return codes, closed
            except websockets.ConnectionClosed as exc:
                return codes, Closed(exc.rcvd.code if exc.rcvd else None, exc.rcvd.reason if exc.rcvd else "")
            except asyncio.TimeoutError:
                continue

    codes, closed = run(main())
    assert codes == ["unknown_room"] * 5 + ["rate_limited"] * 5  # the burst, then refused unhandled
    assert closed.code == 4429
    r = refusals(g)
    assert r["rate_limited"] >= 5 and r["rate_closed"] >= 1


def test_a_watch_counts_as_a_sync_and_a_watchers_sockets_are_capped(stack):
    """A Watch asks the engine for a view as a Sync does: a socket's first is its view, the
    next ones count against the token's Sync rate, and over it they are refused ``rate_limited``.
    A spectator token holds at most ``--max-sockets-per-watcher`` sockets at once (its sockets
    are never replaced, each could ask for views): the next is closed 4429; one closed frees
    its place."""
    g = gw(stack, "S")  # --sync-rate 0.001, --max-sockets-per-watcher 2

    async def main() -> None:
        a = await Client.connect(g.url, stack.token("wt-alice"), "wt-alice")
        b = await Client.connect(g.url, stack.token("wt-bob"), "wt-bob")
        for c in (a, b):
            await c.expect(kind("welcome"))
            await c.send({"type": "Join", "room": "pairs"})
        match = (await a.expect(lobby("seated")))["match"]
        await b.expect(lobby("seated"))
        token = stack.token("wt-spy", role="spectator")
        s1 = await Client.connect(g.url, token, "wt-spy")
        await s1.expect(kind("welcome"))
        await s1.send({"type": "Watch", "command_id": "w1", "match": match})
        await s1.expect(lambda m: m.get("kind") == "update" and m.get("view") is not None, what="the view")
        await s1.send({"type": "Watch", "command_id": "w2", "match": match})  # the token's one Sync
        await s1.send({"type": "Watch", "command_id": "w3", "match": match})
        r = await s1.expect(kind("rejected"), what="the third Watch refused")
        assert (r["command_id"], r["code"]) == ("w3", "rate_limited") and "Watch" in r["reason"]
        s2 = await Client.connect(g.url, token, "wt-spy")
        await s2.expect(kind("welcome"))
        await s2.send({"type": "Watch", "command_id": "w4", "match": match})  # another socket: its own view
        await s2.expect(lambda m: m.get("kind") == "update" and m.get("view") is not None, what="s2's view")
        s3 = await Client.connect(g.url, token, "wt-spy")
        closed = await s3.closed()
        assert closed.code == 4429 and "at most 2" in closed.reason
        await s2.close()
        for _ in range(100):  # the gateway sees the close a moment later
            s4 = await Client.connect(g.url, token, "wt-spy")
            try:
                await s4.expect(kind("welcome"))
                break
            except Closed:
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("a closed socket never freed its place")
        for c in (a, b, s1, s4):
            await c.close()

    run(main())
    assert refusals(g).get("sockets_per_watcher", 0) >= 1


def test_at_most_the_sync_rate_of_syncs_reaches_the_engine(stack):
    import redis

    from engine.match.commands import decode_command
    from engine.store import keys
    from gateway import channels

    g = gw(stack, "S")  # --sync-rate 0.001: one Sync (its bucket's burst) reaches the engine
    match: list[str] = []

    async def main() -> dict[str, dict[str, Any]]:
        a = await Client.connect(g.url, stack.token("sy-alice"), "sy-alice")
        b = await Client.connect(g.url, stack.token("sy-bob"), "sy-bob")
        welcome = await a.expect(kind("welcome"))
        assert (welcome["rate"], welcome["burst"], welcome["sync_rate"]) == (20.0, 40, 0.001)
        for c in (a, b):
            await c.send({"type": "Join", "room": "pairs"})
        seated = [await c.expect(lobby("seated")) for c in (a, b)]
        match.append(seated[0]["match"])
        for i in range(30):
            await a.send({"type": "Sync", "command_id": f"flood-{i}"})
        answers: dict[str, dict[str, Any]] = {}

        def answer(m: dict[str, Any]) -> bool:
            if str(m.get("command_id") or "").startswith("flood-"):
                answers[m["command_id"]] = m
            return len(answers) == 30
        await a.expect(answer, what="an answer to each Sync")
        for c in (a, b):
            await c.close()
        return answers

    answers = list(run(main()).values())
    assert [m["kind"] for m in answers].count("update") == 1
    assert {m["code"] for m in answers if m["kind"] == "rejected"} == {"rate_limited"}
    with redis.Redis.from_url(stack.store_url) as r:
        inbox = keys.inbox_key(keys.bucket_of(match[0]))  # the match's bucket's player channel
        syncs = [decode_command(f[b"c"]) for _, f in r.xrange(inbox) if b"c" in f]
    flood = [s for s in syncs if s.type == "Sync" and s.player == "sy-alice"
             and (channels.client_command_id("sy-alice", s.command_id) or "").startswith("flood-")]
    assert len(flood) == 1
    assert refusals(g)["sync_limited"] >= 29


def test_a_tokens_rates_hold_across_its_sockets_and_its_new_sockets_are_paced(stack):
    """A token's rates are its subject's on the gateway, not a socket's: a Sync over the Sync
    rate is refused on the next socket as on the last, and a token opens at most
    ``--connect-burst`` sockets before ``--connect-rate`` paces it (4429 after the Auth), each
    greeting asking the engine for a view and the lobby for a Returned (docs/SECURITY.md 37).
    A token of another role for the same subject shares them (its third socket is refused as a
    third player socket would be); another subject is not held back."""
    g = gw(stack, "C")  # --sync-rate 0.001 --connect-rate 0.001 --connect-burst 2

    async def main() -> tuple[dict[str, Any], dict[str, Any], Closed]:
        first = await Client.connect(g.url, stack.token("cn-alice"), "cn-alice")
        await first.expect(kind("welcome"))
        await first.send({"type": "Sync", "command_id": "s1"})
        one = await first.expect(lambda m: m.get("command_id") == "s1", what="the first Sync's answer")
        await first.close()
        second = await Client.connect(g.url, stack.token("cn-alice"), "cn-alice")
        await second.expect(kind("welcome"))
        await second.send({"type": "Sync", "command_id": "s2"})
        two = await second.expect(lambda m: m.get("command_id") == "s2", what="the second Sync's answer")
        await second.close()
        third = await Client.connect(g.url, stack.token("cn-alice", role="spectator"), "cn-alice")
        closed = await third.closed()
        other = await Client.connect(g.url, stack.token("cn-bob"), "cn-bob")
        await other.expect(kind("welcome"))
        await other.close()
        return one, two, closed

    one, two, closed = run(main())
    assert one.get("code") != "rate_limited"
    assert (two["kind"], two["code"]) == ("rejected", "rate_limited")
    assert closed.code == 4429 and "connecting again too often" in closed.reason
    r = refusals(g)
    assert r["connect_limited"] >= 1 and r["sync_limited"] >= 1


def test_unauthenticated_sockets_per_address_behind_a_trusted_proxy_or_not(stack):
    e, p = gw(stack, "E"), gw(stack, "P")  # both: --max-unauthenticated-per-address 3

    async def hold(url: str, n: int, forwarded: str | None = None) -> list[Any]:
        import websockets

        headers = {"X-Forwarded-For": forwarded} if forwarded else None
        return [await websockets.connect(url, open_timeout=20, additional_headers=headers) for _ in range(n)]

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        held = await hold(e.url, 3, "1.1.1.1")
        out["e_fourth"] = await handshake_status(e.url, additional_headers={"X-Forwarded-For": "2.2.2.2"})
        out["e_query_token"] = await handshake_status(f"{e.url}?token={stack.token('ua-dave')}")  # judged at once
        await held[0].send(json.dumps({"type": "Auth", "token": stack.token("ua-alice")}))
        await held[0].recv()  # authenticated: no longer counted
        out["e_after_auth"] = await handshake_status(e.url)
        held_p = await hold(p.url, 3, "1.1.1.1")
        out["p_same"] = await handshake_status(p.url, additional_headers={"X-Forwarded-For": "1.1.1.1"})
        out["p_other"] = await handshake_status(p.url, additional_headers={"X-Forwarded-For": "2.2.2.2"})
        # a client behind the proxy cannot pick its address: the proxy's own hop is the last one
        out["p_spoof"] = await handshake_status(p.url, additional_headers={"X-Forwarded-For": "9.9.9.9, 1.1.1.1"})
        for ws in held + held_p:
            await ws.close()
        return out

    out = run(main())
    assert out["e_fourth"][0] == 429 and "too_many_sockets" in out["e_fourth"][1]  # the header is not believed
    assert out["e_after_auth"][0] == 101 and out["e_query_token"][0] == 101
    assert out["p_same"][0] == 429 and out["p_spoof"][0] == 429
    assert out["p_other"][0] == 101
    assert refusals(e)["unauthenticated_per_address"] >= 1 and refusals(p)["unauthenticated_per_address"] >= 2
    assert_no_error_logged(e, p)


def assert_no_error_logged(*gateways) -> None:
    """A refused handshake is no error in the operator's log (uvicorn's spurious line is dropped)."""
    for g in gateways:
        log = g.err.read_text(errors="replace") + g.out.read_text(errors="replace")
        assert "ERROR" not in log, log[-2000:]


# -- 6. browser hardening -------------------------------------------------------------------------

def test_every_page_has_the_security_headers(stack):
    for g, ancestors in ((gw(stack, "E"), "'none'"), (gw(stack, "O"), "https://casino.example")):
        for path in ("/", "/watch/m1", "/replay/m1", "/static/js/table.js", "/api/client-config", "/healthz"):
            with urllib.request.urlopen(g.http + path, timeout=10) as resp:
                h = resp.headers
            csp = h["Content-Security-Policy"]
            assert "default-src 'self'" in csp and "script-src 'self'" in csp, (path, csp)
            assert "unsafe-inline" not in csp
            assert f"connect-src 'self' ws://127.0.0.1:{g.port} wss://127.0.0.1:{g.port}" in csp
            assert f"frame-ancestors {ancestors}" in csp
            assert h["X-Content-Type-Options"] == "nosniff" and h["Referrer-Policy"] == "no-referrer"
    config = json.loads(urllib.request.urlopen(gw(stack, "O").http + "/api/client-config", timeout=10).read())
    assert config["frame_ancestors"] == ["https://casino.example"]


def test_ws_checks_the_origin(stack):
    e, o = gw(stack, "E"), gw(stack, "O")
    own = f"http://127.0.0.1:{e.port}"

    async def main() -> dict[str, tuple[int, str]]:
        return {
            "own": await handshake_status(e.url, origin=own),
            "evil": await handshake_status(e.url, origin="https://evil.example"),
            "null": await handshake_status(e.url, origin="null"),
            "none": await handshake_status(e.url),  # not a browser: the token is its credential
            "allowed": await handshake_status(o.url, origin="https://casino.example"),
            "o_own": await handshake_status(o.url, origin=f"http://127.0.0.1:{o.port}"),
        }

    out = run(main())
    assert out["own"][0] == out["none"][0] == out["allowed"][0] == 101
    assert out["evil"][0] == out["null"][0] == out["o_own"][0] == 403
    assert "forbidden_origin" in out["evil"][1]
    assert refusals(e)["origin"] >= 2 and refusals(o)["origin"] >= 1
    assert_no_error_logged(e, o)


def test_permessage_deflate_only_with_ws_compression(stack):
    """A client offering permessage-deflate (websockets does, browsers do) gets plain frames from a
    default gateway and compressed ones from ``--ws-compression``; both greet it alike."""
    import websockets

    async def extensions(g: Gateway) -> tuple[str | None, str]:
        async with websockets.connect(f"{g.url}?token={stack.token('deflate-1')}", open_timeout=20) as ws:
            welcome = json.loads(await asyncio.wait_for(ws.recv(), 20))
            return ws.response.headers.get("Sec-WebSocket-Extensions"), welcome["kind"]

    plain, compressed = run(extensions(gw(stack, "E"))), run(extensions(gw(stack, "Z")))
    assert plain == (None, "welcome")
    assert compressed[0] is not None and compressed[0].startswith("permessage-deflate") and compressed[1] == "welcome"


@pytest.mark.browser
def test_csp_blocks_an_injected_inline_script_in_chromium(stack):
    from playwright.sync_api import sync_playwright

    from tests.test_browser import CHROMIUM, CHROMIUM_ARGS

    g = gw(stack, "E")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(g.http + "/")
            page.wait_for_selector("[data-status]")  # the page's own module script ran (CSP lets 'self' in)
            violations = page.evaluate("""() => new Promise((resolve) => {
                const seen = [];
                document.addEventListener("securitypolicyviolation", (e) => {
                    seen.push(e.effectiveDirective);
                    if (seen.length === 2) resolve(seen);
                });
                const s = document.createElement("script");
                s.textContent = "window.__injected = 1";
                document.body.appendChild(s);
                document.body.insertAdjacentHTML("beforeend", '<img src="/nope.png" onerror="window.__injected2 = 1">');
            })""")
            page.wait_for_load_state("networkidle")
            assert page.evaluate("[window.__injected, window.__injected2]") == [None, None]
            assert sorted(violations) == ["script-src-attr", "script-src-elem"]
        finally:
            browser.close()


HOST_PAGE = """<!doctype html><iframe id="f" src="%s"></iframe><script>
window.readySeen = false;
window.addEventListener("message", (e) => { if (e.data && e.data.type === "shuangkou-ready") window.readySeen = true; });
</script>"""


@pytest.mark.browser
def test_postmessage_tokens_only_from_the_frame_ancestors_in_chromium(stack):
    """Host pages at two origins frame the table (its CSP header removed here, so that the page's
    own check is what is tested: a browser without frame-ancestors support) and post it a token;
    only the --frame-ancestors origin's is taken, and only it hears shuangkou-ready."""
    from playwright.sync_api import sync_playwright

    from tests.test_browser import CHROMIUM, CHROMIUM_ARGS

    g = gw(stack, "F")  # --frame-ancestors http://casino.example
    token = stack.token("pm-alice")
    # the host pages are "public" origins framing a loopback gateway: let Chromium's local
    # network access checks through (a real deployment serves both on public names)
    args = CHROMIUM_ARGS + ["--disable-features=LocalNetworkAccessChecks,PrivateNetworkAccessSendPreflights,"
                            "BlockInsecurePrivateNetworkRequests"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            context = browser.new_context()
            # count the page's own "message" listeners, to post only once it listens
            context.add_init_script("""window.__listening = 0; const add = window.addEventListener;
                window.addEventListener = function (type, fn, opts) {
                    if (type === "message") window.__listening += 1;
                    return add.call(this, type, fn, opts);
                };""")
            for host in ("casino", "evil"):
                context.route(f"http://{host}.example/**", lambda route: route.fulfill(
                    status=200, content_type="text/html", body=HOST_PAGE % (g.http + "/")))

            def without_csp(route: Any) -> None:  # a browser that ignores frame-ancestors
                response = route.fetch()
                headers = {k: v for k, v in response.headers.items() if k.lower() != "content-security-policy"}
                route.fulfill(response=response, headers=headers)
            context.route(g.http + "/", without_csp)
            got = {}
            for host in ("evil", "casino"):
                page = context.new_page()
                page.goto(f"http://{host}.example/host.html")
                frame = next(f for f in page.frames if f.url.startswith(g.http))
                frame.wait_for_function("() => window.__listening >= 1")  # tokenFromHost listens
                # a marker listener registered after the page's own: when it has seen the marker the
                # page has handled the token posted before it (same source, delivered in order)
                frame.evaluate("""() => { window.markerSeen = new Promise((resolve) => window.addEventListener(
                    "message", (e) => { if (e.data && e.data.type === "marker") resolve(true); })); }""")
                page.evaluate(f"""() => {{ const w = document.getElementById("f").contentWindow;
                    w.postMessage({{type: "shuangkou-token", token: {json.dumps(token)}}}, "*");
                    w.postMessage({{type: "marker"}}, "*"); }}""")
                frame.evaluate("() => window.markerSeen")
                got[host] = (frame.evaluate("() => sessionStorage.getItem('shuangkou-token')"),
                             page.evaluate("() => window.readySeen"))
                page.close()
        finally:
            browser.close()
    assert got["evil"] == (None, False)
    assert got["casino"] == (token, True)


# -- 7. bounded dead letters -------------------------------------------------------------------------

def test_hostile_inbox_entries_leave_redis_within_20_mb_of_its_start(stack):
    import redis

    from engine.store import keys

    with redis.Redis.from_url(stack.store_url) as r:
        start = int(r.info("memory")["used_memory"])
        dead_before = r.xlen(keys.DEAD_LETTERS)
        inbox = keys.inbox_key(0)  # a bucket's player channel, as a hostile writer of sk:{b*}:inbox would
        for i in range(100):
            r.xadd(inbox, {"c" if i % 2 else "j": b"\xc1" * MB})
        r.xadd(inbox, {"c": b"\xc1" * (100 * MB)})
        wait_for(lambda: r.xlen(keys.DEAD_LETTERS) >= dead_before + 101, 120, "the hostile entries were not handled",
                 tuple(stack.logs))
        wait_for(lambda: int(r.info("memory")["used_memory"]) <= start + 20 * MB, 60,
                 f"Redis memory stayed high: {r.info('memory')['used_memory']} vs {start} at the start",
                 tuple(stack.logs))
        after = int(r.info("memory")["used_memory"])
        letters = r.xrevrange(keys.DEAD_LETTERS, count=101)
        biggest = max(int(f.get(b"entry_bytes", 0)) for _, f in letters)
    print(f"Redis used_memory: start {start / MB:.1f} MB, after {after / MB:.1f} MB")
    assert after - start <= 20 * MB
    assert biggest == 100 * MB + 1  # recorded by size ...
    assert all(len(f.get(b"c", f.get(b"j", b""))) <= 1024 and f[b"truncated"] == b"1" for _, f in letters)  # ... never whole


def test_metrics_are_read_from_the_allowed_networks_only(stack):
    """``/metrics`` names rooms, counts and latencies: a client outside ``--metrics-from``
    (default: loopback and the private networks) gets 404; the address is resolved as for the
    edge limits, so behind a trusted proxy the forwarded client counts."""
    def status(g: Gateway, forwarded: str | None) -> int:
        req = urllib.request.Request(g.http + "/metrics", headers={"X-Forwarded-For": forwarded} if forwarded else {})
        try:
            return urllib.request.urlopen(req, timeout=10).status
        except urllib.error.HTTPError as exc:
            return exc.code

    p, e = gw(stack, "P"), gw(stack, "E")
    assert status(e, None) == 200 and status(e, "8.8.8.8") == 200  # no trusted proxy: the peer, loopback
    assert status(p, "10.1.2.3") == 200  # a Prometheus on the private network, through the proxy
    assert status(p, "8.8.8.8") == 404  # the Internet, through the proxy
    assert refusals(p).get("metrics_from") == 1
