"""Who may send what: the player channel ``sk:{b<N>}:inbox`` and the operator channel ``sk:{b<N>}:ops`` / ``sk:ops``.

Two command channels feed the command service (docs/SECURITY.md); each is one stream
per bucket of matches (N = ``engine.store.keys.bucket_of`` the match id, issue 24 §2),
so no slot of a Redis Cluster carries every command (:func:`stream_for`):

* **player** (``sk:{b<N>}:inbox``): what a player does in a match -- Ready, Leave, Play,
  Pass, RequestTrustee, CancelTrustee, Disconnect, Reconnect, Escape, Sync, Say.
  Gateways write here; the engine trusts the gateway for *which* player a
  command is for (the reference gateway takes it from a signed token).
* **ops**: what the lobby and operators do -- CreateMatch, Sit, a fixed-hand Deal
  (on the match's ``sk:{b<N>}:ops``), ledger Credit/Debit, room registration
  (AddRoom; these name no match: on ``sk:ops``).
* **Timer commands** (TurnTimeout, TrusteeAct, ReadyTimeout) come through
  neither: only the timer workers run them, straight through the service.

A command on the wrong channel is *refused* (``not_allowed``, with a reason
naming the right channel), never dead-lettered: the sender is known, so it
hears why like any other refusal.

>>> from engine.match.commands import Ready, TurnTimeout
>>> PLAYER.refusal(Ready(command_id="c", match_id="m", player="a")) is None
True
>>> OPS.refusal(Ready(command_id="c", match_id="m", player="a")).code
'not_allowed'
>>> print(PLAYER.refusal(TurnTimeout(command_id="c", match_id="m", version=3)))
TurnTimeout is a timer command: only the engine's timer workers run it, never a command channel
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.match.commands import CommandBase
from engine.match.errors import NotAllowed, Rejected
from engine.store import keys

if TYPE_CHECKING:
    from engine.service.service import Carry

#: command types a player (through a gateway) may send, on ``sk:inbox``
PLAYER_COMMANDS = frozenset({"Ready", "Leave", "Play", "Pass", "RequestTrustee", "CancelTrustee",
                             "Disconnect", "Reconnect", "Escape", "Sync", "Say"})
#: command types the lobby and operators may send, on ``sk:ops``
OPS_COMMANDS = frozenset({"CreateMatch", "Sit", "Deal", "Credit", "Debit", "AddRoom"})
#: command types only the timer workers run (no channel accepts them)
TIMER_COMMANDS = frozenset({"TurnTimeout", "TrusteeAct", "ReadyTimeout", "ExtendClock"})


@dataclass(frozen=True)
class Channel:
    """One command channel: its name, its stream and the command types it accepts."""

    name: str  # "player" | "ops"
    stream: str  # how refusals name the channel's streams
    accepts: frozenset[str]

    def refusal(self, command: CommandBase) -> Rejected | None:
        """None when this channel accepts ``command``'s type; else the ``not_allowed`` refusal."""
        ctype = command_type(command)
        if ctype in self.accepts:
            return None
        if ctype in TIMER_COMMANDS:
            return NotAllowed(f"{ctype} is a timer command: only the engine's timer workers run it, "
                              "never a command channel")
        other = channel_for(ctype)
        if other is None:
            return NotAllowed(f"{ctype} is not accepted on any command channel")
        return NotAllowed(f"{ctype} is not accepted on the {self.name} channel ({self.stream}); "
                          f"it is a{'n' if other.name[0] in 'aeiou' else ''} {other.name} command "
                          f"({stream_for(command) if isinstance(command, CommandBase) else other.stream})")


    def streams(self, buckets: int = keys.DEFAULT_BUCKETS) -> list[str]:
        """Every stream of this channel: one per bucket, then the channel's unbucketed stream
        (``sk:ops`` for Credit/Debit/AddRoom; ``sk:inbox``, drained during an upgrade)."""
        per_bucket = keys.inbox_key if self.name == "player" else keys.ops_key
        return [per_bucket(b) for b in range(buckets)] + [self.legacy]

    @property
    def legacy(self) -> str:
        """The channel's one unbucketed stream (``sk:inbox`` / ``sk:ops``)."""
        return keys.INBOX if self.name == "player" else keys.OPS


#: shown in refusals: the player channel is one stream per bucket (issue 24 §2)
PLAYER = Channel("player", "sk:{b<N>}:inbox", PLAYER_COMMANDS)
OPS = Channel("ops", "sk:{b<N>}:ops or sk:ops", OPS_COMMANDS)
CHANNELS: tuple[Channel, ...] = (PLAYER, OPS)

#: operator commands that name no match: they stay on the one stream ``sk:ops`` (any replica)
UNBUCKETED_OPS = frozenset({"Credit", "Debit", "AddRoom"})


def stream_for(command: CommandBase, buckets: int = keys.DEFAULT_BUCKETS) -> str:
    """The stream that carries ``command`` (issue 24 §2, docs/PROTOCOL.md §1).

    A player command goes to its match's bucket, ``sk:{b<N>}:inbox``; CreateMatch, Sit and
    Deal to ``sk:{b<N>}:ops``; Credit, Debit and AddRoom to ``sk:ops``; N =
    :func:`engine.store.keys.bucket_of` the match id.  A timer command has no stream (ValueError).

    >>> from engine.match.commands import Ready, Credit
    >>> stream_for(Ready(command_id="c", match_id="t1-1", player="a"))
    'sk:{b5}:inbox'
    >>> stream_for(Credit(command_id="c", player="a", mode="points", amount=5, reason="r", operator="o"))
    'sk:ops'
    """
    ctype = command_type(command)
    if ctype in UNBUCKETED_OPS:
        return keys.OPS
    bucket = keys.bucket_of(command.match_id or "", buckets)
    if ctype in OPS_COMMANDS:
        return keys.ops_key(bucket)
    if ctype in PLAYER_COMMANDS:
        return keys.inbox_key(bucket)
    raise ValueError(f"{ctype} is not sent on any command channel")


def command_type(command: CommandBase | str) -> str:
    return command if isinstance(command, str) else str(getattr(command, "type", type(command).__name__))


def channel_for(command: CommandBase | str) -> Channel | None:
    """The channel that carries ``command`` (a command or its type name); None for timer commands."""
    ctype = command_type(command)
    for ch in CHANNELS:
        if ctype in ch.accepts:
            return ch
    return None


class ChannelService:
    """A service for one channel: refuses the command types the channel does not carry,
    hands operator commands to ``operator`` (when given) and the rest to ``service``.

    ``service`` is a :class:`~engine.service.service.MatchService` (or a wrapper of one:
    anything with ``execute`` and, for the refusal's state, ``load_state``).
    ``operator(command) -> Outcome | None`` handles the commands that are not match
    commands (ledger entries, room registration) and returns None for the others.
    """

    def __init__(self, service: Any, channel: Channel,
                 operator: Callable[[CommandBase], Any] | None = None):
        self.service = service
        self.channel = channel
        self.operator = operator
        self.refused = 0  # commands refused for their channel

    def __getattr__(self, name: str) -> Any:  # stand wherever the wrapped service does
        return getattr(self.service, name)

    def execute(self, command: CommandBase) -> Any:
        refusal = self.channel.refusal(command)
        if refusal is not None:
            self.refused += 1
            return refused_outcome(self.service, command, refusal)
        if self.operator is not None:
            outcome = self.operator(command)
            if outcome is not None:
                return outcome
        return self.service.execute(command)

    def execute_many(self, commands: Sequence[CommandBase], carry: Carry | None = None) -> list[Any]:
        """:meth:`execute` of each command, in order: the channel's refusals and the
        operator's commands here, the match commands through the wrapped service's
        ``execute_many`` (pipelined appends) when it has one.  One result per command:
        its outcome, or the exception executing it raised (see
        :meth:`engine.service.service.MatchService.execute_many`; ``carry`` goes on to it)."""
        results: list[Any] = [None] * len(commands)
        passed: list[int] = []
        for i, command in enumerate(commands):
            try:
                refusal = self.channel.refusal(command)
                if refusal is not None:
                    self.refused += 1
                    results[i] = refused_outcome(self.service, command, refusal)
                    continue
                if self.operator is not None:
                    outcome = self.operator(command)
                    if outcome is not None:
                        results[i] = outcome
                        continue
            except Exception as exc:
                results[i] = exc
                continue
            passed.append(i)
        from engine.service.inbox_message import run_many

        if len(passed) < len(commands):  # outcomes decided here are published after the appends:
            carry = None                 # nothing is carried past them (it would reach the streams first)
        for i, result in zip(passed, run_many(self.service, [commands[i] for i in passed], carry=carry)):
            results[i] = result
        return results


def refused_outcome(service: Any, command: CommandBase, refusal: Rejected) -> Any:
    """An Outcome refusing ``command`` without deciding it (the match's current state beside it)."""
    from engine.match.state import MatchState
    from engine.service.service import Outcome

    state = None
    load = getattr(service, "load_state", None)
    if load is not None and command.match_id:
        state = load(command.match_id)
    if state is None:
        state = MatchState(match_id=command.match_id or "")
    return Outcome((), state, refusal)


class ChannelConsumers:
    """The :class:`~engine.service.inbox.InboxConsumer` of every stream of one channel (one per
    bucket and the unbucketed one), driven as one: for tests, ``simulate`` and one-process rigs.

    ``serve`` does not use it: there each bucket's streams are consumed by the bucket's owner
    only (engine/service/ownership.py)."""

    def __init__(self, consumers: Sequence[Any]):
        self.consumers = list(consumers)

    @property
    def streams(self) -> list[str]:
        return [c.stream for c in self.consumers]

    @property
    def stats(self) -> Any:
        from engine.service.publish import GatewayStats

        total = GatewayStats()
        for c in self.consumers:
            for name, value in vars(c.stats).items():
                if isinstance(value, int):
                    setattr(total, name, getattr(total, name, 0) + value)
        return total

    def publish(self, *args: Any, **kwargs: Any) -> None:
        self.consumers[0].publish(*args, **kwargs)

    def run_once(self, block_ms: int | None = None, count: int = 10, **kwargs: Any) -> int:
        """One non-blocking read of each stream; then, with ``block_ms`` and nothing read, a pause."""
        import time

        n = sum(c.run_once(block_ms=None, count=count, **kwargs) for c in self.consumers)
        if not n and block_ms:
            time.sleep(block_ms / 1000)
        return n

    def run(self, stop: Any, **kwargs: Any) -> None:
        """Each stream's loop in its own thread, until ``stop`` is set."""
        import threading

        threads = [threading.Thread(target=c.run, args=(stop,), kwargs=kwargs, daemon=True,
                                    name=f"consume {c.stream}") for c in self.consumers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def channel_consumers(redis_client: Any, service: Any, consumer: str,
                      operator: Callable[[CommandBase], Any] | None = None,
                      buckets: int = keys.DEFAULT_BUCKETS,
                      **kwargs: Any) -> tuple[ChannelConsumers, ChannelConsumers]:
    """The consumers of a command service's two channels, each over all the channel's streams
    (:meth:`Channel.streams`), each refusing what its channel does not carry (``kwargs`` go to
    every consumer; ``operator`` serves the ops channel)."""
    from engine.service.inbox import InboxConsumer

    player = ChannelConsumers([InboxConsumer(redis_client, ChannelService(service, PLAYER), consumer,
                                             stream=s, **kwargs) for s in PLAYER.streams(buckets)])
    ops = ChannelConsumers([InboxConsumer(redis_client, ChannelService(service, OPS, operator), consumer,
                                          stream=s, **kwargs) for s in OPS.streams(buckets)])
    return player, ops
