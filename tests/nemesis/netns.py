"""A private network namespace for the nemesis (issue 35 §1): made here, removed when done.

:class:`NetNS` adds a namespace (``ip netns add``), brings its loopback up with the aliases
``127.0.0.11`` … (one address per Redis node), and deletes it again; everything of a nemesis
run is started inside it (``ip netns exec``), so its nftables rules touch nothing else on the
machine.  :func:`cut` and :func:`heal` install and drop the nemesis's nftables table (called
from inside the namespace).  :func:`unavailable` says why the machine cannot do it (not root,
no ``ip`` or ``nft``): the tests skip with that reason, except in CI where it is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence

TABLE = "sk_nemesis"


def unavailable() -> str | None:
    """Why network faults cannot run here (None: they can)."""
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"network faults need {tool} (apt-get install {package})"
    if os.geteuid() != 0:
        return "network faults need root (CAP_NET_ADMIN) for a private network namespace and nftables"
    return None


def aliases(n: int) -> list[str]:
    """``n`` loopback addresses from 127.0.0.11 on."""
    return [f"127.0.0.{11 + i}" for i in range(n)]


class NetNS:
    """``with NetNS(name, 9) as ns:`` a namespace with lo up and 9 aliases; ``ns.exec`` is the
    argv prefix that runs a command inside it."""

    def __init__(self, name: str, n_aliases: int):
        self.name = name
        self.addresses = aliases(n_aliases)

    @property
    def exec(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def __enter__(self) -> NetNS:
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        try:
            subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True, capture_output=True)
            for a in self.addresses:
                subprocess.run(["ip", "-n", self.name, "addr", "add", f"{a}/8", "dev", "lo"], check=True,
                               capture_output=True)
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _nft(script: str) -> None:
    out = subprocess.run(["nft", "-f", "-"], input=script, text=True, capture_output=True)
    if out.returncode != 0:
        raise RuntimeError(f"nft failed: {out.stderr.strip()}\n{script}")


def _set(addresses: Iterable[str]) -> str:
    return "{ " + ", ".join(sorted(set(addresses))) + " }"


def cut(isolated: Sequence[str] = (), others: Sequence[str] = (), gid: int | None = None,
        gid_to: Sequence[str] = ()) -> None:
    """Drop every packet between ``isolated`` and ``others`` (both ways), and every packet that
    a socket of group ``gid`` sends to ``gid_to``; inside the current namespace only."""
    rules = []
    if isolated and others:
        rules += [f"ip saddr {_set(isolated)} ip daddr {_set(others)} drop",
                  f"ip saddr {_set(others)} ip daddr {_set(isolated)} drop"]
    if gid is not None and gid_to:
        rules.append(f"meta skgid {gid} ip daddr {_set(gid_to)} drop")
    heal()
    _nft(f"table inet {TABLE} {{\n chain out {{\n  type filter hook output priority 0; policy accept;\n"
         + "".join(f"  {r}\n" for r in rules) + " }\n}\n")


def heal() -> None:
    """Drop the nemesis's table (nothing when there is none)."""
    subprocess.run(["nft", "delete", "table", "inet", TABLE], capture_output=True)
