"""``shuangkou token``: development tokens and the gateway's signing secret.

* ``shuangkou token PLAYER --secret-file F [--role spectator] [--ttl 3600] [--room NAME] [--name 小明]
  [--audience AUD] [--issuer ISS]``:
  mint a gateway session token (JWT, HS256) for tests and development; prints it.
* ``shuangkou token --new-secret FILE``: write a new signing secret for ``gateway
  --secret-file``: 32 random bytes (``secrets.token_bytes``), the file created with mode
  0600 (never overwriting one: a new secret logs every player out).  The same with
  openssl: ``(umask 077; openssl rand -out FILE 32)``.
"""

from __future__ import annotations

import argparse

#: bytes of a new secret (gateway.tokens.MIN_SECRET_BYTES is the least a gateway accepts)
NEW_SECRET_BYTES = 32


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("player", nargs="?", help="the player id (the token's sub)")
    parser.add_argument("--secret-file", metavar="F", help="the signing secret (>= 32 bytes)")
    parser.add_argument("--new-secret", metavar="FILE",
                        help="write a new random signing secret (32 bytes, mode 0600) to FILE and exit")
    parser.add_argument("--role", default="player", choices=("player", "spectator", "operator"))
    parser.add_argument("--ttl", type=int, default=3600, help="seconds until it expires (default 3600)")
    parser.add_argument("--room", default=None, help="restrict the token to one room")
    parser.add_argument("--name", default=None, help="the display name shown at the table (1–24 characters, "
                        "any script; control and format characters are dropped)")
    parser.add_argument("--audience", default=None, metavar="AUD",
                        help="its aud claim (for a gateway started with --token-audience AUD)")
    parser.add_argument("--issuer", default=None, metavar="ISS",
                        help="its iss claim (for a gateway started with --token-issuer ISS)")


def new_secret() -> bytes:
    """32 random bytes that :func:`gateway.tokens.load_secret` reads back unchanged (it strips
    surrounding whitespace, so a draw that starts or ends with a whitespace byte is drawn again)."""
    import secrets

    while True:
        data = secrets.token_bytes(NEW_SECRET_BYTES)
        if data.strip() == data:
            return data


def write_new_secret(path: str) -> None:
    """Create ``path`` (mode 0600, exclusively) holding :func:`new_secret`."""
    import os

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, new_secret())
        os.fsync(fd)
    finally:
        os.close(fd)


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError
    from gateway.tokens import load_secret, mint

    if args.new_secret:
        if args.player or args.secret_file:
            raise CliError("--new-secret FILE writes a secret and mints no token: give it alone")
        try:
            write_new_secret(args.new_secret)
        except FileExistsError:
            raise CliError(f"{args.new_secret} exists: not replaced (a new secret logs every player out; "
                           "remove the file first to rotate it)") from None
        except OSError as exc:
            raise CliError(f"cannot write {args.new_secret}: {exc.strerror or exc}") from None
        print(f"wrote a new {NEW_SECRET_BYTES}-byte secret to {args.new_secret} (mode 0600); "
              f"use it with: shuangkou gateway --secret-file {args.new_secret}")
        return 0
    if not args.player or not args.secret_file:
        raise CliError("give PLAYER --secret-file F (a token), or --new-secret FILE (a secret)")
    try:
        secret = load_secret(args.secret_file)
        print(mint(secret, args.player, role=args.role, ttl_seconds=args.ttl, room=args.room, name=args.name,
                   audience=args.audience, issuer=args.issuer))
    except OSError as exc:
        raise CliError(f"cannot read --secret-file {args.secret_file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return 0
