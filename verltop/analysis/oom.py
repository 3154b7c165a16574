"""The OOM verdict: a rank that ran out of memory, found four ways, placed in its step and phase, with its lead-up.
Pure.

- ``task_error``: its call FAILED with torch's OutOfMemoryError ("CUDA out of memory. Tried to allocate …"); the
  process usually lives on, and its peers wait for it in their next collective;
- ``worker_log``: it died, and its worker log (or Ray's death cause) says CUDA ran out of memory;
- ``memory_monitor``: Ray's memory monitor killed it (the node's host memory passed RAY_memory_usage_threshold);
  its message lists the node's top processes by memory (``top_processes``);
- ``sigkill_near_limit``: it died of SIGKILL (or left no word: the kernel's OOM killer) while its memory was near
  the limit that kills it (``Headroom``).

The lead-up is what the memory book keeps (``MemoryView``): the rank's memory in that phase over the last steps,
the growth named for that phase, its peers' peaks there. Without a book (a one-shot dump) the verdict still
names rank, call and message, with no lead-up.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import compress
from typing import TYPE_CHECKING

from verltop.analysis.roles import phase_of_method
from verltop.model import ActorRow, RawTask, Step
from verltop.model.memory import MemoryView, OomVerdict, PhaseMemory

if TYPE_CHECKING:
    from verltop.model import Death

# torch.OutOfMemoryError / torch.cuda.OutOfMemoryError and the allocator's own words; cuBLAS and NCCL say it
# their way
_CUDA_OOM = re.compile(r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUDA error: out of memory|"
                       r"CUBLAS_STATUS_ALLOC_FAILED|NCCL WARN Cuda failure 'out of memory'|"
                       r"HIP out of memory|XPU out of memory|NPU out of memory")
# Ray's memory monitor (ray.exceptions.OutOfMemoryError; the worker's exit type NODE_OUT_OF_MEMORY)
_HOST_OOM = re.compile(r"running low on memory|\[(?:NODE_)?OUT_OF_MEMORY\]|NODE_OUT_OF_MEMORY|"
                       r"ray\.exceptions\.OutOfMemoryError")
_EXC_PREFIX = re.compile(r"^(?:\[rank\d+\]:\s*)?(?:[\w.]+\.)?(?:OutOfMemoryError|RuntimeError|Error):\s*")
# "Memory on the node (IP: 10.0.0.1, ID: ab) where the task (...) was running was 22.5GB / 23.6GB (0.953)" (Ray
# up to 2.5x) or "Memory on the node (IP: …, ID: …) was 29.80GB used / 31.35GB limit (0.950533)" (Ray 2.60)
_NODE_MEM = re.compile(r"Memory on the node \(IP: (?P<ip>[^,)]+)(?:, ID: (?P<node>\w+))?\)"
                       r"(?: where the task .*? was running)? was (?P<used>[\d.]+)\s*(?P<uu>[KMGT]i?B) (?:used )?/ "
                       r"(?P<total>[\d.]+)\s*(?P<tu>[KMGT]i?B)(?: limit)? \((?P<frac>[\d.]+)\)"
                       r"(?:, which exceeds the memory usage threshold of (?P<thr>\d+(?:\.\d+)?))?", re.S)
_KILLED_PID = re.compile(r"\bpid=(\d+)(?:, (?:actual )?memory used=([\d.]+)\s*([KMGT]i?B))?")
_TOP_HEAD = re.compile(r"Top \d+ memory users:\s*\n?\s*PID\s+MEM(?:\((?P<unit>[KMGT]i?B)\))?\s+COMMAND\s*\n", re.I)
_TOP_ROW = re.compile(r"^\s*(?P<pid>\d+)\s+(?P<mem>[\d.]+)\s*(?P<unit>[KMGT]i?B)?\s+(?P<cmd>\S.*?)\s*$")
_UNITS = {"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30,
          "TIB": 1 << 40}
MESSAGE_CHARS = 240
NEAR_LIMIT = 0.10  # a SIGKILL with less than this share of its limit free reads as an OOM kill
LEAD_UP_STEPS = 5
KEEP = 16  # verdicts kept (newest)


def oom_kind(text: str | None) -> str | None:
    """``gpu`` when ``text`` (a task's error, a death cause, a log tail) says CUDA ran out of memory, ``host``
    when Ray's memory monitor killed the process, else None."""
    if not text:
        return None
    if _CUDA_OOM.search(text):
        return "gpu"
    if _HOST_OOM.search(text):
        return "host"
    return None


def oom_message(text: str | None) -> str | None:
    """The error's own line, without the exception's name: ``CUDA out of memory. Tried to allocate 2.00 GiB …``
    (the last such line: the user's exception, not Ray's wrapper around it); Ray's memory monitor: its first
    sentence and the node's memory."""
    if not text:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    hit = next((ln for ln in reversed(lines) if _CUDA_OOM.search(ln)), None)
    if hit is not None:
        at = hit.find("CUDA out of memory")
        line = hit[at:] if at >= 0 else _EXC_PREFIX.sub("", hit)
        return _cut(line)
    if _HOST_OOM.search(text):
        kill = parse_memory_monitor(text)
        base = "killed by Ray's memory monitor (the node ran low on memory)"
        if kill is not None and kill.used_bytes and kill.limit_bytes:
            base += f": the node used {_gb(kill.used_bytes)} of {_gb(kill.limit_bytes)}"
            if kill.threshold is not None:
                base += f" (threshold {kill.threshold:g})"
        return _cut(base)
    return None


@dataclass(frozen=True, slots=True)
class MonitorKill:
    """What Ray's memory monitor said when it killed a worker."""

    node_ip: str | None
    used_bytes: int | None
    limit_bytes: int | None
    fraction: float | None
    threshold: float | None
    pid: int | None  # the worker it killed
    pid_bytes: int | None  # its memory then
    top_processes: tuple[tuple[int, str, int], ...]  # (pid, command, bytes), largest first


def parse_memory_monitor(text: str | None) -> MonitorKill | None:
    """Ray's memory monitor's message (a task's ``OutOfMemoryError``, an actor's death cause): the node's
    memory, the worker it killed, and the "Top 10 memory users" table (``PID  MEM(GB)  COMMAND``)."""
    if not text or not _HOST_OOM.search(text):
        return None
    m = _NODE_MEM.search(text)
    used = limit = None
    frac = thr = None
    ip = None
    if m:
        ip = m.group("ip").strip()
        used, limit = _bytes(m.group("used"), m.group("uu")), _bytes(m.group("total"), m.group("tu"))
        frac = float(m.group("frac"))
        thr = float(m.group("thr")) if m.group("thr") else None
    pid = pid_bytes = None
    k = _KILLED_PID.search(text)
    if k:
        pid = int(k.group(1))
        pid_bytes = _bytes(k.group(2), k.group(3)) if k.group(2) else None
    top: list[tuple[int, str, int]] = []
    h = _TOP_HEAD.search(text)
    if h:
        unit = h.group("unit") or "GB"
        for line in text[h.end():].splitlines():
            r = _TOP_ROW.match(line)
            if r is None:
                break
            top.append((int(r.group("pid")), r.group("cmd"), _bytes(r.group("mem"), r.group("unit") or unit) or 0))
    return MonitorKill(ip, used, limit, frac, thr, pid, pid_bytes, tuple(sorted(top, key=lambda t: -t[2])))


@dataclass(frozen=True, slots=True)
class FailedCall:
    """A call that FAILED (its task's error read from Ray's State API)."""

    task_id: str
    actor_id: str | None
    method: str  # the call (``actor_rollout_update_actor``)
    start_s: float | None
    end_s: float | None
    error: str


def failed_ooms(failed: Iterable[RawTask]) -> list[FailedCall]:
    """The FAILED calls whose error is an OOM, newest last."""
    out = []
    for t in failed:
        if t.state != "FAILED" or not t.actor_id or oom_kind(t.error) is None:
            continue
        out.append(FailedCall(t.task_id, t.actor_id, t.name.rsplit(".", 1)[-1],
                              t.start_time_ms / 1000 if t.start_time_ms else None,
                              t.end_time_ms / 1000 if t.end_time_ms else None, t.error or ""))
    return sorted(out, key=lambda f: f.end_s or 0)


def from_call(call: FailedCall, row: ActorRow | None, now: float) -> OomVerdict | None:
    """The verdict of a call that failed with an OOM: ``task_error`` (torch's OutOfMemoryError) or
    ``memory_monitor`` (Ray killed the worker that ran it)."""
    kind = oom_kind(call.error)
    if kind is None:
        return None
    how = "task_error" if kind == "gpu" else "memory_monitor"
    kill = parse_memory_monitor(call.error) if kind == "host" else None
    return _verdict(row, call.actor_id, kind, how, call.end_s or now, call.method, oom_message(call.error), kill)


_GONE = frozenset(("DEAD", "RESTARTING"))
_STATE = operator.attrgetter("state")


def gone_rows(rows: Sequence[ActorRow]) -> list[ActorRow]:
    """The dead or restarting rows, picked in C (10,000 rows, a few dead)."""
    return list(compress(rows, map(_GONE.__contains__, map(_STATE, rows))))


def from_death(row: ActorRow, death: Death | None = None, headroom_free: dict[str, float] | None = None,
               headroom_kind: dict[str, str] | None = None, method: str | None = None,
               at: float | None = None) -> OomVerdict | None:
    """The verdict of a DEAD (or restarting) rank, from ``death`` (its classified cause: the worker log's
    word when it was read) or else Ray's death cause alone: ``worker_log`` (CUDA OOM), ``memory_monitor`` (host),
    ``sigkill_near_limit`` (SIGKILL, or a death that left no word, with less than ``NEAR_LIMIT`` of its limit
    free: ``headroom_free`` by actor id, the kind of that limit in ``headroom_kind``). ``method``: the call it
    ran when last seen alive."""
    if row.state not in _GONE:
        return None
    text = row.death_text or row.death_cause or ""
    kind = death.kind if death is not None else None
    detail = death.detail if death is not None else None
    at = at if at is not None else 0.0
    if kind == "cuda_oom" or (kind is None and oom_kind(text) == "gpu"):
        return _verdict(row, row.actor_id, "gpu", "worker_log", at, method, oom_message(detail or text))
    if kind == "host_oom" or (kind is None and oom_kind(text) == "host"):
        kill = parse_memory_monitor(text)
        return _verdict(row, row.actor_id, "host", "memory_monitor", at, method, oom_message(text) or detail, kill)
    free = (headroom_free or {}).get(row.actor_id)
    sigkill = (kind == "signal" and "SIGKILL" in (detail or "")) or kind == "unknown" or (
        kind is None and ("connection error" in text or "SIGKILL" in text or "signal 9" in text))
    if sigkill and free is not None and free < NEAR_LIMIT:
        mem = (headroom_kind or {}).get(row.actor_id, "host")
        line = f"SIGKILL with {free * 100:.0f} % of its {'GPU' if mem == 'gpu' else 'host'} memory limit left"
        return _verdict(row, row.actor_id, mem, "sigkill_near_limit", at, method, line)
    return None


def _verdict(row: ActorRow | None, actor_id: str | None, kind: str, how: str, at: float, method: str | None,
             message: str | None, kill: MonitorKill | None = None) -> OomVerdict:
    return OomVerdict(
        worker_group=row.worker_group if row else None, role=row.role if row else None,
        rank=row.rank if row else None, actor_name=row.actor_name if row else None, actor_id=actor_id,
        pid=(kill.pid if kill and kill.pid else None) or (row.pid if row else None), kind=kind, how=how, at=at,
        step=None, phase=phase_of_method(method) if method else None, method=method, message=message,
        top_processes=kill.top_processes if kill else ())


def place(v: OomVerdict, steps: tuple[Step, ...] | list[Step], start_s: float | None = None) -> OomVerdict:
    """The step (and phase) of the call that started at ``start_s`` (else at the verdict's time): the step
    with a run of that method by its group that covers it, else the step running then."""
    t = start_s if start_s is not None else v.at
    method = (v.method or "").rsplit(".", 1)[-1]
    best = None
    for st in steps:
        for r in st.runs:
            if r.method == method and (v.worker_group is None or r.group == v.worker_group) \
                    and r.start_s - 2.0 <= t <= (r.end_s if r.end_s is not None else v.at) + 2.0:
                best = st
        if best is None and st.started_at <= t and (st.duration_s is None or t <= st.started_at + st.duration_s):
            best = st
    if best is None:
        return v
    phase = v.phase or next((r.phase for r in best.runs if r.method == method), None)
    return replace(v, step=best.index, phase=phase)


def with_lead_up(v: OomVerdict, memory: MemoryView | None, steps: int = LEAD_UP_STEPS) -> OomVerdict:
    """The verdict with its lead-up from the memory book: the rank's memory in that phase over the last
    ``steps`` steps (up to the OOM's step), the growth named for that phase, its peers' peaks there."""
    if memory is None or v.actor_id is None or v.phase is None:
        return v
    mine = [p for p in memory.by_phase if p.actor_id == v.actor_id and p.phase == v.phase
            and (v.step is None or p.step <= v.step)]
    mine = sorted(mine, key=lambda p: p.step)[-steps:]
    kind = lead_kind(v.kind, mine)
    growth = [g for g in memory.growth if g.actor_id == v.actor_id and g.phase == v.phase]
    g = next((x for x in growth if x.kind == v.kind), growth[0] if growth else None)
    at_step = v.step if v.step is not None else (mine[-1].step if mine else None)
    # each peer's peak in that phase at the OOM's step, else at its latest step before with a sample (a peer's
    # call that began as the rank ran out has none yet)
    best: dict[int, tuple[int, int | None]] = {}
    for p in memory.by_phase:
        if p.actor_id == v.actor_id or p.phase != v.phase or p.rank is None:
            continue
        if v.worker_group is not None and p.worker_group != v.worker_group:
            continue
        if at_step is not None and p.step > at_step:
            continue
        peak = _peak(p, kind)
        old = best.get(p.rank)
        if old is None or (peak is not None and (old[1] is None or p.step > old[0])):
            best[p.rank] = (p.step, peak)
    peers = {r: pk for r, (_, pk) in best.items()}
    return replace(v, lead_up=tuple(mine), growth=g, peers_peak_bytes=tuple(sorted(peers.items())))


def lead_kind(kind: str, lead_up: Iterable[PhaseMemory]) -> str:
    """The memory the lead-up shows: the OOM's own kind where the book has it, else the other (a CPU-only run
    books host RSS alone; a rank on a node whose GPUs are not read, likewise)."""
    lead_up = list(lead_up)
    if not lead_up or any(_peak(p, kind) is not None for p in lead_up):
        return kind
    return "host" if kind == "gpu" else "gpu"


def _peak(p: PhaseMemory, kind: str) -> int | None:
    return p.peak_gpu_bytes if kind == "gpu" else p.peak_rss_bytes


def verdicts(calls: Iterable[FailedCall], rows: Iterable[ActorRow], steps: tuple[Step, ...] | list[Step] = (),
             memory: MemoryView | None = None, now: float = 0.0, deaths: dict[str, Death] | None = None,
             died_at: dict[str, float] | None = None, last_method: dict[str, str] | None = None,
             keep: int = KEEP, gone: list[ActorRow] | None = None) -> tuple[OomVerdict, ...]:
    """Every OOM verdict, oldest first (at most ``keep``): the failed ``calls`` (from the task history) and the
    dead ``rows`` (``deaths``: classified causes where the worker log was read; ``died_at``: when each was seen
    dead; ``last_method``: the call each ran last), placed in the ``steps`` and given their lead-up from
    ``memory``. One verdict per rank and call: a call that failed and then the process died is one OOM.
    ``gone``: ``gone_rows(rows)`` where the caller has it."""
    rows = rows if isinstance(rows, (list, tuple)) else list(rows)
    calls = list(calls)
    by_id = {a.actor_id: a for a in rows} if calls else {}
    # only a dead or restarting rank has a death to judge (picked in C: 10,000 rows, a few dead), and only its
    # headroom is looked at
    gone = gone_rows(rows) if gone is None else gone
    gone_ids = {a.actor_id for a in gone}
    free: dict[str, float] = {}
    hkind: dict[str, str] = {}
    for h in memory.headroom if memory is not None and gone else ():
        if h.actor_id not in gone_ids:
            continue
        f = h.free_fraction
        if f is not None and (h.actor_id not in free or f < free[h.actor_id]):
            free[h.actor_id], hkind[h.actor_id] = f, h.kind
    out: list[tuple[OomVerdict, float | None]] = []
    for c in calls:
        v = from_call(c, by_id.get(c.actor_id or ""), now)
        if v is not None:
            out.append((v, c.start_s))
    seen = {v.actor_id for v, _ in out}
    for a in gone:
        if a.actor_id in seen:
            continue
        v = from_death(a, (deaths or {}).get(a.actor_id), free, hkind, (last_method or {}).get(a.actor_id),
                       (died_at or {}).get(a.actor_id, now))
        if v is not None:
            out.append((v, None))
    placed = [with_lead_up(place(v, steps, start), memory) for v, start in out]
    return tuple(sorted(placed, key=lambda v: v.at)[-keep:])


def holds(v: OomVerdict, row: ActorRow | None) -> bool:
    """Does the verdict still describe the rank as it is: dead, or not started on another call since the OOM
    (a rank that recovered and runs on is no longer marked for it)?"""
    if row is None or row.state != "ALIVE" or not row.task:
        return True
    return row.task_start_s is None or row.task_start_s <= v.at + 1.0


def marked(ooms: Iterable[OomVerdict], rows: Iterable[ActorRow]) -> dict[str, OomVerdict]:
    """The verdicts that still hold, by actor id (the newest of each rank): the rows to mark."""
    if not ooms:
        return {}
    by_id = {a.actor_id: a for a in rows}
    out: dict[str, OomVerdict] = {}
    for v in sorted(ooms, key=lambda x: x.at):
        if v.actor_id and holds(v, by_id.get(v.actor_id)):
            out[v.actor_id] = v
        elif v.actor_id:
            out.pop(v.actor_id, None)
    return out


def _bytes(num: str | None, unit: str | None) -> int | None:
    if num is None:
        return None
    try:
        return int(float(num) * _UNITS.get((unit or "GB").upper(), 1e9))
    except ValueError:
        return None


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def _cut(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= MESSAGE_CHARS else s[: MESSAGE_CHARS - 1] + "…"
