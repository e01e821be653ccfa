"""A lease on one Redis key: ``SET NX PX`` taken by a token, renewed by its holder, dropped
only by it (the deadline dispatcher's, workers/dispatcher.py, and the serve replicas' bucket
leases, engine/service/ownership.py).  A holder that dies stops renewing: the key expires after
``ttl_ms`` and someone else takes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

# KEYS: lease; ARGV: token, ttl ms.  1: renewed, 2: acquired, 0: someone else holds it
HOLD_LUA = """
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"""

# KEYS: lease; ARGV: token.  1: dropped, 0: not ours (any more)
DROP_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class LeaseScripts:
    """The two lease scripts registered on one client: ``hold(key, token, ttl_ms) -> 0|1|2``, ``drop``;
    ``hold_many`` / ``drop_many`` run them on many keys with one round trip per Redis node."""

    def __init__(self, client: Any):
        self.client = client
        self._hold = client.register_script(HOLD_LUA)
        self._drop = client.register_script(DROP_LUA)

    def hold(self, key: str, token: str, ttl_ms: int) -> int:
        """1: renewed, 2: acquired now, 0: another token holds it."""
        return int(self._hold(keys=[key], args=[token, int(ttl_ms)]))

    def drop(self, key: str, token: str) -> bool:
        return bool(int(self._drop(keys=[key], args=[token])))

    def hold_many(self, lease_keys: Sequence[str], token: str, ttl_ms: int) -> list[int | Exception]:
        """:meth:`hold` of each key, one pipeline per node (one round trip on a plain Redis);
        each key's result, or the error of that key alone."""
        return self._many(self._hold, lease_keys, [token, int(ttl_ms)])

    def drop_many(self, lease_keys: Sequence[str], token: str) -> list[bool | Exception]:
        """:meth:`drop` of each key, one pipeline per node; each key's result or its error."""
        return [r if isinstance(r, Exception) else bool(r) for r in self._many(self._drop, lease_keys, [token])]

    def _many(self, script: Any, lease_keys: Sequence[str], args: list[Any]) -> list[Any]:
        from redis.cluster import RedisCluster

        out: list[Any] = [None] * len(lease_keys)
        if isinstance(self.client, RedisCluster):  # a plain pipeline per node (the Cluster pipeline refuses a registered script)
            groups: dict[str, tuple[Any, list[int]]] = {}
            for i, key in enumerate(lease_keys):
                node = self.client.get_node_from_key(key)
                groups.setdefault(node.name, (self.client.get_redis_connection(node), []))[1].append(i)
            parts = list(groups.values())
        else:
            parts = [(self.client, list(range(len(lease_keys))))]
        for node, idxs in parts:
            replies = self._pipelined(node, script, [lease_keys[i] for i in idxs], args)
            if any(isinstance(r, NoScriptError) for r in replies):  # a new node, or after SCRIPT FLUSH
                again = [k for k, r in enumerate(replies) if isinstance(r, NoScriptError)]
                try:
                    node.script_load(script.script)
                    for k, r in zip(again, self._pipelined(node, script, [lease_keys[idxs[k]] for k in again], args)):
                        replies[k] = r
                except Exception as exc:
                    for k in again:
                        replies[k] = exc
            for i, reply in zip(idxs, replies):
                out[i] = reply
        if isinstance(self.client, RedisCluster):
            for i, reply in enumerate(out):
                if isinstance(reply, Exception):  # e.g. a slot that moved: that key alone, through the client
                    try:
                        out[i] = script(keys=[lease_keys[i]], args=args)
                    except Exception as exc:
                        out[i] = exc
        return [r if isinstance(r, Exception) else int(r) for r in out]

    @staticmethod
    def _pipelined(node: Any, script: Any, lease_keys: Sequence[str], args: list[Any]) -> list[Any]:
        """One round trip: ``script`` on each key (EVALSHA directly: a registered script in a
        pipeline asks SCRIPT EXISTS first, a round trip more); each reply or error."""
        pipe = node.pipeline(transaction=False)
        for key in lease_keys:
            pipe.execute_command("EVALSHA", script.sha, 1, key, *args)
        try:
            return list(pipe.execute(raise_on_error=False))
        except Exception as exc:  # the connection: every key of that node
            return [exc] * len(lease_keys)
