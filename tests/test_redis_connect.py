"""The one Redis factory (engine/store/connect.py, issue 24 §1): a single node gives a plain
client; a node that is down, a URL naming no Redis or no URL at all gives one readable line
and exit code 2 from every command that takes --redis (no traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from engine.store.connect import RedisUnavailable, connect, is_cluster, probe


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_port():
    """A TCP server that answers every line with an HTTP error: something that is not Redis."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.recv(1024)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(timeout=5)
    srv.close()


@pytest.mark.redis
def test_a_single_node_gives_a_plain_client(redis_server):
    import redis

    client = connect(redis_server.url)
    assert isinstance(client, redis.Redis) and not is_cluster(client)
    assert probe(redis_server.url) is False


def test_unreachable_urls_raise_one_line(http_port):
    for url, words in ((f"redis://127.0.0.1:{_closed_port()}/0", "cannot reach"),
                       (f"redis://127.0.0.1:{http_port}/0", "does not answer as a Redis server"),
                       ("http://example.invalid/", "is not a Redis URL")):
        with pytest.raises(RedisUnavailable) as info:
            connect(url)
        assert words in str(info.value) and "\n" not in str(info.value), url


def test_a_server_that_accepts_and_never_answers_is_not_redis_not_unreachable():
    """Something listens (the TCP connection opens) but sends no reply: e.g. an HTTP server that
    waits for a request line."""
    import socket

    from engine.store.connect import PROBE_TIMEOUT_S

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # never accepted: the kernel's backlog completes the handshake
        port = silent.getsockname()[1]
        with pytest.raises(RedisUnavailable) as info:
            connect(f"redis://127.0.0.1:{port}/0")
    assert str(info.value) == (f"redis://127.0.0.1:{port}/0 does not answer as a Redis server "
                               f"(no reply in {PROBE_TIMEOUT_S:g} s)")


def test_a_password_never_shows_in_the_line():
    url = f"redis://user:s3cret@127.0.0.1:{_closed_port()}/0"
    with pytest.raises(RedisUnavailable) as info:
        connect(url)
    assert "s3cret" not in str(info.value) and "user@127.0.0.1" in str(info.value)


# every command that takes --redis: one line on stderr, exit 2
COMMANDS = [
    ["serve"], ["simulate", "-n", "1", "--no-progress"], ["replay", "--all"], ["export", "m1"],
    ["matches"], ["verify-deal", "m1"], ["reconcile"], ["archive", "--older-than", "1", "--to", "{tmp}"],
    ["ledger", "show", "alice"], ["room", "list"], ["gateway", "--secret-file", "{tmp}/secret"],
    ["lobby-upgrade"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
@pytest.mark.parametrize("where", ["down", "not-redis"])
def test_every_command_exits_2_with_one_line(argv, where, http_port, tmp_path):
    port = _closed_port() if where == "down" else http_port
    (tmp_path / "secret").write_text("s" * 64)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    out = subprocess.run([sys.executable, "-m", "shuangkou", *argv, "--redis", f"redis://127.0.0.1:{port}/0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"127.0.0.1:{port}" in lines[0]


def test_a_gateway_on_a_port_in_use_exits_2_with_one_line(redis_server, tmp_path):
    """The port is bound before uvicorn starts: one line, exit 2 (uvicorn alone exits 3 after
    its start-up lines and an ERROR line)."""
    import socket

    (tmp_path / "secret").write_text("s" * 64)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "shuangkou", "gateway", "--secret-file", str(tmp_path / "secret"),
                              "--redis", redis_server.db_url(7), "--host", "127.0.0.1", "--port", str(port)],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in lines[0] and "in use" in lines[0], lines


def test_a_player_id_with_a_brace_is_refused_at_the_token_the_join_and_the_inbox(fake_redis):
    """§2: a player id is a hash tag (sk:out:{<player>}); one with { or } is refused wherever it enters."""
    import time

    import jwt

    from engine.service.client import GatewayClient
    from engine.service.inbox import InboxConsumer
    from engine.store import keys
    from gateway.tokens import TokenError, mint, verify

    secret = b"s" * 32
    for bad in ("a{b", "x}", "{b1}"):
        problem = keys.player_id_problem(bad)
        assert problem is not None and "'{' or '}'" in problem
        with pytest.raises(ValueError, match="may not contain"):
            mint(secret, bad)
        forged = jwt.encode({"sub": bad, "exp": int(time.time()) + 60}, secret, algorithm="HS256")
        with pytest.raises(TokenError, match="may not contain"):
            verify(secret, forged)
    assert verify(secret, mint(secret, "alice")).player == "alice"  # the positive control
    # the Join checks the subject too (engine.store.keys.player_id_problem in gateway/session.py)
    import inspect

    from gateway import session

    assert "player_id_problem" in inspect.getsource(session.Connection._join)
    # the inbox: a bad_command with the reason, nothing appended
    from engine.service.service import MatchService
    from engine.store.redis_store import RedisEventStore

    gw = InboxConsumer(fake_redis, MatchService(RedisEventStore(fake_redis), lambda: 0, None), "w1",
                       stream=keys.inbox_key(keys.bucket_of("m1")))
    client = GatewayClient(fake_redis, reply_to="sk:reply:t")
    sent = client.ready("m1", "a{b}")
    assert gw.run_once(block_ms=None) == 1
    [reply] = client.replies()
    assert reply.command_id == sent.command.command_id
    assert reply.code == "bad_command" and "may not contain" in (reply.reason or "")
    assert gw.service.store.version("m1") == 0


@pytest.mark.parametrize("bot", ["bot-1", "bot-17"])
def test_no_token_may_claim_a_bot_seats_id(bot: str) -> None:
    """``bot-<n>`` is the gateway's bots' (engine.store.keys.BOT_ID): a person holding such a
    token would play unscored by the integrity projection, which skips bot seats."""
    import time

    import jwt

    from gateway.tokens import TokenError, mint, verify

    secret = b"s" * 32
    with pytest.raises(ValueError, match="bot seat"):
        mint(secret, bot)
    forged = jwt.encode({"sub": bot, "exp": int(time.time()) + 60}, secret, algorithm="HS256")
    with pytest.raises(TokenError, match="bot seat"):
        verify(secret, forged)
    for person in ("bot-x", "robot-1", "bot"):  # the positive controls: only bot-<digits> is reserved
        assert verify(secret, mint(secret, person)).player == person


_READS = [
    ("XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "a", "b", ">", ">"),
    ("XREADGROUP", "GROUP", "streams", "streams", "BLOCK", "5", "NOACK", "STREAMS", "k", ">"),
    ("XREADGROUP", "GROUP", "g", "STREAMS", "STREAMS", "STREAMS", "0"),
    ("xread", "count", "2", "block", "0", "streams", "x", "y", "z", "0", "0", "0"),
    ("XREAD", "STREAMS", "streams", "0"),
    ("EVAL", "return 1", "2", "k1", "k2", "arg"),
    ("EVAL", "return 1", "0"),
]


@pytest.mark.redis
@pytest.mark.parametrize("args", _READS, ids=lambda a: " ".join(a[:5]))
def test_the_cluster_clients_key_parser_agrees_with_the_server(real_redis, args):
    """local_keys (a Cluster client's routing of XREAD, XREADGROUP and the scripts without a
    COMMAND GETKEYS round trip) names the keys the server names, whatever the groups, the
    consumers or the keys are called."""
    from engine.store.connect import local_keys

    server = [k.decode() if isinstance(k, bytes) else k for k in real_redis.command_getkeys(*args)]
    assert local_keys(args) == server


@pytest.mark.parametrize("args", [
    ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "a"),    # keys without their ids
    ("XREADGROUP", "GROUP", "g", "c", "RETRY", "STREAMS", "a", ">"),  # an option Redis lacks
    ("XREAD", "COUNT"),
    ("XREAD",),
])
def test_arguments_the_parser_cannot_read_are_left_to_the_server(args):
    """Arguments that do not parse give None: the Cluster client asks the server (which refuses
    them) rather than routing by a guess."""
    from engine.store.connect import local_keys

    assert local_keys(args) is None


def test_connect_doctests():
    import doctest

    import engine.store.connect as connect_module

    assert doctest.testmod(connect_module).failed == 0
