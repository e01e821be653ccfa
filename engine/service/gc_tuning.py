"""The garbage collector of a long-running engine process (``serve``, ``gateway``).

A command or a frame allocates a few hundred short-lived objects, nearly all freed by
reference counting; CPython's default first threshold (700) then runs a young-generation
collection every few commands, each one also walking what survived the last.  Measured with
bench/gateway.py: the gateway's CPU per command fell ≈ 15 % with :func:`tune_gc`
(docs/CAPACITY.md).  Cycles are still collected, only less often.
"""

from __future__ import annotations

import gc

#: allocations (net of frees) between two young-generation collections
GC_THRESHOLD = 20_000


def tune_gc(threshold: int = GC_THRESHOLD) -> None:
    """Move everything alive now (modules, configuration: what start-up loaded) out of the
    collector's sight for good, and collect the young generation every ``threshold`` allocations.

    >>> old = gc.get_threshold(); tune_gc(); gc.get_threshold()[0]
    20000
    >>> gc.unfreeze(); gc.set_threshold(*old)
    """
    gc.collect()
    gc.freeze()
    _g0, g1, g2 = gc.get_threshold()
    gc.set_threshold(threshold, g1, g2)
