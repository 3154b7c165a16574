"""Child-process rows of the actor table: an actor's descendants (its inference engine, TP workers, sandbox
children) indented under it, and the orphans' group. Pure functions over the snapshot; the table draws them.

Which trees start open: those whose processes hold GPU memory, and small ones (≤ ``SMALL_TREE`` processes),
in table order, until ``OPEN_BUDGET`` child rows are open; the rest start closed (``▸``) and open with ``c``.
So a 1,000-actor job whose ranks each have a helper process or two shows its rollout servers' engines open
and the rest closed, and the table stays about as long as the actor list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.text import Text

from verltop.model import ActorRow, ProcRow
from verltop.text.cells import size, size_short
from verltop.text.processes import narrow_title
from verltop.ui.render import LEVEL_STYLE, level, mem_bar
from verltop.ui.widgets.table_types import Row, Shown

SMALL_TREE = 3
OPEN_BUDGET = 200  # child rows open by default, at most

# the tree's drawing: the last child of a parent gets └, the others ├; deeper levels continue the lines
_BRANCH, _LAST, _PIPE, _GAP = "├ ", "└ ", "│ ", "  "


def default_open(actors: Iterable[ActorRow]) -> set[str]:
    """Actors whose trees start open (see the module's docstring)."""
    gpu: list[ActorRow] = []
    small: list[ActorRow] = []
    for a in actors:
        if not a.processes:
            continue
        if any(p.gpu_mem_bytes for p in a.processes):
            gpu.append(a)
        elif len(a.processes) <= SMALL_TREE:
            small.append(a)
    out: set[str] = set()
    left = OPEN_BUDGET
    for a in (*gpu, *small):
        if len(a.processes) > left:
            continue
        out.add(a.actor_id)
        left -= len(a.processes)
    return out


def is_open(a: ActorRow, toggled: Mapping[str, bool], defaults: set[str]) -> bool:
    return toggled.get(a.actor_id, a.actor_id in defaults)


def branches(procs: tuple[ProcRow, ...]) -> list[str]:
    """The tree drawing in front of each process (``procs`` in tree order, parents before children)."""
    out: list[str] = []
    n = len(procs)
    for i, p in enumerate(procs):
        # is p the last child of its parent? the next sibling, if any, comes before a shallower row
        last = True
        for q in procs[i + 1 :]:
            if q.depth < p.depth:
                break
            if q.depth == p.depth and q.ppid == p.ppid:
                last = False
                break
        # continuation lines of the ancestors: open while an ancestor has a later sibling
        prefix = ""
        for lvl in range(1, p.depth):
            cont = False
            for q in procs[i + 1 : n]:
                if q.depth < lvl:
                    break
                if q.depth == lvl:
                    cont = True
                    break
            prefix += _PIPE if cont else _GAP
        out.append(prefix + (_LAST if last else _BRANCH))
    return out


def proc_label(branch: str, p: ProcRow) -> str:
    """The ROLE cell of a child row: ``└ EngineCore_DP0``, ``  ├ Worker_TP0``."""
    return branch + narrow_title(p.title)


def matches_title(a: ActorRow, rx: object) -> bool:
    """Does the filter match one of the actor's processes (so the actor stays, with its tree)?"""
    search = getattr(rx, "search", None)
    return search is not None and any(p.title and search(p.title) for p in a.processes)


def orphan_note(o: ProcRow, names: Mapping[str, str]) -> str:
    if o.actor_id:
        return f"left by {names.get(o.actor_id, o.actor_id[:12])}"
    return "no live actor above it"


def orphans_header(orphans: tuple[ProcRow, ...]) -> Text:
    t = Text("▼ ", style="grey50")
    t.append("orphans", style="bold dark_orange")
    gpu = sum(o.gpu_mem_bytes or 0 for o in orphans)
    n = len(orphans)
    t.append(f"  {n} process{'' if n == 1 else 'es'} with no live actor above them", style="grey70")
    if gpu:
        t.append(f"  holding {size(gpu)} of GPU memory", style="bold dark_orange")
    return t


def mem_text(used: int | None, total: int | None, dim: bool) -> Text:
    """A bare size for a compact memory column, coloured by its share of ``total``."""
    if used is None:
        return Text("-", style="grey50")
    style = "grey50" if dim or not total else LEVEL_STYLE[level("mem", used / total * 100)]
    return Text(size_short(used), style=style)


def proc_cell(r: Row, col: Shown) -> Text | str:
    """One cell of a process row: its title in ROLE (indented under its actor), its own pid, GPU, memory,
    CPU and RSS; an orphan says whose it was in STALLED (the full title is on the line under the table)."""
    p = r.proc
    assert p is not None
    k = col.key
    orphan = r.parent is None
    if k == "role":
        return Text(proc_label(r.branch, p), style="dark_orange" if orphan else "grey70")
    if k == "node":
        return (p.node_ip or "-") if orphan else ""
    if k == "pid":
        return str(p.pid)
    if k == "gpu":
        return "" if p.gpu_index is None else str(p.gpu_index)
    if k == "gpu_mem":
        if p.gpu_mem_bytes is None:
            return ""
        return (mem_text(p.gpu_mem_bytes, p.gpu_mem_total_bytes, False) if col.compact
                else mem_bar(p.gpu_mem_bytes, p.gpu_mem_total_bytes, 7))
    if k == "cpu":
        return "-" if p.cpu_percent is None else f"{p.cpu_percent:.0f}"
    if k == "host_mem":
        total = r.parent.host_mem_total_bytes if r.parent else None
        return mem_text(p.rss_bytes, total, False) if col.compact else mem_bar(p.rss_bytes, total, 7)
    if k == "state":
        return Text("ORPH", style="dark_orange") if orphan else ""
    if k == "why":  # the widest column: an orphan says whose it was (a child's title is in its ROLE)
        return Text(f"orphan: {r.note}", style="dark_orange") if orphan else ""
    return ""
