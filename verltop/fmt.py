"""Text from data: sizes, durations, percentages, and the sentences and tags of stalls.

Shared by the TUI, the CLI's text output and the JSON's human-readable fields, so the three always agree.
Pure functions of their arguments; nothing here reads a clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verltop.model import Capacity, PendingItem, Resources, Stall

_UNITS = ("B", "K", "M", "G", "T", "P")


def size(n: int | float | None) -> str:
    """Bytes, 1024-based: ``512B``, ``3K``, ``423.0M``, ``3.3G``; ``-`` when unknown."""
    if n is None:
        return "-"
    f = float(n)
    for unit in _UNITS:
        if abs(f) < 1024 or unit == _UNITS[-1]:
            return f"{f:.0f}{unit}" if unit in ("B", "K") else f"{f:.1f}{unit}"
        f /= 1024
    return "-"


def size_short(n: int | float | None) -> str:
    """Bytes in at most four characters (table cells): ``801M``, ``1.5G``, ``140G``."""
    if n is None:
        return "-"
    f = float(n)
    for unit in _UNITS:
        if f < 1000 or unit == _UNITS[-1]:
            return f"{f:.1f}{unit}" if f < 10 and unit != "B" else f"{f:.0f}{unit}"
        f /= 1024
    return "-"


def duration(s: float | None) -> str:
    """Compact duration: ``0.4s``, ``13s``, ``1m05s``, ``2h03m``, ``3d04h``; ``-`` when unknown."""
    if s is None:
        return "-"
    if s < 0:
        s = 0.0
    if s < 9.95 and s != int(s):
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def age(s: float | None) -> str:
    """A clock-like age in whole seconds (the table's AGE column): ``13s``, ``1m05s``."""
    return "-" if s is None else duration(float(int(max(0.0, s))))


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def ratio(r: float | None) -> str:
    """``4×``, ``105×``, ``>999×``; ``many×`` when the median was zero."""
    if r is None:
        return "many×"
    if r >= 1000:
        return ">999×"
    return f"{r:.1f}×" if r < 2 else f"{r:.0f}×"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# ---------------------------------------------------------------- stalls


def stall_reason(st: Stall) -> str:
    """The full sentence for one stall (under the table, in details, ``stall_reason`` in JSON)."""
    r = st.rule
    if r == "dead":
        after = f" after {plural(st.restarts, 'restart')}" if st.restarts else ""
        return f"actor {st.state or 'DEAD'}{after}" + (f": {st.cause}" if st.cause else "")
    if r == "cannot_start":
        return "cannot start" + (f": {st.cause}" if st.cause else "")
    if r == "restarting":
        now = "restarting now; " if st.state == "RESTARTING" else ""
        return (f"{now}restarted {plural(st.restarts or 0, 'time')}" +
                (f"; last cause: {st.cause}" if st.cause else "; Ray keeps no cause until it gives up"))
    if r == "pending":
        return f"pending {duration(st.waiting_s)}: " + actor_wait(st.waits_for, st.target, st.scheduling_state)
    if r == "peers":
        return (f"{plural(st.peers or 0, 'peer')} finished {st.method or 'this method'} "
                f"{duration(st.peers_done_s)} ago")
    if r == "median":
        if st.median_s is not None and st.median_s < 0.05:
            return (f"running far longer than usual ({duration(st.running_s)}; it usually takes under 0.1s)")
        return (f"running {ratio(st.ratio)} longer than usual ({duration(st.running_s)} vs median "
                f"{duration(st.median_s)})")
    if r == "age":
        return f"running {duration(st.running_s)} (> {duration(st.limit_s)})"
    if r == "gpu_idle":
        return f"GPU idle for the whole task ({duration(st.running_s)})"
    if r == "gpu_spin":
        return "GPU 100 % without progress: likely waiting in an NCCL collective"
    if r == "ras":
        if st.state == "missing":
            return "NCCL RAS: its process does not answer (stopped, hung in the kernel or gone)"
        if st.state == "mismatch":
            return f"NCCL RAS: it issued {st.op} while its peers issued {st.cause}: different collectives"
        return (f"NCCL RAS: it enqueued {st.count} {st.op}, its peers {st.expected}: it never reached "
                f"{st.op} #{st.expected}")
    return r


def stall_tag(st: Stall) -> str:
    """A few words for the table's STALLED column; the sentence is under the table and in details."""
    r = st.rule
    if r == "dead":
        return (st.state or "DEAD") + (f" after {st.restarts} restarts" if st.restarts else "")
    if r == "cannot_start":  # the cause is the point: the cell's width cuts it, the line below has it all
        return f"cannot start: {st.cause}" if st.cause else "cannot start"
    if r == "restarting":
        return f"restarted {st.restarts or 0}×"
    if r == "pending":
        if st.waits_for == "resources":
            return "pending: infeasible" if st.scheduling_state == "INFEASIBLE" else "pending: no room"
        return "pending: " + _WAIT_TAG.get(st.waits_for or "", "starting") + (
            f" {st.scheduling_state}" if st.waits_for == "placement_group" and st.scheduling_state else "")
    if r == "peers":
        return f"peers done {duration(st.peers_done_s)} ago"
    if r == "median":
        return "far over median" if st.median_s is not None and st.median_s < 0.05 else f"{ratio(st.ratio)} median"
    if r == "age":
        return f"> {duration(st.limit_s)}"
    if r == "gpu_idle":
        return "GPU idle"
    if r == "gpu_spin":
        return "GPU 100% no progress"
    if r == "ras":
        return {"missing": "RAS: not answering", "mismatch": "RAS: op mismatch"}.get(st.state or "",
                                                                                    f"RAS: behind in {st.op}")
    return r


_PLUMBING = (("multiprocessing.resource_tracker", "resource_tracker"), ("multiprocessing.forkserver", "forkserver"),
             ("spawn_main(", "spawn child (starting)"))


def short_title(title: str | None) -> str:
    """A child process's title for a narrow column: ``VLLM::Worker_TP1`` → ``Worker_TP1``,
    ``sglang::scheduler_TP0`` → ``scheduler_TP0``; multiprocessing's helpers by what they are; else the
    command without its directory (``/usr/bin/python3 -m x`` → ``python3 -m x``)."""
    if not title:
        return "?"
    for needle, name in _PLUMBING:
        if needle in title:
            return name
    head, sep, rest = title.partition("::")
    if sep and head and " " not in head and head != "ray":
        return rest
    words = title.split()
    exe = words[0].rsplit("/", 1)[-1]
    if exe.startswith("python") and len(words) > 1:
        # the interpreter's flags say little: `python sandbox.py`, `python -m pkg.mod`, `python -c …`
        rest = [w for w in words[1:] if not (w.startswith("-") and w not in ("-m", "-c"))]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return f"{exe} -m {rest[1]}"
        if rest[:1] == ["-c"]:
            return f"{exe} -c …"
        if rest:
            return f"{exe} {rest[0].rsplit('/', 1)[-1]}"
    return " ".join([exe, *words[1:]])


# ---------------------------------------------------------------- pending work

_WAIT_TAG = {"placement_group": "PG", "runtime_env": "env set-up", "worker": "starting", "dependencies": "args"}
_BYTES = ("memory", "object_store_memory")
_VERDICT = {"infeasible": "infeasible", "busy": "waits for resources held by others"}
_RAY_SAYS = {"INFEASIBLE": "no node can ever hold it (Ray: INFEASIBLE)",
             "NO_RESOURCES": "not enough free resources (Ray: NO_RESOURCES)"}


def amount(resource: str | None, v: float | None) -> str:
    """A resource amount: ``10``, ``0.5``, memory as ``8.0G``."""
    if v is None:
        return "-"
    if resource in _BYTES:
        return size(v)
    return f"{v:.0f}" if v == int(v) else f"{v:g}"


def resources(r: Resources) -> str:
    """``{CPU: 10, GPU: 1}``."""
    return "{" + ", ".join(f"{k}: {amount(k, v)}" for k, v in r) + "}"


def demand(bundles: tuple[Resources, ...], kind: str = "placement_group") -> str:
    """``2 bundles × {CPU: 10}``; mixed bundles as ``3 bundles: {CPU: 1, GPU: 1} + 2 × {CPU: 1}``."""
    if kind != "placement_group":
        return resources(bundles[0]) if bundles else "{}"
    counts: dict[Resources, int] = {}
    for b in bundles:
        counts[b] = counts.get(b, 0) + 1
    n = len(bundles)
    if len(counts) == 1:
        (b, _), = counts.items()
        return f"{plural(n, 'bundle')} × {resources(b)}" if n != 1 else f"1 bundle {resources(b)}"
    parts = [resources(b) if c == 1 else f"{c} × {resources(b)}" for b, c in counts.items()]
    return f"{n} bundles: " + " + ".join(parts)


def capacity(c: Capacity, scheduling_state: str | None = None) -> str:
    """Why a demand does not fit, against the node that comes closest: ``no node has 10 CPU free (node
    192.0.2.2: 16 CPU, 13 free)``."""
    if c.per == "nodes" and c.need is not None:  # STRICT_SPREAD: one bundle per node
        free = "" if c.node_free is None else f", {c.node_free:.0f} with room now"
        return (f"needs {plural(int(c.need), 'node')} that each hold one bundle; {c.node_total or 0:.0f} of "
                f"{plural(c.nodes, 'node')} could{free}")
    if c.resource is None:
        return _RAY_SAYS.get(scheduling_state or "", f"Ray: {scheduling_state or 'pending'}")
    res = c.resource
    where = "node" if c.nodes <= 1 else "largest node" if c.verdict == "infeasible" else "freest node"
    free = f", {amount(res, c.node_free)} free" if c.node_free is not None else ""
    if c.taken:
        free += f", {amount(res, c.taken)} of it for the bundles before"
    node = f" ({where} {c.node_ip or '?'}: {amount(res, c.node_total)} {res}{free})" if c.node_total is not None else ""
    need = f"{amount(res, c.need)} {res}"
    for_ = (" for all bundles together" if c.per == "node" else " for even one bundle" if c.bundle == 1
            else f" for bundle {c.bundle}" if c.bundle else "")
    if c.verdict == "infeasible":
        return f"no node has {need}{' left' if c.taken else ''}{for_}{node}"
    if c.verdict == "busy":
        return f"no node has {need} free{for_}{node}"
    return f"room for {need}{node}; Ray: {scheduling_state or 'pending'}"


def actor_wait(waits_for: str | None, target: str | None, scheduling_state: str | None) -> str:
    """What a pending actor waits for, as a phrase."""
    if waits_for == "placement_group":
        return f"waits for placement group {target or '?'}" + (f" ({scheduling_state})" if scheduling_state else "")
    if waits_for == "resources":
        how = {"INFEASIBLE": ", which no node has (infeasible)", "NO_RESOURCES": ", held by others now"}
        return f"needs {target or 'resources'}{how.get(scheduling_state or '', '')}"
    if waits_for == "runtime_env":
        return f"runtime env set-up in progress ({target})" if target else "runtime env set-up in progress"
    if waits_for == "dependencies":
        return "waits for its arguments (objects not ready yet)"
    return "waits for its worker process to start"


def pending_reason(p: PendingItem) -> str:
    """One sentence: what is pending, against what the cluster has, and the verdict."""
    if p.kind == "actor" and p.waits_for != "resources":
        return actor_wait(p.waits_for, p.target, p.scheduling_state) + (f"; {p.detail}" if p.detail else "")
    what = demand(p.demand, p.kind)
    if p.kind == "placement_group" and p.strategy:
        what += f" {p.strategy}"
    c = p.capacity
    if c is None:
        return f"{what}: " + _RAY_SAYS.get(p.scheduling_state or "", f"Ray: {p.scheduling_state or 'pending'}")
    verdict = _VERDICT.get(c.verdict)
    return f"{what}: {capacity(c, p.scheduling_state)}" + (f" — {verdict}" if verdict else "")
