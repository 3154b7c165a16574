"""py-spy: where it is, the one command line, running it on a local pid, explaining its failures, and
parsing its output — ``dump --json`` (local and probe) and the text format (the dashboard's
``/worker/traceback`` returns py-spy's own text). Parsers are total: bad input gives an error string.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from verltop.convert import one_line, to_bool, to_int
from verltop.model import Frame, Problem, ProcessDump, ThreadStack
from verltop.sources import headstart
from verltop.sources.aio import within
from verltop.sources.headstart import dump_args
from verltop.sources.headstart import find_pyspy as find_pyspy  # where callers look for it
from verltop.sources.procgroup import kill_group

PTRACE_REMEDY = (
    "run verltop as root, give py-spy CAP_SYS_PTRACE (setcap cap_sys_ptrace+ep $(which py-spy)), or set "
    "kernel.yama.ptrace_scope=0 (sysctl -w kernel.yama.ptrace_scope=0)"
)
NO_PYSPY_REMEDY = "pip install py-spy (it ships with ray[default]) or put it on PATH"
BOTH_MODES = "py-spy cannot combine --native with --nonblocking; pick one"


def ptrace_problem(where: str = "") -> Problem:
    return Problem("ptrace", f"py-spy may not attach (ptrace){where}", PTRACE_REMEDY)


def no_pyspy_problem(where: str = "") -> Problem:
    return Problem("no_pyspy", f"py-spy not found{where}", NO_PYSPY_REMEDY)


EXITED = Problem("exited", "process exited before it could be dumped")


@dataclass(frozen=True, slots=True)
class DumpOptions:
    """How to take stacks: py-spy's modes, samples ~``interval_s`` apart, per-process timeout, route."""

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


def explain_error(text: str, rc: int | None, where: str = "") -> Problem:
    """py-spy's own failure text → a problem with its fix."""
    t = one_line(text, 2000)
    low = t.lower()
    if "permission denied" in low or "operation not permitted" in low or "eperm" in low:
        return ptrace_problem(where)
    if "no such file or directory" in low or "no such process" in low:
        return EXITED
    if "can't get native stack traces with the --nonblocking" in low:
        return Problem("pyspy", BOTH_MODES)
    if "py-spy not found" in low or "not installed" in low:
        return no_pyspy_problem(where)
    return Problem("pyspy", t[:240] or f"py-spy exited with code {rc}")


async def dump_local(pid: int, opts: DumpOptions, pyspy: str) -> ProcessDump:
    """One ``py-spy dump --json`` of a local pid, killed (with anything it started) at its timeout. A run of
    the same command line that ``headstart`` started before the engine was imported is taken instead."""
    argv = [pyspy, *dump_args(pid, opts.native, opts.nonblocking)]
    early = headstart.take(argv)
    if early is not None:
        try:
            rc, out, err, started, dt = await within(asyncio.wrap_future(early), opts.per_process_timeout + 1.0)
        except asyncio.TimeoutError:
            return ProcessDump(pid, error=timeout_problem(opts.per_process_timeout))
        if rc is None:
            return ProcessDump(pid, error=timeout_problem(opts.per_process_timeout), taken_at=started, duration_s=dt)
        return _outcome(pid, opts, rc, out, err, started, dt)
    t0 = time.monotonic()
    started = time.time()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
    except FileNotFoundError:
        return ProcessDump(pid, error=no_pyspy_problem(), taken_at=started)
    except OSError as e:
        return ProcessDump(pid, error=Problem("pyspy", f"could not start py-spy: {e.strerror or e}"), taken_at=started)
    try:
        out, err = await within(proc.communicate(), opts.per_process_timeout)
    except asyncio.TimeoutError:
        kill_group(proc.pid)
        await proc.wait()
        return ProcessDump(pid, error=timeout_problem(opts.per_process_timeout), taken_at=started,
                           duration_s=time.monotonic() - t0)
    except asyncio.CancelledError:
        if proc.returncode is None:
            kill_group(proc.pid)
            await proc.wait()
        raise
    return _outcome(pid, opts, proc.returncode, out, err, started, time.monotonic() - t0)


def _outcome(pid: int, opts: DumpOptions, rc: int | None, out: bytes | None, err: bytes | None, started: float,
             dt: float) -> ProcessDump:
    if rc != 0:
        text = (err or b"").decode(errors="replace") + (out or b"").decode(errors="replace")
        return ProcessDump(pid, error=explain_error(text, rc), taken_at=started, duration_s=dt)
    threads, perr = parse_json((out or b"").decode(errors="replace"))
    return ProcessDump(pid, threads=threads, error=Problem("pyspy", perr) if perr else None, native=opts.native,
                       taken_at=started, duration_s=dt)


@contextlib.contextmanager
def children_by_pidfd() -> Iterator[None]:
    """Within it (in a running event loop), subprocesses are waited for by a pidfd in the loop. Python
    3.10/3.11 otherwise give each one a thread of its own (ThreadedChildWatcher), and starting one blocks
    until it runs: a dump of many ranks would spawn as many threads. 3.12 does this by itself."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        yield
        return
    try:
        os.close(os.pidfd_open(os.getpid()))  # the kernel may lack pidfd (Linux < 5.3) or forbid it
    except OSError:
        yield
        return
    old = asyncio.get_child_watcher()
    w = asyncio.PidfdChildWatcher()
    w.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(w)
    try:
        yield
    finally:
        asyncio.set_child_watcher(old)  # what else runs in this process keeps its own watcher


def timeout_problem(timeout_s: float) -> Problem:
    return Problem("pyspy_timeout", f"py-spy did not finish within {timeout_s:g} s (killed)")


_THREAD = re.compile(r'^Thread (0x[0-9a-fA-F]+|\d+) \(([a-z+]+)\)(?:: "(.*)")?\s*$')
# `    func (file:line)`; the location is the last parenthesised part: C++ names hold " (" of their own
# (`gpu_reduce_kernel<..., __nv_dl_tag<void (at::native::sum_functor<...>::*)(...)>, ...> (libtorch_cuda.so)`)
_FRAME = re.compile(r"^\s{4}(\S.*) \((.*?)(?::(\d+))?\)\s*$")


def parse_json(text: str) -> tuple[tuple[ThreadStack, ...], str | None]:
    """``py-spy dump --json`` → threads (frames innermost first)."""
    try:
        doc = json.loads(text)
    except (ValueError, TypeError):
        return (), "py-spy printed something that is not JSON"
    if not isinstance(doc, list):
        return (), "py-spy JSON is not a list of threads"
    out = []
    for t in doc:
        if not isinstance(t, dict):
            continue
        frames = []
        for f in t.get("frames") or []:
            if not isinstance(f, dict):
                continue
            name = f.get("name")
            fn = f.get("filename") or f.get("short_filename") or "?"
            line = f.get("line")
            frames.append(
                Frame(
                    func=str(name) if name is not None else "?",
                    file=str(fn),
                    line=line if isinstance(line, int) and not isinstance(line, bool) and line > 0 else None,
                    module=str(f["module"]) if isinstance(f.get("module"), str) else None,
                )
            )
        tid = t.get("thread_id")
        out.append(
            ThreadStack(
                thread_id=to_int(tid),
                name=str(t["thread_name"]) if isinstance(t.get("thread_name"), str) else None,
                active=to_bool(t.get("active")),
                owns_gil=to_bool(t.get("owns_gil")),
                frames=tuple(frames),
            )
        )
    return tuple(out), None


def parse_text(text: str) -> tuple[tuple[ThreadStack, ...], str | None]:
    """py-spy's text dump (as the dashboard returns it) → threads."""
    if not isinstance(text, str):
        return (), "py-spy output is not text"
    threads: list[ThreadStack] = []
    cur: dict[str, Any] | None = None
    frames: list[Frame] = []

    def flush() -> None:
        if cur is not None:
            threads.append(ThreadStack(cur["tid"], cur["name"], cur["active"], None, tuple(frames)))

    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            flush()
            state = m.group(2)
            cur = {"tid": to_int(m.group(1)), "name": m.group(3), "active": state.startswith("active")}
            frames = []
            continue
        if cur is None:
            continue
        fm = _FRAME.match(line)
        if fm:
            ln = fm.group(3)
            frames.append(Frame(func=fm.group(1), file=fm.group(2), line=int(ln) if ln else None))
    flush()
    if not threads:
        first = " ".join(text.strip().split())[:200]
        return (), f"no threads in py-spy output: {first or 'empty'}"
    return tuple(threads), None
