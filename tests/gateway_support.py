"""Helpers for the gateway tests and bench/gateway.py: a real stack (redis-server, ``shuangkou
serve``, a dramatiq worker, ``shuangkou gateway`` processes) in each deployment the docs offer
(:data:`DEPLOYMENTS`; the ``deployment`` fixture of tests/conftest.py parametrizes over them) and a WebSocket client (the
``websockets`` library) that checks every message it sends and receives against the JSON
Schemas in gateway/schemas/."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.processes import stop_group, tail, wait_for

ROOT = Path(__file__).resolve().parent.parent
SECRET = b"test-secret-0123456789abcdef0123456789"

#: the deployments docs/OPERATIONS.md offers: ``serve --broker-url`` with ``dramatiq workers.actors``
#: processes firing the timers, or ``serve`` alone (its timers run and publish in-process)
DEPLOYMENTS = ("broker+worker", "serve-alone")








def write_room(path: Path, name: str, **overrides: Any) -> Path:
    """A points room config like config/points.toml with ``overrides`` (a TOML file)."""
    base = tomllib.loads((ROOT / "config" / "points.toml").read_text())
    base.update(overrides)
    base["name"] = name
    lines, tables = [], {}
    for k, v in base.items():
        if isinstance(v, dict):
            tables[k] = v
        elif k == "levels":
            lines.append("levels = [" + ", ".join("{ level = %d, need = %d, base = %d }"
                                                  % (lv["level"], lv["need"], lv["base"]) for lv in v) + "]")
        else:
            lines.append(f"{k} = {json.dumps(v)}")
    for t, vals in tables.items():
        lines.append(f"[{t}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in vals.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Gateway:
    proc: subprocess.Popen
    port: int
    out: Path
    err: Path

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Stack:
    store_url: str
    broker_url: str
    tmp: Path
    rooms: list[Path]
    procs: list[subprocess.Popen] = field(default_factory=list)
    files: list[Any] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    gateways: list[Gateway] = field(default_factory=list)
    secret_file: Path | None = None
    deployment: str = DEPLOYMENTS[0]

    def env(self) -> dict[str, str]:
        env = dict(os.environ, SK_REDIS_URL=self.store_url, SK_BROKER_URL=self.broker_url, PYTHONUNBUFFERED="1",
                   SK_SWEEP_INTERVAL_MS="200", PYTHONPATH=str(ROOT))
        if self.deployment == "serve-alone":
            del env["SK_BROKER_URL"]  # serve's timers run in-process
        return env

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path, Path]:
        out, err = self.tmp / f"{name}.out", self.tmp / f"{name}.err"
        fo, fe = open(out, "wb"), open(err, "wb")
        self.files += [fo, fe]
        self.logs.append(err)
        proc = subprocess.Popen(argv, cwd=ROOT, env=env or self.env(), stdout=fo, stderr=fe, start_new_session=True)
        self.procs.append(proc)
        return proc, out, err

    def start_engine(self) -> None:
        """``serve`` (with ``--broker-url`` and a dramatiq worker, or alone: :attr:`deployment`)."""
        if self.deployment not in DEPLOYMENTS:
            raise ValueError(f"unknown deployment {self.deployment!r} (one of {DEPLOYMENTS})")
        broker = ["--broker-url", self.broker_url] if self.deployment == "broker+worker" else []
        serve, out, err = self._spawn("serve", [sys.executable, "-m", "shuangkou", "serve", "--redis", self.store_url,
                                                *broker, "--consumer", "gw-it-1"])
        wait_for(lambda: "ready consumer" in out.read_text(errors="replace") or serve.poll() is not None,
                 60, "serve did not start", tuple(self.logs))
        assert serve.poll() is None, tail(err)
        if not broker:
            return
        worker, _wout, werr = self._spawn("worker", [sys.executable, "-m", "dramatiq", "--processes", "1",
                                                     "--threads", "4", "workers.actors"])
        wait_for(lambda: "Worker process is ready" in werr.read_text(errors="replace") or worker.poll() is not None,
                 60, "the dramatiq worker did not start", tuple(self.logs))
        assert worker.poll() is None, tail(werr)

    def start_gateway(self, name: str, *extra: str) -> Gateway:
        assert self.secret_file is not None
        argv = [sys.executable, "-m", "shuangkou", "gateway", "--redis", self.store_url, "--port", "0",
                "--secret-file", str(self.secret_file), "--id", name, *extra]
        for r in self.rooms:
            argv += ["--room", str(r)]
        proc, out, err = self._spawn(f"gateway-{name}", argv)

        def port() -> int | None:
            assert proc.poll() is None, "the gateway exited:\n" + tail(err)
            for line in out.read_text(errors="replace").splitlines():
                if line.startswith("gateway-port "):
                    return int(line.split()[1])
            return None

        gw = Gateway(proc, wait_for(port, 60, "the gateway did not report its port", tuple(self.logs)), out, err)
        self.gateways.append(gw)
        return gw

    def stop(self) -> None:
        for p in reversed(self.procs):
            stop_group(p)
        for f in self.files:
            f.close()

    def token(self, player: str, role: str = "player", ttl: int = 3600, room: str | None = None) -> str:
        from gateway.tokens import mint

        return mint(SECRET, player, role=role, ttl_seconds=ttl, room=room)  # type: ignore[arg-type]


def start_stack(store_url: str, broker_url: str, tmp: Path, rooms: dict[str, dict[str, Any]],
                deployment: str = DEPLOYMENTS[0]) -> Stack:
    """A flushed store and broker, the rooms written as config files, the engine started in
    ``deployment`` (:data:`DEPLOYMENTS`); gateways are started with :meth:`Stack.start_gateway`."""
    import redis

    for url in (store_url, broker_url):
        with redis.Redis.from_url(url) as c:
            c.flushdb()
    files = [write_room(tmp / f"{name}.toml", name, **kw) for name, kw in rooms.items()]
    stack = Stack(store_url, broker_url, tmp, files, deployment=deployment)
    stack.secret_file = tmp / "secret"
    stack.secret_file.write_bytes(SECRET)
    try:
        stack.start_engine()
    except BaseException:
        stack.stop()
        raise
    return stack


def schema_problem(frame: str | bytes) -> str | None:
    """Why a server → client frame does not validate against gateway/schemas/server.json (None: it does)."""
    try:
        msg = json.loads(frame)
    except ValueError:
        return f"not JSON: {frame[:200]!r}"
    error = next(Client.validator("server.json").iter_errors(msg), None)
    return None if error is None else f"{error.message[:300]} at {list(error.absolute_path)} in {str(frame)[:300]}"


class Closed(Exception):
    def __init__(self, code: int | None, reason: str):
        super().__init__(f"closed {code}: {reason}")
        self.code = code
        self.reason = reason


class Client:
    """A WebSocket client that validates every message against the protocol's schemas."""

    _validators: dict[str, Any] = {}

    def __init__(self, ws: Any, name: str):
        self.ws = ws
        self.name = name
        self.received: list[dict[str, Any]] = []
        self._buffer: list[dict[str, Any]] = []

    @classmethod
    def validator(cls, name: str) -> Any:
        if name not in cls._validators:
            import jsonschema

            from gateway.schemas_gen import load

            cls._validators[name] = jsonschema.Draft202012Validator(load(name))
        return cls._validators[name]

    @classmethod
    async def connect(cls, url: str, token: str | None = None, name: str = "", version: int | None = None,
                      auth_message: bool = False, match: str | None = None) -> Client:
        import urllib.parse

        import websockets

        q = []
        if token is not None and not auth_message:
            q.append(f"token={token}")
        if version is not None and not auth_message:
            q.append(f"version={version}")
        if match is not None and not auth_message:
            q.append(f"match={urllib.parse.quote(match)}")
        ws = await websockets.connect(url + ("?" + "&".join(q) if q else ""), open_timeout=20)
        c = cls(ws, name)
        if auth_message:
            msg: dict[str, Any] = {"type": "Auth", "token": token}
            if version is not None:
                msg["version"] = version
            if match is not None:
                msg["match"] = match
            await c.send(msg)
        return c

    async def send(self, message: dict[str, Any], validate: bool = True) -> None:
        if validate:
            self.validator("client.json").validate(message)
        await self.ws.send(json.dumps(message))

    async def recv(self, timeout_s: float = 60) -> dict[str, Any]:
        import websockets

        if self._buffer:
            return self._buffer.pop(0)
        try:
            raw = await asyncio.wait_for(self.ws.recv(), timeout_s)
        except websockets.ConnectionClosed as exc:
            rcvd = exc.rcvd
            raise Closed(rcvd.code if rcvd else None, rcvd.reason if rcvd else "") from None
        msg = json.loads(raw)
        self.validator("server.json").validate(msg)
        self.received.append(msg)
        return msg

    async def expect(self, pred: Callable[[dict[str, Any]], bool], timeout_s: float = 60,
                     what: str = "a message") -> dict[str, Any]:
        """The first message matching ``pred`` (earlier ones are kept in ``received``)."""
        end = time.monotonic() + timeout_s
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.name}: no {what} in {timeout_s}s; got "
                                     f"{[m.get('kind') for m in self.received[-20:]]}; the last: "
                                     f"{self.received[-3:]}")
            try:
                msg = await self.recv(left)
            except asyncio.TimeoutError:
                continue
            if pred(msg):
                return msg

    async def closed(self, timeout_s: float = 30) -> Closed:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            try:
                await self.recv(end - time.monotonic())
            except Closed as c:
                return c
            except asyncio.TimeoutError:
                break
        raise AssertionError(f"{self.name}: the socket was not closed in {timeout_s}s")

    async def close(self) -> None:
        await self.ws.close()


def lobby(state: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("kind") == "lobby" and m.get("state") == state


def kind(k: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("kind") == k


def seat_of(view: dict[str, Any], player: str) -> dict[str, Any] | None:
    for s in view.get("seats") or ():
        if s and s["player"] == player:
            return s
    return None


async def ready_and_play(c: Client, match: str) -> dict[str, Any]:
    """Ready, wait for the deal, hand over to the trustee; returns this match's ``settled``."""
    await c.send({"type": "Ready", "command_id": f"ready-{match}"})
    asked = False
    while True:
        m = await c.recv()
        if m["kind"] == "update" and m["match"] == match and m["view"] and m["view"]["phase"] == "playing":
            seat = seat_of(m["view"], c.name)
            if not asked and seat is not None and not seat["trustee"]:
                await c.send({"type": "RequestTrustee"})
                asked = True
        if m["kind"] == "settled" and m["match"] == match:
            return m
