"""py-spy on this machine's Ray workers, started before the engine is imported (``verltop dump``).

A one-shot dump spends a third of its time importing the engine, and py-spy needs none of it. As soon as
the prefetched actor and node lists are in (``engine/prefetch.py``), a bare thread starts py-spy on every live
actor of this machine (its pid still a Ray worker), their child processes and the job's driver, with the
very command line the engine would run; the engine's ``pyspy.dump_local`` takes the outcome of one that
matches instead of starting its own. One the engine does not dump in the end (not a verl rank) cost a py-spy
run and is dropped; ``discard()`` kills whatever still runs when the command ends.

Stdlib only, and of verltop only the light ``children``, ``proc_stat``, ``netaddr`` and ``wire``: it runs while the rest is
still being imported.
"""

from __future__ import annotations

import _thread
import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any

from verltop.sources import wire
from verltop.sources.children import MAX_PER_ACTOR, child_title, local_descendants
from verltop.sources.netaddr import proc_net_addresses

# py-spy's outcome: (return code or None when killed at the timeout, stdout, stderr, wall start, seconds)
Outcome = tuple[int | None, bytes, bytes, float, float]

PLUMBING = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")  # never worth a py-spy
SPAWN_SWITCH_S = 0.0002  # the GIL's switch interval while py-spy runs are started (see _dump_all)

_early: dict[tuple[str, ...], Future] = {}
_claimed: set[tuple[str, ...]] = set()  # asked for before an early run started: never run twice at once
_lock = threading.Lock()  # two py-spy on one pid at once: the second may not attach (ptrace)
_running: list[subprocess.Popen] = []
_closed = [False]
_active = [False]  # start() was called in this process
_scan: list[Any] = [None]  # (when, pids scanned, what local_descendants found)


def dump_args(pid: int, native: bool = False, nonblocking: bool = False) -> list[str]:
    """py-spy's arguments for one JSON dump (after the executable; the probe prepends its own)."""
    args = ["dump", "--json", "--pid", str(pid)]
    if native:
        args.append("--native")
    if nonblocking:
        args.append("--nonblocking")
    return args


def find_pyspy() -> str | None:
    p = shutil.which("py-spy")
    if p:
        return p
    cand = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return cand if os.access(cand, os.X_OK) else None


def take(argv: list[str]) -> Future | None:
    """The early run of exactly ``argv``, if one was started (each is handed out once); else none will be."""
    if not _active[0]:  # no head start in this process (the TUI, watch): nothing to claim or take
        return None
    key = tuple(argv)
    with _lock:
        _claimed.add(key)
        return _early.pop(key, None)


def descendants(pids: list[int], max_age_s: float = 2.0) -> dict[int, list[tuple[int, int, str | None]]] | None:
    """The descendants of ``pids`` as the early scan of /proc found them, when it covered them all lately."""
    got = _scan[0]
    if got is None or time.monotonic() - got[0] > max_age_s or not set(pids) <= got[1]:
        return None
    return {p: got[2][p] for p in pids if p in got[2]}


def discard() -> None:
    """Kill the early runs still going and forget the rest (the command is ending)."""
    with _lock:
        _early.clear()
        _closed[0] = True  # nothing starts any more
    for p in _running:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass


def _rows(fut: Future | None, wait_s: float) -> list[dict[str, Any]]:
    if fut is None:
        return []
    try:
        return wire.rows(fut.result(wait_s))
    except Exception:  # noqa: BLE001 - no answer in time: the engine will read (and report) it itself
        return []


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read(4096).split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""


def start(actors: Future | None, nodes: Future | None, jobs: Future | None, timeout_s: float,
          native: bool = False, nonblocking: bool = False) -> None:
    """From a bare thread: once ``actors`` and ``nodes`` (prefetched reads' futures, peeked) are in, py-spy
    on every live actor here, its descendants, then the running drivers here (``jobs``)."""
    if sys.platform != "linux":
        return
    pyspy = find_pyspy()
    if pyspy is None:
        return
    _active[0] = True
    _thread.start_new_thread(_run, (pyspy, actors, nodes, jobs, timeout_s, native, nonblocking))


def _run(pyspy: str, actors: Future | None, nodes: Future | None, jobs: Future | None, timeout_s: float,
         native: bool, nonblocking: bool) -> None:
    try:
        _dump_all(pyspy, actors, nodes, jobs, timeout_s, native, nonblocking)
    except Exception:  # noqa: BLE001 - a head start only: the engine dumps whatever it did not
        pass


def _dump_all(pyspy: str, actors: Future | None, nodes: Future | None, jobs: Future | None, timeout_s: float,
              native: bool, nonblocking: bool) -> None:
    here = (proc_net_addresses() or set()) | {"127.0.0.1"}
    local = {n.get("node_id") for n in _rows(nodes, timeout_s) if n.get("node_ip") in here and
             n.get("state") == "ALIVE"}
    if not local:
        return
    rows = _rows(actors, timeout_s)
    # another user's job on the cluster is left alone: with verl's worker groups in sight, only their jobs
    verl_jobs = {a.get("job_id") for a in rows if "WorkerDict" in str(a.get("class_name", ""))}
    pids = []
    for a in rows:
        pid = a.get("pid")
        if a.get("state") == "ALIVE" and a.get("node_id") in local and isinstance(pid, int) and pid > 0 and \
                (not verl_jobs or a.get("job_id") in verl_jobs) and \
                not str(a.get("class_name", "")).endswith("VerltopProbe") and _title(pid).startswith("ray::"):
            pids.append(pid)
    procs: list[tuple[Future, subprocess.Popen, float, float]] = []

    def spawn(pid: int) -> None:
        argv = [pyspy, *dump_args(pid, native, nonblocking)]
        key = tuple(argv)
        with _lock:  # started and registered at once: the engine either takes this run or runs its own
            if key in _early or key in _claimed or _closed[0]:
                return
            try:
                p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError:
                return
            fut: Future = Future()
            _running.append(p)
            _early[key] = fut
        procs.append((fut, p, time.time(), time.monotonic()))

    # The main thread imports the engine meanwhile and keeps the GIL for up to the switch interval (5 ms)
    # each time this thread asks for it: a few times per py-spy started, so 17 of them took 100 ms. While
    # they start, the interval is short.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SPAWN_SWITCH_S)
    try:
        for pid in pids:
            spawn(pid)
        kids = local_descendants(pids, MAX_PER_ACTOR) if pids else {}
        _scan[0] = (time.monotonic(), set(pids), kids)
        for found in kids.values():
            for cpid, _, title in found:
                if not (title and any(p in title for p in PLUMBING)) and child_title(cpid) == title:
                    spawn(cpid)
        for j in _rows(jobs, 0.05 if procs else timeout_s):  # no waiting on the jobs when stacks are to be read
            drv = j.get("driver_info") or {}
            pid = drv.get("pid")
            try:
                pid = int(pid)
            except (TypeError, ValueError):
                continue
            if j.get("status") == "RUNNING" and drv.get("node_ip_address") in here and _title(pid):
                spawn(pid)
    finally:
        sys.setswitchinterval(interval)
    _collect(procs, timeout_s)


def _collect(procs: list[tuple[Future, subprocess.Popen, float, float]], timeout_s: float) -> None:
    """Read every run's output as it comes (one thread, one selector), each settled as soon as it ends."""
    sel = selectors.DefaultSelector()
    bufs: dict[int, list[bytes]] = {}
    open_fds: dict[int, int] = {}  # proc index → pipes still open
    for i, (_, p, _, _) in enumerate(procs):
        for pipe in (p.stdout, p.stderr):
            assert pipe is not None
            sel.register(pipe.fileno(), selectors.EVENT_READ, i)
            bufs[pipe.fileno()] = []
        open_fds[i] = 2

    def settle(i: int, killed: bool) -> None:
        fut, p, started, t0 = procs[i]
        if killed:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        rc = p.wait()
        assert p.stdout is not None and p.stderr is not None
        out, err = b"".join(bufs[p.stdout.fileno()]), b"".join(bufs[p.stderr.fileno()])
        p.stdout.close()
        p.stderr.close()
        fut.set_result((None if killed else rc, out, err, started, time.monotonic() - t0))

    while open_fds:
        now = time.monotonic()
        late = [i for i in open_fds if now - procs[i][3] > timeout_s]
        for i in late:
            _, p, _, _ = procs[i]
            for pipe in (p.stdout, p.stderr):
                assert pipe is not None
                try:
                    sel.unregister(pipe.fileno())
                except (KeyError, ValueError):
                    pass
            del open_fds[i]
            settle(i, True)
        if not open_fds:
            break
        wait = min(procs[i][3] + timeout_s for i in open_fds) - time.monotonic()
        for key, _ in sel.select(max(0.0, wait)):
            fd, i = key.fd, key.data
            data = os.read(fd, 1 << 16)
            if data:
                bufs[fd].append(data)
                continue
            sel.unregister(fd)
            open_fds[i] -= 1
            if open_fds[i] == 0:
                del open_fds[i]
                settle(i, False)
    sel.close()
