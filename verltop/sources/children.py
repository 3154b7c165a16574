"""Descendant processes of actors on this machine, read from /proc at dump time (the process tree changes:
an engine restarts its workers, a reward function starts a sandbox per call). One pass over /proc.

Each child is ``(pid, ppid, title)``, the title being the first NUL-separated field of its cmdline (what
setproctitle set: ``VLLM::Worker_TP1``; never comm, which is cut at 15 characters).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from verltop.sources.local import process_title

MAX_PER_ACTOR = 64  # a fork bomb under one actor must not turn a dump into thousands of py-spy runs


def _ppids() -> dict[int, int]:
    out: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for n in names:
        if not n.isdigit():
            continue
        try:
            with open(f"/proc/{n}/stat", "rb") as f:
                rest = f.read().rsplit(b")", 1)[1].split()
            if rest[0] in (b"Z", b"X"):
                continue  # exited, not reaped: nothing to dump
            out[int(n)] = int(rest[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


def local_descendants(pids: Iterable[int], limit: int = MAX_PER_ACTOR
                      ) -> dict[int, list[tuple[int, int, str | None]]]:
    """``pid → [(child pid, its parent pid, title), ...]`` for each of ``pids``: all descendants, parents
    before their children, at most ``limit`` per pid."""
    ppid = _ppids()
    kids: dict[int, list[int]] = {}
    for p, pp in ppid.items():
        kids.setdefault(pp, []).append(p)
    me = os.getpid()
    out: dict[int, list[tuple[int, int, str | None]]] = {}
    for root in pids:
        found: list[tuple[int, int, str | None]] = []
        todo = sorted(kids.get(root, []))
        seen = {root}
        while todo and len(found) < limit:
            p = todo.pop(0)
            if p in seen or p == me:
                continue
            seen.add(p)
            title = process_title(p)
            if title is None:
                continue  # gone since the listing
            found.append((p, ppid[p], title))
            todo.extend(sorted(kids.get(p, [])))
        out[root] = found
    return out
