"""Shared by ``shuangkou ledger`` and ``shuangkou room``: send one operator command on the
operator channel ``sk:ops`` and wait for the engine's reply (a running ``shuangkou serve``
applies it: the operator tool never writes the ledger or the rooms itself)."""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any

from engine.match.commands import CommandBase


def add_redis_arguments(parser: argparse.ArgumentParser, wait: bool = True) -> None:
    parser.add_argument("--redis", metavar="URL", default=os.environ.get("SK_REDIS_URL"),
                        help="the engine's Redis, redis://user:password@host:port/db (default $SK_REDIS_URL)")
    if wait:
        parser.add_argument("--timeout", type=float, default=10.0, metavar="S",
                            help="seconds to wait for the engine's reply (default 10)")


def connect(args: argparse.Namespace) -> Any:
    from shuangkou.cli import CliError
    from shuangkou.cli.serve import connect_redis

    if not args.redis:
        raise CliError("--redis URL is required (or set SK_REDIS_URL)")
    return connect_redis(args.redis, "--redis")


def send_and_wait(client: Any, command: CommandBase, timeout: float) -> Any:
    """XADD ``command`` to sk:ops with a private reply stream; the reply (an OutMessage)."""
    from shuangkou.cli import CliError
    from engine.service.client import GatewayClient

    from engine.store import keys

    reply_to = keys.ops_reply_key(uuid.uuid4().hex)
    gw = GatewayClient(client, reply_to=reply_to)
    gw.send(command)
    end = time.monotonic() + max(0.1, timeout)
    try:
        while time.monotonic() < end:
            left_ms = max(1, int((end - time.monotonic()) * 1000))
            for msg in gw.replies("0", block_ms=min(left_ms, 1000)):
                if msg.command_id == command.command_id:
                    return msg
        raise CliError(f"no reply from the engine within {timeout:g} s (is `shuangkou serve` running on "
                       f"this Redis?); the command {command.command_id} stays queued on sk:ops")
    finally:
        try:
            client.delete(reply_to)
        except Exception:
            pass
