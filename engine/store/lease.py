"""A lease on one Redis key: ``SET NX PX`` taken by a token, renewed by its holder, dropped
only by it (the deadline dispatcher's, workers/dispatcher.py, and the serve replicas' bucket
leases, engine/service/ownership.py).  A holder that dies stops renewing: the key expires after
``ttl_ms`` and someone else takes it."""

from __future__ import annotations

from typing import Any

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
    """The two lease scripts registered on one client: ``hold(key, token, ttl_ms) -> 0|1|2``, ``drop``."""

    def __init__(self, client: Any):
        self._hold = client.register_script(HOLD_LUA)
        self._drop = client.register_script(DROP_LUA)

    def hold(self, key: str, token: str, ttl_ms: int) -> int:
        """1: renewed, 2: acquired now, 0: another token holds it."""
        return int(self._hold(keys=[key], args=[token, int(ttl_ms)]))

    def drop(self, key: str, token: str) -> bool:
        return bool(int(self._drop(keys=[key], args=[token])))
