"""This machine's own addresses, read from /proc (no psutil): light enough for ``headstart``."""

from __future__ import annotations

import socket


def proc_net_addresses(root: str = "/proc/net") -> set[str] | None:
    """This network namespace's own IPv4 (``/32 host LOCAL`` in ``fib_trie``) and IPv6 (``if_inet6``)
    addresses, read from /proc: what psutil would list, without importing it. None without /proc/net."""
    out: set[str] = set()
    try:
        with open(f"{root}/fib_trie") as f:
            last = None
            for line in f:
                s = line.strip()
                if s.startswith("|-- "):
                    last = s[4:]
                elif last is not None and s == "/32 host LOCAL":
                    out.add(last)
    except OSError:
        return None
    try:
        with open(f"{root}/if_inet6") as f:
            for line in f:
                h = line.split(" ", 1)[0]
                if len(h) == 32:
                    out.add(socket.inet_ntop(socket.AF_INET6, bytes.fromhex(h)))
    except (OSError, ValueError):
        pass  # IPv6 off: IPv4 is enough
    return out
