"""Descendant processes of actors on this machine, read from /proc at dump time (the process tree changes:
an engine restarts its workers, a reward function starts a sandbox per call). One pass over /proc.

Each child is ``(pid, ppid, title)``, the title being the first NUL-separated field of its cmdline (what
setproctitle set: ``VLLM::Worker_TP1``; never comm, which is cut at 15 characters).

Stdlib only, and of verltop only ``proc_stat``: the probe runs ``local_descendants`` on other nodes, where
verltop may not be installed (``probe_actor`` ships both by value).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from verltop.sources.proc_stat import read_stat

MAX_PER_ACTOR = 64  # a fork bomb under one actor must not turn a dump into thousands of py-spy runs


def title_of(cmdline: bytes) -> str:
    """The title setproctitle set (``VLLM::Worker_TP1``: the first NUL-separated field, NULs after it), or,
    for a process that set none, its command line (``python -c from multiprocessing.resource_tracker ...``:
    the interpreter's path alone would say nothing)."""
    args = [a.decode(errors="replace") for a in cmdline.rstrip(b"\0").split(b"\0")]
    if len(args) <= 1 or "::" in args[0]:
        return args[0] if args else ""
    return " ".join(args)[:200]


def child_title(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return title_of(f.read(4096))
    except OSError:
        return None


def _ppids() -> dict[int, int]:
    out: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for n in names:
        if not n.isdigit():
            continue
        st = read_stat(int(n))
        if st is not None:  # not gone, nor exited and not yet reaped: something to dump
            out[int(n)] = st[0]
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
            title = child_title(p)
            if title is None:
                continue  # gone since the listing
            found.append((p, ppid[p], title))
            todo.extend(sorted(kids.get(p, [])))
        out[root] = found
    return out
