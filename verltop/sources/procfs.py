"""Process trees from ``/proc``: the descendants of given pids (the actors' processes), read incrementally.

Stdlib only, and of verltop only ``proc_stat`` (stdlib only too): the probe (``sources/probe_actor.py``) ships
both, pickled by value, to nodes where verltop may not be installed, and runs :class:`ProcReader` there.

Cost. ``/proc/PID/task/TID/children`` lists only the children of one *thread*, and a Ray actor starts its
engine from its asyncio thread, so reading it per actor means one read per thread (~40 per Ray worker).
Instead one listing of ``/proc`` per read finds new and gone pids; only new pids (and the children of gone
ones, which were reparented) have their ``stat`` read for their parent; the parent -> children index is kept
between reads. Each descendant's ``stat`` is read every time (CPU, RSS, and a parent check), its cmdline only
when its ``comm`` changed (setproctitle sets both). Everything is read afresh every ``full_every_s`` and after
a gap (a paused reader could miss a pid's reuse).

Titles: ``/proc/PID/cmdline`` — setproctitle overwrites argv with one string (``VLLM::Worker_TP1``), Ray
with ``ray::Class.method``; a process that set none shows its argv joined by spaces, as ``ps`` does. Never
``comm`` (cut at 15 characters: ``VLLM::Worker_TP1`` and ``VLLM::Worker_TP12`` would look the same).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

from verltop.sources.proc_stat import Stat, parse_stat

# A row: (pid, ppid, title, cpu_percent, rss_bytes, create_time_s); plain tuples cross the probe's wire.
Row = tuple[int, int | None, str | None, float | None, int | None, float | None]

RAY_PREFIX = "ray::"


def is_engine_comm(comm: str) -> bool:
    """An inference engine's process by its (15-character) comm: ``VLLM::EngineCor``, ``VLLM::Worker_TP``,
    ``sglang::schedul``, any ``<prefix>::…`` (``VLLM_PROCESS_NAME_PREFIX``) except Ray's own ``ray::``."""
    i = comm.find("::")
    return i > 0 and not comm.startswith(RAY_PREFIX) and comm[:i].replace("_", "").replace("-", "").isalnum()


class ProcReader:
    """Keeps the ``/proc`` state between reads so that each read costs one listing plus the descendants.

    Not thread-safe: one reader per thread (the local sampler's), or a lock around it (the probe).
    """

    def __init__(self, root: str = "/proc", full_every_s: float = 60.0, gap_s: float = 10.0,
                 max_fds: int = 256) -> None:
        self.root = root
        self.full_every_s = full_every_s
        self.gap_s = gap_s
        self._hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._boot_s = self._btime()
        self._names: set[str] = set()
        self._ppid: dict[int, int] = {}
        self._kids: dict[int, set[int]] = {}
        self._comm: dict[int, str] = {}
        self._start: dict[int, int] = {}  # starttime in clock ticks: tells a reused pid apart
        self._engine: set[int] = set()  # pids whose comm is an engine's
        self._title: dict[int, tuple[int, str, str | None, float]] = {}  # pid -> (start, comm, title, created)
        self._cpu: dict[int, tuple[int, int, float]] = {}  # pid -> (starttime, utime+stime ticks, monotonic)
        self._under: dict[int, tuple[int, int]] = {}  # pid -> (starttime, root it was last seen under)
        self._full_at: float | None = None
        self._read_at: float | None = None
        self._last: int | None = None  # /proc/loadavg's last pid at the last listing
        # descendants' stat files stay open between reads (pread: no open/close, no path walk); an open
        # /proc/PID/stat belongs to that process: once it is gone, reading it fails (no pid-reuse mix-up)
        self._fds: dict[int, int] = {}
        self.max_fds = max_fds

    # ---------------------------------------------------------- /proc files

    def _btime(self) -> float:
        try:
            with open(f"{self.root}/stat", "rb") as f:
                for line in f:
                    if line.startswith(b"btime "):
                        return float(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return 0.0

    def _stat(self, pid: int, keep: bool = False) -> Stat | None:
        """``(ppid, comm, starttime, cpu ticks, rss pages)`` from ``/proc/PID/stat``, or None if gone.
        ``keep``: keep the file open for the next read (descendants, read every time)."""
        try:
            fd = self._fds.get(pid)
            if fd is not None:
                try:
                    b = os.pread(fd, 2048, 0)
                except OSError:
                    self._drop_fd(pid)
                    return None
            else:
                fd = os.open(f"{self.root}/{pid}/stat", os.O_RDONLY)
                try:
                    b = os.read(fd, 2048)
                finally:
                    if keep and len(self._fds) < self.max_fds:
                        self._fds[pid] = fd
                    else:
                        os.close(fd)
            if not b:
                self._drop_fd(pid)
                return None
        except OSError:
            return None
        return parse_stat(b)

    def _drop_fd(self, pid: int) -> None:
        fd = self._fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for pid in list(self._fds):
            self._drop_fd(pid)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing to do
            pass

    def _cmdline_title(self, pid: int) -> str | None:
        try:
            fd = os.open(f"{self.root}/{pid}/cmdline", os.O_RDONLY)
            try:
                b = os.read(fd, 4096)
            finally:
                os.close(fd)
        except OSError:
            return None
        # setproctitle leaves one field (then NUL padding); otherwise argv, as ps shows it
        words = [w for w in b.split(b"\0") if w]
        # one line: a `python -c` program's newlines and tabs become spaces
        return " ".join(b" ".join(words)[:256].decode(errors="replace").split()) or None

    # ---------------------------------------------------------- the index

    def _forget(self, pid: int) -> None:
        pp = self._ppid.pop(pid, None)
        if pp is not None:
            sib = self._kids.get(pp)
            if sib is not None:
                sib.discard(pid)
                if not sib:
                    del self._kids[pp]
        self._comm.pop(pid, None)
        self._start.pop(pid, None)
        self._engine.discard(pid)
        self._drop_fd(pid)

    def _index(self, pid: int, st: tuple[int, str, int, int, int]) -> None:
        ppid, comm, start = st[0], st[1], st[2]
        old = self._ppid.get(pid)
        if old == ppid and self._comm.get(pid) == comm and self._start.get(pid) == start:
            return  # as it was (every descendant, every read)
        if old != ppid:
            if old is not None:
                sib = self._kids.get(old)
                if sib is not None:
                    sib.discard(pid)
                    if not sib:
                        del self._kids[old]
            self._ppid[pid] = ppid
            self._kids.setdefault(ppid, set()).add(pid)
        self._comm[pid] = comm
        self._start[pid] = start
        if is_engine_comm(comm):
            self._engine.add(pid)
        else:
            self._engine.discard(pid)

    def _last_pid(self) -> int | None:
        """The pid the kernel gave out last (``/proc/loadavg``'s fifth field): unchanged, nothing (no
        process, no thread) was created since."""
        try:
            with open(f"{self.root}/loadavg", "rb") as f:
                return int(f.read().split()[4])
        except (OSError, ValueError, IndexError):
            return None

    def _listing(self, now: float) -> None:
        full = (self._full_at is None or now - self._full_at > self.full_every_s
                or self._read_at is None or now - self._read_at > self.gap_s)
        last = self._last_pid()
        if not full and last is not None and last == self._last:
            return  # no new process: the index stands (the gone are noticed when read)
        self._last = last
        names = {n for n in os.listdir(self.root) if n.isdigit()}
        if full:
            self._ppid.clear()
            self._kids.clear()
            self._comm.clear()
            self._start.clear()
            self._engine.clear()
            fresh = names
            self._full_at = now
        else:
            fresh = names - self._names
            for n in self._names - names:
                pid = int(n)
                orphans = self._kids.pop(pid, ())
                self._forget(pid)
                for kid in orphans:  # reparented (to init or a subreaper): read their new parent
                    st = self._stat(kid)
                    if st is None:
                        self._forget(kid)
                    else:
                        self._index(kid, st)
        for n in fresh:
            pid = int(n)
            st = self._stat(pid)
            if st is not None:
                self._index(pid, st)
        self._names = names

    # ---------------------------------------------------------- one read

    def _row(self, pid: int, st: tuple[int, str, int, int, int], now: float) -> Row:
        ppid, comm, start, ticks, rss = st
        t = self._title.get(pid)
        if t is None or t[0] != start or t[1] != comm:
            t = self._title[pid] = (start, comm, self._cmdline_title(pid) or f"[{comm}]",
                                    round(self._boot_s + start / self._hz, 2))
        prev = self._cpu.get(pid)
        cpu = None
        if prev is not None and prev[0] == start and now > prev[2]:
            cpu = round(max(0.0, (ticks - prev[1]) / self._hz / (now - prev[2]) * 100.0), 1)
        self._cpu[pid] = (start, ticks, now)
        return (pid, ppid, t[2], cpu, rss * self._page, t[3])

    def _has_live_ray_ancestor(self, pid: int) -> bool:
        seen = 0
        p = self._ppid.get(pid)
        while p is not None and p > 1 and seen < 64:
            if self._comm.get(p, "").startswith(RAY_PREFIX):
                return True
            p = self._ppid.get(p)
            seen += 1
        return False

    def read(self, roots: Iterable[int], extra: Iterable[int] = ()) -> dict[str, Any]:
        """The descendants of ``roots`` and the loose processes (see ``ProcTree``), as plain data:
        ``{"taken_at", "procs": [Row], "loose": [Row], "left_by": [(pid, root)]}``; rows of ``procs`` are in
        tree order (each root's subtree depth first, children by pid). ``extra``: pids to report as loose
        when they are under no root (the caller's GPU holders)."""
        now = time.monotonic()
        self._listing(now)
        roots = [r for r in dict.fromkeys(roots) if r in self._ppid]  # live roots only
        root_set = set(roots)
        procs: list[Row] = []
        seen: dict[int, int] = {}  # descendant -> its root
        kids_of = self._kids
        for r in roots:
            first = kids_of.get(r)
            if not first:  # most actors have no children
                continue
            stack = sorted(first, reverse=True)
            while stack:
                pid = stack.pop()
                if pid in seen or pid in root_set:
                    continue
                st = self._stat(pid, keep=True)
                if st is None:
                    self._forget(pid)
                    continue
                parent = self._ppid.get(pid)
                self._index(pid, st)
                if st[0] != parent:  # reparented since the last read: not below this root any more
                    continue
                seen[pid] = r
                procs.append(self._row(pid, st, now))
                stack.extend(sorted(self._kids.get(pid, ()), reverse=True))
        loose: list[Row] = []
        left_by: list[tuple[int, int]] = []
        done: set[int] = set()

        def add_loose(pid: int, by: int | None) -> None:
            st = self._stat(pid)
            if st is None:
                self._forget(pid)
                return
            self._index(pid, st)
            done.add(pid)
            loose.append(self._row(pid, st, now))
            if by is not None:
                left_by.append((pid, by))

        # once below a root that has died since (killed, or not yet reaped): left behind. Rare, so the
        # root's own stat is read only here.
        alive: dict[int, bool] = {}
        for pid, (start, root) in list(self._under.items()):
            if pid in seen or pid in done:
                continue
            if self._start.get(pid) != start:  # gone, or its pid reused
                del self._under[pid]
                continue
            if root in root_set:
                if root not in alive:
                    alive[root] = self._stat(root) is not None
                if alive[root]:  # moved off a live root (a daemon): not ours any more
                    del self._under[pid]
                    continue
            add_loose(pid, root)
        for pid, root in seen.items():
            self._under[pid] = (self._start.get(pid, -1), root)
        # an engine's title and no live Ray worker above: an engine whose server is gone
        for pid in sorted(self._engine):
            if pid not in seen and pid not in done and pid not in root_set and not self._has_live_ray_ancestor(pid):
                add_loose(pid, None)
        # the caller's GPU holders under no root and no live Ray worker (a Ray task's own GPU is its own)
        for pid in extra:
            if (pid not in seen and pid not in done and pid not in root_set and pid in self._ppid
                    and not self._comm.get(pid, "").startswith(RAY_PREFIX) and not self._has_live_ray_ancestor(pid)):
                add_loose(pid, None)
        # drop per-pid state of processes that are gone, and files of processes no longer below a root
        for cache in (self._title, self._cpu):
            for pid in [p for p in cache if p not in self._ppid]:
                del cache[pid]
        for pid in [p for p in self._fds if p not in seen]:
            self._drop_fd(pid)
        self._read_at = now
        return {"taken_at": time.time(), "procs": procs, "loose": loose, "left_by": left_by}
