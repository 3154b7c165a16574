"""Why a rank died, from Ray's death cause and the last lines of the dead worker's own stderr. Pure.

Ray's cause alone often misleads: a worker that NCCL's watchdog aborted (SIGABRT) reads "Worker unexpectedly
exits with a connection error code 2 ... (1) the process was killed by the OOM killer ..." — a list of
possibilities, not a finding. The worker's log says what happened, so it is read first:

- ``nccl_timeout``: "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE ...)",
  usually followed ~60 s later by the abort ("Fatal Python error: Aborted", SIGABRT);
- ``cuda_oom``: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...";
- ``host_oom``: Ray's memory monitor ("... killed due to the node running low on memory", OUT_OF_MEMORY);
- ``exception``: a Python traceback's last line (a creation task's formatted exception, or the log's);
- ``signal``: "Fatal Python error: Segmentation fault", Ray's "*** SIGSEGV received at time=...", or the
  raylet's "exited from signal 9";
- ``exit``: an exit code, ``ray.kill``, an owner that died, an intended exit;
- ``unknown``: Ray says the process died and nothing says how (SIGKILL and the kernel OOM killer leave no line).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the stack model (18 dataclasses, ~15 ms to create) loads only once a death is told
    from verltop.model import CollectiveInfo, Death

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=([A-Z_]+)"
                       r"(?:, NumelIn=(\d+))?(?:, NumelOut=\d+)?(?:, Timeout\(ms\)=(\d+))?")
_ABORT = re.compile(r"Fatal Python error: Aborted|\*\*\* SIGABRT received|taking the entire process down")
_CUDA_OOM = re.compile(r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError|CUDA error: out of memory|"
                       r"CUBLAS_STATUS_ALLOC_FAILED|NCCL WARN Cuda failure 'out of memory'")
_HOST_OOM = re.compile(r"running low on memory|\[(NODE_)?OUT_OF_MEMORY\]|Worker exit type: NODE_OUT_OF_MEMORY")
_FATAL = re.compile(r"Fatal Python error: (Segmentation fault|Aborted|Bus error|Floating point exception|"
                    r"Illegal instruction)")
_RAY_SIGNAL = re.compile(r"\*\*\* (SIG[A-Z]+) received at time=")
_EXITED_SIGNAL = re.compile(r"exited from signal (\d+)|exited, (?:due to|with) signal (\d+)")
_EXIT_CODE = re.compile(r"exits? with an exit code (-?\d+)|[Ee]xit code:? (-?\d+)")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Fault|Warning)\w*"
                       r"(?:\([\w.]+\))?(?::\s?.*)?$")
_FATAL_SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
                  "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
            11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}
_OP_NAMES = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather", "_ALLGATHER_BASE": "all_gather_into_tensor",
             "REDUCE_SCATTER": "reduce_scatter", "_REDUCE_SCATTER_BASE": "reduce_scatter_tensor",
             "BROADCAST": "broadcast", "BARRIER": "barrier", "ALLTOALL": "all_to_all",
             "ALLTOALL_BASE": "all_to_all_single", "SEND": "send", "RECV": "recv", "REDUCE": "reduce",
             "GATHER": "gather", "SCATTER": "scatter"}
_DETAIL_MAX = 300


def _death(kind: str, detail: str | None) -> Death:
    from verltop.model import Death

    return Death(kind, detail)


def classify(death_text: str | None, log_tail: str | None = None, collective: CollectiveInfo | None = None
             ) -> Death:
    """The death of a DEAD rank: ``death_text`` is Ray's whole cause, ``log_tail`` the end of the worker's
    stderr (None when it could not be read), ``collective`` what the watchdog lines of that log named."""
    cause = death_text or ""
    log = _ANSI.sub("", log_tail or "")
    return (_nccl_timeout(log, collective) or _cuda_oom(log, cause) or _host_oom(cause) or _runtime_env(cause)
            or _exception(cause, log) or _signal(log) or _exit(cause) or _unknown(cause))


def _nccl_timeout(log: str, c: CollectiveInfo | None) -> Death | None:
    m = _WATCHDOG.search(log)
    if m is None:
        return None
    op = c.op if c is not None and c.op else _OP_NAMES.get(m.group(2), m.group(2).lower())
    seq = c.seq if c is not None and c.seq is not None else int(m.group(1))
    timeout_ms = c.timeout_ms if c is not None and c.timeout_ms is not None else (
        int(m.group(4)) if m.group(4) else None)
    after = f" after {timeout_ms / 1000:g} s" if timeout_ms else ""
    detail = f"{op} #{seq} timed out{after} (NCCL watchdog)"
    if _ABORT.search(log, m.end()):
        detail += ", then the process aborted (SIGABRT)"
    return _death("nccl_timeout", detail)


def _cuda_oom(log: str, cause: str) -> Death | None:
    for text in (log, cause):
        line = _last_line(text, _CUDA_OOM)
        if line is not None:
            return _death("cuda_oom", _cut(_strip_exc_prefix(line)))
    return None


def _host_oom(cause: str) -> Death | None:
    if not _HOST_OOM.search(cause):
        return None
    line = _last_line(cause, _HOST_OOM) or cause
    m = re.search(r"(Memory on the node .*? was [\d.]+\s*GB / [\d.]+\s*GB \([\d.]+\))", line)
    detail = "killed by Ray's memory monitor (the node ran low on memory)"
    if m:
        detail += f": {' '.join(m.group(1).split())}"
    return _death("host_oom", _cut(detail))


def _runtime_env(cause: str) -> Death | None:
    if "runtime env failed" not in cause:
        return None
    last = [ln.strip() for ln in _ANSI.sub("", cause).splitlines() if ln.strip()]
    return _death("unknown", _cut(f"its runtime env could not be created: {last[-1] if last else ''}"))


def _exception(cause: str, log: str) -> Death | None:
    # a creation task's formatted traceback in Ray's cause wins over the log: it is the exception that killed it
    for text in (cause, log):
        line = last_exception(text)
        if line is not None:
            return _death("exception", _cut(line))
    return None


def last_exception(text: str) -> str | None:
    """The exception line of the last Python traceback in ``text``: ``ValueError: boom``. Ray's own wrappers
    (``ray.exceptions.ActorDiedError: ... creation task``) give way to the user's exception they carry."""
    at = text.find("Traceback (most recent call last):")
    if at < 0:
        return None
    hits = [ln.strip() for ln in _ANSI.sub("", text[at:]).splitlines()
            if ln and ln[0] not in " \t" and _EXC_LINE.match(ln.strip())]
    if not hits:
        return None
    own = [h for h in hits if not h.startswith(("ray.exceptions.", "RayTaskError", "ActorDiedError"))]
    return _strip_exc_prefix((own or hits)[-1])


def _signal(log: str) -> Death | None:
    m = _last(_FATAL, log)
    if m is not None:
        return _death("signal", f"{_FATAL_SIGNALS[m.group(1)]} (Fatal Python error: {m.group(1)})")
    m = _last(_RAY_SIGNAL, log)
    if m is not None:
        return _death("signal", m.group(1))
    m = _last(_EXITED_SIGNAL, log)
    if m is not None:
        n = int(m.group(1) or m.group(2))
        return _death("signal", _SIGNALS.get(n, f"signal {n}"))
    return None


def _last(rx: re.Pattern[str], text: str) -> re.Match[str] | None:
    return next(reversed(list(rx.finditer(text))), None)


def _exit(cause: str) -> Death | None:
    if "killed by `ray.kill`" in cause or "[RAY_KILL]" in cause:
        return _death("exit", "killed by ray.kill")
    if "owner has died" in cause or "[OWNER_DIED]" in cause:
        return _death("exit", "its owner died (the driver or the actor that created it)")
    m = _EXIT_CODE.search(cause)
    if m:
        code = m.group(1) or m.group(2)
        return _death("exit", f"exit code {code}")
    if "INTENDED_USER_EXIT" in cause or "exit_actor" in cause:
        return _death("exit", "it exited on purpose (exit_actor or sys.exit)")
    return None


def _unknown(cause: str) -> Death:
    if "node has died" in cause or "[NODE_DIED]" in cause:
        return _death("unknown", "its node died")
    if "connection error code" in cause or "SYSTEM_ERROR" in cause:
        return _death("unknown", "the worker process died and left no reason in its log (SIGKILL? the kernel's "
                                "OOM killer? see dmesg on its node)")
    first = cause.strip().splitlines()[0] if cause.strip() else None
    return _death("unknown", _cut(first) if first else None)


def _last_line(text: str, rx: re.Pattern[str]) -> str | None:
    hit = None
    for line in text.splitlines():
        if rx.search(line):
            hit = line.strip()
    return hit


def _strip_exc_prefix(line: str) -> str:
    # "[rank0]: torch.OutOfMemoryError: ..." → "torch.OutOfMemoryError: ..."
    return re.sub(r"^\[rank\d+\]:\s*", "", line)


def _cut(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= _DETAIL_MAX else s[: _DETAIL_MAX - 1] + "…"
