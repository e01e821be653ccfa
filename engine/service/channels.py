"""Who may send what: the player channel ``sk:inbox`` and the operator channel ``sk:ops``.

Two command channels feed the command service (docs/SECURITY.md):

* **player** (``sk:inbox``): what a player does in a match -- Ready, Leave, Play,
  Pass, RequestTrustee, CancelTrustee, Disconnect, Reconnect, Escape, Sync.
  Gateways write here; the engine trusts the gateway for *which* player a
  command is for (the reference gateway takes it from a signed token).
* **ops** (``sk:ops``): what the lobby and operators do -- CreateMatch, Sit,
  a fixed-hand Deal, ledger Credit/Debit, room registration (AddRoom).
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
                             "Disconnect", "Reconnect", "Escape", "Sync"})
#: command types the lobby and operators may send, on ``sk:ops``
OPS_COMMANDS = frozenset({"CreateMatch", "Sit", "Deal", "Credit", "Debit", "AddRoom"})
#: command types only the timer workers run (no channel accepts them)
TIMER_COMMANDS = frozenset({"TurnTimeout", "TrusteeAct", "ReadyTimeout"})


@dataclass(frozen=True)
class Channel:
    """One command channel: its name, its stream and the command types it accepts."""

    name: str  # "player" | "ops"
    stream: str
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
                          f"({other.stream})")


PLAYER = Channel("player", keys.INBOX, PLAYER_COMMANDS)
OPS = Channel("ops", keys.OPS, OPS_COMMANDS)
CHANNELS: tuple[Channel, ...] = (PLAYER, OPS)


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


def channel_consumers(redis_client: Any, service: Any, consumer: str,
                      operator: Callable[[CommandBase], Any] | None = None,
                      **kwargs: Any) -> tuple[Any, Any]:
    """The two :class:`~engine.service.inbox.InboxConsumer` of a command service: the
    player channel's and the operator channel's, each refusing what its channel does
    not carry (``kwargs`` go to both consumers; ``operator`` serves the ops channel)."""
    from engine.service.inbox import InboxConsumer

    player = InboxConsumer(redis_client, ChannelService(service, PLAYER), consumer,
                           stream=PLAYER.stream, **kwargs)
    ops = InboxConsumer(redis_client, ChannelService(service, OPS, operator), consumer,
                        stream=OPS.stream, **kwargs)
    return player, ops
