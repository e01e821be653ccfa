"""Prometheus metrics of one gateway process (served at ``/metrics``).

==========================================================  =========  ===============================
``shuangkou_gateway_connections{role}``                      gauge      open authenticated sockets
``shuangkou_gateway_messages_in_total{type}``                counter    client messages received
``shuangkou_gateway_messages_out_total{kind}``               counter    server messages sent
``shuangkou_gateway_auth_failures_total{reason}``            counter    sockets closed 4401
``shuangkou_gateway_rejected_total{code}``                   counter    ``rejected`` sent (gateway + engine)
``shuangkou_gateway_command_round_trip_seconds{type}``       histogram  client message → its update/rejection
``shuangkou_gateway_refusals_total{reason}``                 counter    the edge's refusals (:data:`REFUSALS`)
``shuangkou_gateway_lobby_queue_length{room}``               gauge      players waiting in a room's queue
                                                                        (read from the lobby at each scrape)
``shuangkou_replica_acks``                                   gauge      replicas a lobby transition waits for
``shuangkou_replica_waits_total{result}``                    counter    the lobby's WAITs (ok/noreplicas)
==========================================================  =========  ===============================

Labels are bounded: message types and kinds are the protocol's (anything else is
``other``), auth reasons and codes a short fixed list, rooms the ones the gateway serves.
Every series of a known label exists at 0 from the first scrape (a panel or an alert
on it sees the first increment).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST  # noqa: F401  (re-exported for the app)

from gateway.protocol import CLIENT_TYPES, SERVER_KINDS

KINDS = SERVER_KINDS
AUTH_REASONS = ("missing", "invalid", "expired", "timeout")
ROLES = ("player", "spectator", "operator")
#: why the gateway's edge refused something (issue 23): a handshake's Origin (403), a message over
#: ``--max-message-bytes`` (1009), a command over the socket's rate (``rate_limited``), a Sync over
#: the Sync rate, a socket closed 4429, an address over its unauthenticated sockets (1013), a
#: socket closed 4401 at its token's exp, a second message before the Auth, a live match's replay (409),
#: a token subject's sockets opened over ``--connect-rate`` (4429), a player's CreateTables over the limit
REFUSALS = ("origin", "too_large", "rate_limited", "sync_limited", "rate_closed",
            "unauthenticated_per_address", "token_expired", "before_auth", "live_replay", "say_limited",
            "join_table_limited", "sockets_per_watcher", "metrics_from", "connect_limited",
            "create_table_limited")


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.connections = Gauge("shuangkou_gateway_connections", "Open authenticated WebSocket connections",
                                 ["role"], registry=r)
        self.messages_in = Counter("shuangkou_gateway_messages_in_total", "Client messages received",
                                   ["type"], registry=r)
        self.messages_out = Counter("shuangkou_gateway_messages_out_total", "Server messages sent",
                                    ["kind"], registry=r)
        self.auth_failures = Counter("shuangkou_gateway_auth_failures_total",
                                     "Sockets closed with 4401 (missing, bad or expired token)", ["reason"], registry=r)
        self.rejected = Counter("shuangkou_gateway_rejected_total", "rejected messages sent to clients",
                                ["code"], registry=r)
        self.round_trip = Histogram("shuangkou_gateway_command_round_trip_seconds",
                                    "From a client's command to the update or rejection it caused",
                                    ["type"], registry=r,
                                    buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.refusals = Counter("shuangkou_gateway_refusals_total",
                                "What the gateway's edge refused (Origin, size, rate, Sync rate, sockets per address, "
                                "expired tokens, live replays)", ["reason"], registry=r)
        for reason in REFUSALS:
            self.refusals.labels(reason)
        self.lobby_queue = Gauge("shuangkou_gateway_lobby_queue_length",
                                 "Players waiting in a room's lobby queue (read at scrape time)", ["room"], registry=r)
        self.replica_acks = Gauge("shuangkou_replica_acks",
                                  "Replicas each lobby transition waits for (WAIT; SK_REPLICA_ACKS, issue 35 §3)",
                                  registry=r)
        self.replica_waits = Counter("shuangkou_replica_waits_total",
                                     "The lobby's WAITs for replica acknowledgements, by result (ok/noreplicas)",
                                     ["result"], registry=r)
        for result in ("ok", "noreplicas"):
            self.replica_waits.labels(result)
        for role in ROLES:  # every series exists at zero
            self.connections.labels(role)
        for t in sorted(CLIENT_TYPES):
            self.messages_in.labels(t)
            self.round_trip.labels(t)
        #: the per-message series, looked up once (``labels()`` takes a lock and hashes its values
        #: on every call: two of them for each message sent and received)
        self._out = {k: self.messages_out.labels(k) for k in (*KINDS, "other")}
        self._in = {t: self.messages_in.labels(t) for t in (*sorted(CLIENT_TYPES), "other")}
        for reason in AUTH_REASONS:
            self.auth_failures.labels(reason)

    def replica_wait(self, result: str, _seconds: float) -> None:
        """One WAIT of the lobby (engine/store/replicas.py's ``on_wait``)."""
        self.replica_waits.labels("noreplicas" if result == "noreplicas" else "ok").inc()

    def message_in(self, mtype: str) -> None:
        self._in.get(mtype, self._in["other"]).inc()

    def message_out(self, kind: str, code: str | None = None) -> None:
        self._out.get(kind, self._out["other"]).inc()
        if kind == "rejected" and code:
            self.rejected.labels(code if len(code) <= 32 and code.isidentifier() else "other").inc()

    def refused(self, reason: str) -> None:
        self.refusals.labels(reason if reason in REFUSALS else "other").inc()

    def queue_lengths(self, lengths: dict[str, int]) -> None:
        """The lobby queue length of each room served (``room`` → players waiting)."""
        for room, n in lengths.items():
            self.lobby_queue.labels(room).set(n)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
