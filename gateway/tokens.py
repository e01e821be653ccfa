"""Signed session tokens: JWT with HS256 (PyJWT).

Claims: ``sub`` (the player id), ``role`` (``player``, ``spectator`` or
``operator``), ``exp`` (expiry, seconds since the epoch) and optionally ``room``
(the only room this token may join or watch) and ``name`` (the display name shown at
the table: 1–24 characters of any script, cleaned by :func:`gateway.names.clean_name`).  The gateway takes the player of
every command from ``sub``; nothing in a message can change it.

>>> secret = b"0123456789abcdef0123456789abcdef"
>>> token = mint(secret, "alice", ttl_seconds=60, now=1_000)
>>> verify(secret, token, now=1_010)
Identity(player='alice', role='player', room=None, expires_at=1060, name=None)
>>> verify(secret, mint(secret, 'u1', name=' 小明 ', now=1_000), now=1_010).name
'小明'
>>> verify(secret, token, now=2_000)
Traceback (most recent call last):
...
gateway.tokens.TokenError: the token has expired
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jwt

from engine.store import keys
from gateway.names import BadName, clean_name

Role = Literal["player", "spectator", "operator"]
ROLES: tuple[Role, ...] = ("player", "spectator", "operator")
ALGORITHM = "HS256"
MIN_SECRET_BYTES = 32  # RFC 7518 §3.2: an HS256 key at least as long as the hash
MAX_SUBJECT = 100  # like a seated player's id (engine Sit)


class TokenError(ValueError):
    """The token is missing, malformed, badly signed, expired or lacks a claim (close 4401);
    ``code``: ``missing``, ``expired`` or ``invalid`` (the gateway's auth failure label).

    >>> for token in ("", "x.y.z", mint(b"k" * 32, "ann", ttl_seconds=60, now=0)):
    ...     try:
    ...         verify(b"k" * 32, token)
    ...     except TokenError as e:
    ...         print(e.code, "-", e)
    missing - no token
    invalid - not a valid token (DecodeError)
    expired - the token has expired
    """

    def __init__(self, reason: str, code: Literal["missing", "expired", "invalid"] = "invalid"):
        super().__init__(reason)
        self.code = code


#: the longest a token may still run when the gateway sees it, by default (``--token-max-lifetime``)
DEFAULT_MAX_LIFETIME = 30 * 24 * 3600


@dataclass(frozen=True, slots=True)
class TokenPolicy:
    """What a token must also satisfy at this gateway (``shuangkou gateway`` flags):
    ``max_lifetime``: its ``exp`` at most that many seconds ahead (None: any), so a token
    minted for years, or taken from one who was, is refused; ``audience`` / ``issuer``: its
    ``aud`` / ``iss`` claims must name them (None: not checked), so a token another service
    signs with a shared secret is refused here.

    >>> secret = b"k" * 32
    >>> verify(secret, mint(secret, "ann", ttl_seconds=10**8, now=0), now=0)
    Traceback (most recent call last):
    ...
    gateway.tokens.TokenError: the token runs 100000000 s, longer than this gateway takes (2592000 s)
    >>> policy = TokenPolicy(audience="shuangkou", issuer="rooms.example")
    >>> verify(secret, mint(secret, "ann", now=0), now=0, policy=policy)
    Traceback (most recent call last):
    ...
    gateway.tokens.TokenError: the token lacks the 'aud' claim
    >>> token = mint(secret, "ann", now=0, audience="shuangkou", issuer="rooms.example")
    >>> verify(secret, token, now=0, policy=policy).player
    'ann'
    >>> verify(secret, token, now=0, policy=TokenPolicy(audience="other"))
    Traceback (most recent call last):
    ...
    gateway.tokens.TokenError: the token is not for this gateway (its aud claim)
    """

    max_lifetime: int | None = DEFAULT_MAX_LIFETIME
    audience: str | None = None
    issuer: str | None = None

    def __post_init__(self) -> None:
        if self.max_lifetime is not None and self.max_lifetime <= 0:
            raise ValueError(f"the longest token lifetime must be positive, got {self.max_lifetime}")
        for what, value in (("audience", self.audience), ("issuer", self.issuer)):
            if value is not None and not value.strip():
                raise ValueError(f"the token {what} must not be empty")


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a socket speaks for, from a verified token."""

    player: str
    role: Role
    room: str | None
    expires_at: int
    name: str | None = None  # the display name (the ``name`` claim), cleaned


def load_secret(path: str | Path) -> bytes:
    """The signing secret from a file (surrounding whitespace stripped); at least 32 bytes."""
    data = Path(path).read_bytes().strip()
    if len(data) < MIN_SECRET_BYTES:
        raise ValueError(f"{path}: the secret must be at least {MIN_SECRET_BYTES} bytes, got {len(data)}")
    return data


def mint(secret: bytes, player: str, role: Role = "player", ttl_seconds: int = 3600,
         room: str | None = None, now: int | None = None, name: str | None = None,
         audience: str | None = None, issuer: str | None = None) -> str:
    """A signed token for ``player`` that expires ``ttl_seconds`` from ``now``; ``name`` (the
    display name) is cleaned first, and a bad one is a ValueError (:class:`gateway.names.BadName`);
    ``audience`` / ``issuer``: its ``aud`` / ``iss`` claims (:class:`TokenPolicy`)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not 0 < len(player) <= MAX_SUBJECT:
        raise ValueError(f"the player id must be 1..{MAX_SUBJECT} characters")
    if (problem := keys.player_id_problem(player)) is not None:
        raise ValueError(problem)
    if keys.is_bot_id(player):
        raise ValueError(f"{player!r} is a bot seat's id (bot-<n>), reserved for the gateway's bots")
    if ttl_seconds <= 0:
        raise ValueError(f"ttl must be positive, got {ttl_seconds}")
    issued = int(time.time()) if now is None else int(now)
    claims: dict[str, object] = {"sub": player, "role": role, "iat": issued, "exp": issued + int(ttl_seconds)}
    if room is not None:
        claims["room"] = room
    if name is not None:
        claims["name"] = clean_name(name)
    if audience is not None:
        claims["aud"] = audience
    if issuer is not None:
        claims["iss"] = issuer
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify(secret: bytes, token: object, now: int | None = None, policy: TokenPolicy = TokenPolicy()) -> Identity:
    """The identity a token carries; :class:`TokenError` with a short reason otherwise.

    Only HS256 is accepted (a token signed ``none`` or with another algorithm is refused),
    ``exp`` is required, ``sub`` must be a 1..100 character string and ``role`` a known role;
    and what ``policy`` asks (:class:`TokenPolicy`: by default ``exp`` at most 30 days ahead).
    """
    if not isinstance(token, str) or not token:
        raise TokenError("no token", "missing")
    if len(token) > 4096:
        raise TokenError("the token is too long")
    required = ["exp", "sub"] + (["aud"] if policy.audience else []) + (["iss"] if policy.issuer else [])
    # a token with an aud claim is refused where no audience is set (PyJWT's check, as before)
    options: jwt.types.Options = {"require": required, "verify_exp": now is None}
    try:
        claims = jwt.decode(token, secret, algorithms=[ALGORITHM], options=options,
                            audience=policy.audience, issuer=policy.issuer)
    except jwt.ExpiredSignatureError:
        raise TokenError("the token has expired", "expired") from None
    except jwt.MissingRequiredClaimError as exc:
        raise TokenError(f"the token lacks the {exc.claim!r} claim") from None
    except jwt.InvalidSignatureError:
        raise TokenError("the token's signature is not valid") from None
    except jwt.InvalidAudienceError:
        raise TokenError("the token is not for this gateway (its aud claim)") from None
    except jwt.InvalidIssuerError:
        raise TokenError("the token is not from this gateway's issuer (its iss claim)") from None
    except jwt.PyJWTError as exc:
        raise TokenError(f"not a valid token ({type(exc).__name__})") from None
    exp = claims.get("exp")
    if not isinstance(exp, int):
        raise TokenError("the token's exp claim is not a number")
    if now is not None and exp <= now:
        raise TokenError("the token has expired", "expired")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not 0 < len(sub) <= MAX_SUBJECT:
        raise TokenError(f"the token's sub claim must be 1..{MAX_SUBJECT} characters")
    if (problem := keys.player_id_problem(sub)) is not None:
        raise TokenError(f"the token's sub claim: {problem}")
    if keys.is_bot_id(sub):
        raise TokenError("the token's sub claim is a bot seat's id (bot-<n>), reserved for the gateway's bots")
    role = claims.get("role", "player")
    if role not in ROLES:
        raise TokenError(f"the token's role must be one of {', '.join(ROLES)}")
    room = claims.get("room")
    if room is not None and (not isinstance(room, str) or not room):
        raise TokenError("the token's room claim must be a room name")
    name = claims.get("name")
    if name is not None:
        try:
            name = clean_name(name)
        except BadName as exc:
            raise TokenError(f"the token's name claim: {exc}") from None
    at = int(time.time()) if now is None else now
    if policy.max_lifetime is not None and exp - at > policy.max_lifetime:
        raise TokenError(f"the token runs {exp - at} s, longer than this gateway takes ({policy.max_lifetime} s)")
    return Identity(player=sub, role=role, room=room, expires_at=exp, name=name)
