"""The actor table's cells and the line under it: how an actor's figures are drawn in each column."""

from __future__ import annotations

from rich.text import Text

from verltop.model import ActorRow
from verltop.text.cells import age, pct, plural, size
from verltop.text.stalls import stall_reasons, stall_tag
from verltop.ui.render import LEVEL_STYLE, bar, level, mem_bar
from verltop.ui.widgets import process_rows as PR
from verltop.ui.widgets.table_types import Row, Shown

_STATE_STYLE = {"ALIVE": "green", "DEAD": "grey50", "RESTARTING": "dark_orange", "PENDING_CREATION": "dark_orange",
                "DEPENDENCIES_UNREADY": "dark_orange"}
_STATE_SHORT = {"RESTARTING": "RSTRT", "PENDING_CREATION": "PEND", "DEPENDENCIES_UNREADY": "DEPS"}


def bare_task(task: str | None, role: str) -> str | None:
    """The task's method without the role in front (the ROLE column already says it)."""
    if task and task.startswith(role + "_"):
        return task[len(role) + 1 :]
    return task


def _pct_text(v: float | None, dim: bool) -> Text:
    if v is None:
        return Text("N/A", style="grey50")
    return Text("MAX" if v >= 100 else f"{v:.0f}%", style="grey50" if dim else LEVEL_STYLE[level("gpu", v)])


def actor_cell(a: ActorRow, col: Shown, now: float | None = None) -> Text | str:
    """One cell of an actor's row, as the column is laid out now."""
    k = col.key
    dim = a.state != "ALIVE"
    if k == "role":
        return Text(a.role, style="bold red" if a.stalled else "")
    if k == "rank":
        return "-" if a.rank is None else str(a.rank)  # the world size is on the group row
    if k == "node":
        return a.node_ip or "-"
    if k == "pid":
        return str(a.pid) if a.pid else "-"
    if k == "gpu":
        return "-" if a.gpu_index is None else str(a.gpu_index)
    if k == "gpu_util":
        return _pct_text(a.gpu_util_percent, dim) if col.compact else bar(a.gpu_util_percent, 7, "gpu", dim=dim)
    if k == "gpu_mem":
        return (PR.mem_text(a.gpu_mem_bytes, a.gpu_mem_total_bytes, dim) if col.compact
                else mem_bar(a.gpu_mem_bytes, a.gpu_mem_total_bytes, 7, dim=dim))
    if k == "cpu":
        return "-" if a.cpu_percent is None else f"{a.cpu_percent:.0f}"
    if k == "host_mem":
        return (PR.mem_text(a.rss_bytes, a.host_mem_total_bytes, dim) if col.compact
                else mem_bar(a.rss_bytes, a.host_mem_total_bytes, 7, dim=dim))
    if k == "state":
        return Text(_STATE_SHORT.get(a.state, a.state[:5]), style=_STATE_STYLE.get(a.state, ""))
    if k == "task":
        # the ROLE column already says the role: show the bare method
        return Text(bare_task(a.task, a.role) or "-", style="bold" if a.stalled else "")
    if k == "age":
        return Text(age(a.running_s(now) if now is not None else a.task_running_s),
                    style="bold red" if a.stalled else "")
    if k == "why":
        t = Text(", ".join(stall_tag(st) for st in a.stalls), style="bold red" if a.stalled else "")
        if a.num_restarts:  # a restart loop shows even when nothing is stalled right now
            t.append(("  " if a.stalls else "") + f"↻ {plural(a.num_restarts, 'restart')}", style="dark_orange")
        return t
    if k == "trend":
        return Text(a.trend or "", style=_growth_style(a))
    return ""


def growth_bytes_per_min(a: ActorRow) -> float | None:
    """The faster of the actor's GPU-memory and RSS growth (bytes/min over the trend ring)."""
    gs = [g for g in (a.gpu_mem_growth_bytes_per_min, a.rss_growth_bytes_per_min) if g is not None]
    return max(gs) if gs else None


def _growth_style(a: ActorRow) -> str:
    g = growth_bytes_per_min(a)
    if g is None or g < 16 * 2**20:  # under 16 MiB/min: noise of a busy process
        return "cyan"
    return "bold red" if g >= 256 * 2**20 else "yellow"


def process_selection_text(r: Row) -> Text:
    """The line under the table for a process row: what it is, whose, and its figures."""
    p = r.proc
    assert p is not None
    t = Text()
    t.append(p.title or "?", style="bold")
    if r.parent is not None:
        a = r.parent
        t.append(f"  pid {p.pid}, child of {p.ppid} under {a.actor_name or a.class_name} (pid {a.pid})", style="grey70")
    else:
        t.append(f"  pid {p.pid} (parent {p.ppid}) on {p.node_ip or '?'}: ", style="grey70")
        t.append(f"orphan, {r.note}", style="dark_orange")
    if p.gpu_mem_bytes:
        t.append(f"  GPU {p.gpu_index} {size(p.gpu_mem_bytes)}", style="grey70")
    t.append(f"  CPU {pct(p.cpu_percent)}  RSS {size(p.rss_bytes)}", style="grey70")
    return t


def selection_text(a: ActorRow, suspect: str | None = None) -> Text:
    """One line under the table: the selected actor, why the last dump suspects it (``suspect``) and, if
    stalled, the full reasons."""
    t = Text()
    t.append(f"{a.worker_group or a.role}", style="bold")
    if a.rank is not None:
        t.append(f" rank {a.rank}" + (f"/{a.world_size}" if a.world_size else ""), style="bold")
    if suspect:  # what the dump found says most: first, before the actor's particulars
        t.append(f"  {suspect}", style="bold magenta")
    t.append(f"  {a.actor_name or a.actor_id[:12]}  pid {a.pid or '-'}  {a.task or 'idle'}", style="grey70")
    if a.num_restarts:
        t.append(f"  ↻ restarted {a.num_restarts}×", style="dark_orange")
    if a.stalled:
        t.append("  STALLED: ", style="bold red")
        t.append(stall_reasons(a) or "", style="red")
    elif a.death_cause:
        t.append(f"  {a.death_cause}", style="red")
    return t
