"""Capture py-spy stacks of many ranks at once: local processes directly, other nodes through the
dashboard's ``/worker/traceback`` or, where profiling is off there, a probe actor on each node.

Every failure is a value on the rank (``ProcessDump.error``), phrased with its fix. Nothing here runs on
a timer: only when the user asks for a dump.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from verltop.model import ActorRow, ProcessDump
from verltop.sources import pyspy_parse
from verltop.sources.dashboard import fetch_traceback
from verltop.sources.http import DashboardClient

PTRACE_FIX = (
    "py-spy may not attach (ptrace): run verltop as root, give py-spy CAP_SYS_PTRACE "
    "(setcap cap_sys_ptrace+ep $(which py-spy)), or set kernel.yama.ptrace_scope=0 "
    "(sysctl -w kernel.yama.ptrace_scope=0)"
)
NO_PYSPY = "py-spy not found: pip install py-spy (it ships with ray[default]) or put it on PATH"
BOTH_MODES = "py-spy cannot combine --native with --nonblocking; pick one"


@dataclass(frozen=True, slots=True)
class DumpOptions:
    native: bool = False
    nonblocking: bool = False
    samples: int = 1
    interval_s: float = 1.0
    timeout_s: float | None = None  # per process; default 5 s, 30 s with --native
    concurrency: int | None = None
    via: str = "auto"  # auto | local | dashboard | probe

    @property
    def per_process_timeout(self) -> float:
        return self.timeout_s if self.timeout_s else (30.0 if self.native else 5.0)

    def check(self) -> str | None:
        if self.native and self.nonblocking:
            return BOTH_MODES
        if self.via not in ("auto", "local", "dashboard", "probe"):
            return f"unknown --via {self.via!r} (auto, local, dashboard or probe)"
        return None


def find_pyspy() -> str | None:
    p = shutil.which("py-spy")
    if p:
        return p
    cand = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return cand if os.access(cand, os.X_OK) else None


def explain_pyspy_error(text: str, rc: int | None) -> str:
    t = " ".join(text.split())
    low = t.lower()
    if "permission denied" in low or "operation not permitted" in low or "eperm" in low:
        return PTRACE_FIX
    if "no such file or directory" in low or "no such process" in low:
        return "process exited before it could be dumped"
    if "can't get native stack traces with the --nonblocking" in low:
        return BOTH_MODES
    return (t[:240] or f"py-spy exited with code {rc}")


def local_title_ok(pid: int, class_name: str) -> bool:
    """Is ``pid`` on this machine that Ray worker? (pid reuse, or another host's pid that exists here)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            title = f.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return False
    return title.startswith("ray::" + class_name.rsplit(".", 1)[-1])


def _exited(pid: int) -> bool:
    """Gone, or a zombie (killed, not yet reaped by its raylet): nothing left to dump."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


async def pyspy_local(pid: int, opts: DumpOptions, pyspy: str) -> ProcessDump:
    """One ``py-spy dump --json`` of a local pid, killed at its timeout."""
    args = [pyspy, "dump", "--json", "--pid", str(pid)]
    if opts.native:
        args.append("--native")
    if opts.nonblocking:
        args.append("--nonblocking")
    t0 = time.monotonic()
    started = time.time()
    try:
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,  # so a timeout kills py-spy and anything it started
        )
    except FileNotFoundError:
        return ProcessDump(pid, error=NO_PYSPY, taken_at=started)
    except OSError as e:
        return ProcessDump(pid, error=f"could not start py-spy: {e.strerror or e}", taken_at=started)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), opts.per_process_timeout)
    except asyncio.TimeoutError:
        _kill_group(proc.pid)
        await proc.wait()
        return ProcessDump(pid, error=f"py-spy did not finish within {opts.per_process_timeout:g} s (killed)",
                           taken_at=started, duration_s=time.monotonic() - t0)
    except asyncio.CancelledError:
        if proc.returncode is None:
            _kill_group(proc.pid)
            await proc.wait()
        raise
    dt = time.monotonic() - t0
    if proc.returncode != 0:
        text = (err or b"").decode(errors="replace") + (out or b"").decode(errors="replace")
        return ProcessDump(pid, error=explain_pyspy_error(text, proc.returncode), taken_at=started, duration_s=dt)
    threads, perr = pyspy_parse.parse_json(out.decode(errors="replace"))
    return ProcessDump(pid, threads=threads, error=perr, native=opts.native, taken_at=started, duration_s=dt)


@dataclass(slots=True)
class CaptureState:
    total: int
    done: int = 0
    notes: list[str] = field(default_factory=list)


ProgressFn = Callable[[ActorRow, ProcessDump, int, int], None]


class StackCapture:
    """Dumps a set of ranks ``samples`` times, about ``interval_s`` apart, all ranks in parallel."""

    def __init__(self, client: DashboardClient | None, local_node_ids: frozenset[str], opts: DumpOptions) -> None:
        self.client = client
        self.local_node_ids = local_node_ids
        self.opts = opts
        self.pyspy = find_pyspy()
        n = opts.concurrency or max(8, 4 * (os.cpu_count() or 2))
        self._sem = asyncio.Semaphore(n)
        self._remote_sem = asyncio.Semaphore(16)
        self.dashboard_profiling: bool | None = None  # learnt from the first remote call
        self.probe = None
        self.notes: list[str] = []

    def is_local(self, a: ActorRow) -> bool:
        if self.opts.via == "local":
            return True
        if self.opts.via in ("dashboard", "probe"):
            return False
        return a.node_id in self.local_node_ids and a.pid is not None and local_title_ok(a.pid, a.class_name)

    async def one(self, a: ActorRow) -> ProcessDump:
        pid = a.pid
        if pid is None:
            return ProcessDump(-1, error="actor has no pid (not started yet?)")
        if self.opts.via == "auto" and a.node_id in self.local_node_ids and not local_title_ok(pid, a.class_name):
            # on this machine, but no longer that Ray worker: never ask a dashboard to dump whatever has
            # the pid now
            if _exited(pid):
                return ProcessDump(pid, error="process exited before it could be dumped")
            return ProcessDump(pid, error=f"pid {pid} is no longer this actor's process (it exited and the pid "
                               "was reused)")
        if self.is_local(a):
            if self.pyspy is None:
                return ProcessDump(pid, error=NO_PYSPY)
            if _exited(pid):
                return ProcessDump(pid, error="process exited before it could be dumped")
            async with self._sem:
                return await pyspy_local(pid, self.opts, self.pyspy)
        return await self._remote(a)

    async def _remote(self, a: ActorRow) -> ProcessDump:
        assert a.pid is not None
        use_dashboard = (self.opts.via in ("auto", "dashboard") and not self.opts.nonblocking
                         and self.client is not None and self.dashboard_profiling is not False)
        if use_dashboard and a.node_id:
            async with self._remote_sem:
                r = await fetch_traceback(self.client, a.pid, a.node_id, self.opts.native,  # type: ignore[arg-type]
                                          timeout_s=self.opts.per_process_timeout + 5)
            if r.ok:
                self.dashboard_profiling = True
                threads, perr = pyspy_parse.parse_text(r.value or "")
                if perr and "ermission" in (r.value or ""):
                    perr = PTRACE_FIX + " (on node " + (a.node_ip or "?") + ")"
                return ProcessDump(a.pid, threads=threads, error=perr, native=self.opts.native, taken_at=r.taken_at,
                                   duration_s=r.elapsed_s)
            err = r.error or ""
            profiling_off = err.startswith("403") and "profiling" in err
            if profiling_off:
                self.dashboard_profiling = False
            if self.opts.via == "dashboard" or not profiling_off:
                return ProcessDump(a.pid, error=_explain_remote(err), taken_at=r.taken_at)
            self._note("dashboard profiling is off (RAY_DASHBOARD_ENABLE_PROFILING); using a probe actor per node")
        elif self.opts.via == "dashboard":
            return ProcessDump(a.pid, error="dashboard profiling is off on this cluster (403): start Ray with "
                               "RAY_DASHBOARD_ENABLE_PROFILING=1, or use --via probe", taken_at=time.time())
        return await self._probe_dump(a)

    async def _probe_dump(self, a: ActorRow) -> ProcessDump:
        if not a.node_id:
            return ProcessDump(a.pid or -1, error="actor's node is unknown")
        if self.probe is None:
            from verltop.sources.probe import ProbePool  # imports ray: only here, only when asked

            self.probe = ProbePool(self.opts)
        return await self.probe.dump(a.node_id, a.pid or -1)

    def _note(self, s: str) -> None:
        if s not in self.notes:
            self.notes.append(s)

    async def capture(self, targets: list[ActorRow], on_progress: ProgressFn | None = None
                      ) -> dict[str, list[ProcessDump]]:
        """``samples`` rounds; returns each actor's samples in order. Cancel-safe (Esc in the UI)."""
        out: dict[str, list[ProcessDump]] = {a.actor_id: [] for a in targets}
        live = [a for a in targets if a.state == "ALIVE"]
        total = len(live) * max(1, self.opts.samples)
        done = 0
        try:
            for i in range(max(1, self.opts.samples)):
                t0 = time.monotonic()

                async def run(a: ActorRow) -> tuple[ActorRow, ProcessDump]:
                    return a, await self.one(a)

                for fut in asyncio.as_completed([run(a) for a in live]):
                    a, d = await fut
                    out[a.actor_id].append(d)
                    done += 1
                    if on_progress:
                        on_progress(a, d, done, total)
                if i + 1 < self.opts.samples:
                    await asyncio.sleep(max(0.0, self.opts.interval_s - (time.monotonic() - t0)))
        finally:
            if self.probe is not None:
                await self.probe.close()
        return out


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _explain_remote(err: str) -> str:
    if "ermission" in err or "Operation not permitted" in err:
        return PTRACE_FIX + " (on that node)"
    if "not installed" in err:
        return NO_PYSPY + " (on that node)"
    return err
