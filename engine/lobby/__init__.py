"""The lobby as two event-sourced aggregates beside the match (issue 34; docs/ARCHITECTURE.md
"The table and the room queue"): a room's **queue** (who waits, pairing, the bot a queue
timer seats, the leave cooldown) and a **table** (its two seats, who is ready, its matches
``<table>-<n>``, between matches, closed with a reason).  Pure like ``engine/match``:
frozen state (:mod:`engine.lobby.state`), commands (:mod:`engine.lobby.commands`), events
(:mod:`engine.lobby.events`), ``decide`` (:mod:`engine.lobby.decide`), ``apply``
(:mod:`engine.lobby.evolve`), replay (:mod:`engine.lobby.replay`), and the process managers
that carry one aggregate's events to another (:mod:`engine.lobby.managers`).

The live lobby: each serve replica runs these aggregates for the buckets it holds
(engine/service/lobby_worker.py); the gateway is an adapter.  The mapping from each operation of
the old gateway/lobby.lua (and the Python around it), the builds before issue 34, to the model:

==========================  ====================================================================
lobby.lua / lobby.py        the model
==========================  ====================================================================
``join``                    queue ``Join`` → PlayerQueued (+ TablePaired); the reply's
                            ``queued``/``table`` state when already there: a Join that changes
                            nothing; admission (R-11.1, in session.py today): ``seat_refused``
``pair`` (inside ``join``,  TablePaired in the same decision as the PlayerQueued or the
``removed``, ``advance``)   requeue that made two wait (oldest Join first)
``bot`` (gateway --bots)    queue ``QueueTimer`` → BotSeated (``ctx.bots``: the wait and level)
``quit`` / ``leave`` /      one ``Leave`` to the queue: PlayerLeftQueue(left) when waiting, else
``Lobby._leave`` /          LeaveRequested, handed to the table (managers.from_queue); the table:
``Connection._leave_in_``   ``creating`` → TableClosed(left) now; ``seated`` → LeaveDeferred
``the_lobby``               (the engine decides: Leave before the deal, Escape after, R-12.1);
                            ``between`` → LeaveNoted (the settlement closes the table)
``quit_<seat>``             LeaveDeferred's ``quit``: whoever left into the match leaves with the
                            table should it close in that match, never requeued
``leaving_<seat>``          LeaveNoted's ``leaving``
``dequeue`` (grace, bot)    ``GraceExpired`` → PlayerLeftQueue(disconnected); a bot never waits
                            (it is never queued, so it never dequeues itself)
``seated``                  table ``ConfirmSeated`` → MatchSeated (the ``seated`` notes)
``_create`` (CreateMatch,   managers.to_match on TableOpened / NextMatchOffered: CreateMatch and
Sit; ``seat_refused``)      the Sits with fixed ids; a refused Sit: ``MatchEnded(removed,
                            seat_refused)``
``observe`` / ``removed``   managers.from_match: the match's PlayerRemoved / MatchAbandoned →
                            ``MatchEnded(removed|abandoned)`` → TableClosed: the removed leave the
                            room (``removed`` with the reason: ``not_ready``, ``left``, …), the
                            other is requeued ``opponent_left`` by the queue's ``ReleaseTable``
                            (managers.from_table), a bot leaves (``table_closed``)
``observe`` / ``finished``  MatchFinished → ``MatchEnded(finished, escaper)`` (status ``between``)
``advance`` / ``_settle``   ``Settle`` (the ledger's settlement) → MatchSettled (the ``settled``
                            notes), then TableClosed (an escaper, a Leave at the settlement) or
                            NextMatchOffered ``<table>-<n+1>``
``absent`` + Disconnect     ``GraceExpired`` to the queue → AwayNoted → the table's PlayerAway →
                            a Disconnect in the match (R-13.4); a player away when the table
                            closes is not requeued (LeftWithTable(disconnected))
``came_back`` + Reconnect   ``Returned`` → AwayNoted(away false) → PlayerBack → a Reconnect
``claim`` / ``pending``     no equivalent: each step is a command with a fixed id, retried by the
                            process manager that reads the source stream from its checkpoint
``away`` / ``missed_end``   no equivalent: the table learns a match's end from the match's feed
                            (managers.from_match), not from the players' update streams
``presence`` zset           stays in the gateway (heartbeats); only the grace's end is a command
==========================  ====================================================================

Where the model differs from the live lobby (each on purpose): a requeued player keeps their
Join's time (their place in line and the bot's wait); a Leave sent to a table that closed
meanwhile is not lost, the queue holds it (LeftWithTable); a player whose Leave or Escape
went to a finished match leaves at its settlement; and the leave cooldown
(``leave_cooldown_seconds``, ``leave_cooldown_max_seconds``) is new.

A third aggregate, a private table's series of hands (issue 39), has the same shape:
:mod:`engine.lobby.series` (state, ``decide``, ``apply``, replay, the standings), its events
(:mod:`engine.lobby.series_events`), commands (:mod:`engine.lobby.series_commands`) and
process managers (:mod:`engine.lobby.series_managers`).
"""
