"""The actor table's columns and how they fit the terminal: what the cluster lacks is never shown, text
columns take the width their content needs, and the rest gives way step by step on a narrow terminal."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from itertools import compress

from verltop.model import Snapshot
from verltop.text.processes import narrow_title
from verltop.ui.widgets.table_cells import bare_task
from verltop.ui.widgets.table_types import Shown


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    width: int
    compact_label: str | None = None  # bars drawn as a bare figure when space is short
    compact_width: int | None = None


ALL_COLUMNS = (
    Column("role", "ROLE", 17),
    Column("rank", "RANK", 4),
    Column("node", "NODE", 15),
    Column("pid", "PID", 7),
    Column("gpu", "GPU", 3),
    Column("gpu_util", "GPU UTIL", 12, "GPU%", 4),
    Column("gpu_mem", "GPU MEM", 12, "GMEM", 4),
    Column("cpu", "CPU%", 4),
    Column("host_mem", "HOST MEM", 12, "RSS", 4),
    Column("trend", "MEM 10m", 10),  # GPU memory (else RSS), one cell per minute: a leak is a ramp
    Column("state", "STATE", 5),
    Column("task", "TASK", 20),
    Column("age", "AGE", 6),
    Column("why", "STALLED", 14),  # takes what is left
)
_BY_KEY = {c.key: c for c in ALL_COLUMNS}
_ROLE, _IP, _PROCS = operator.attrgetter("role"), operator.attrgetter("node_ip"), operator.attrgetter("processes")
_TASK_ROLE = operator.attrgetter("task", "role")
GPU_COLUMNS = ("gpu", "gpu_util", "gpu_mem")
PAD = 2  # one space each side of every cell: neighbours never touch
WHY_AT_MOST = 24  # the most STALLED asks for, to hold a suspect's mark whole
SCROLLBAR = 2

# How the table gives way on a narrow terminal, first step first: compact bars, narrower text, then whole
# columns by how little they say when space is short. ROLE, RANK, TASK, AGE and STALLED always stay.
SHRINK_STEPS: tuple[tuple[str, str | int], ...] = (
    ("trend", "drop"),
    ("pid", "drop"),
    ("gpu_util", "compact"),
    ("gpu_mem", "compact"),
    ("host_mem", "compact"),
    ("role", 14),
    ("task", 16),
    ("node", "drop"),
    ("cpu", "drop"),
    ("gpu", "drop"),
    ("state", "drop"),
    ("gpu_mem", "drop"),
    ("host_mem", "drop"),
    ("gpu_util", "drop"),
    ("task", 12),
    ("role", 11),
)


def fit_columns(width: int, has_gpu: bool = True, multi_node: bool = True,
                content: dict[str, int] | None = None) -> tuple[Shown, ...]:
    """The columns that fit ``width`` cells, as htop and nvitop do: what the cluster lacks is never shown
    (NODE with one node, GPU columns without GPUs), text columns take the width their content needs (up to
    their own), and the rest narrows or drops by ``SHRINK_STEPS`` until STALLED has its minimum."""
    content = content or {}
    cols: dict[str, Shown] = {}
    for c in ALL_COLUMNS:
        if (c.key in GPU_COLUMNS and not has_gpu) or (c.key == "node" and not multi_node):
            continue
        w = c.width
        if c.key in content and c.key != "why":
            w = max(len(c.label), min(w, content[c.key]))
        cols[c.key] = Shown(c.key, c.label, w)
    why_min = max(_BY_KEY["why"].width, min(content.get("why", 0), WHY_AT_MOST))  # a suspect's mark whole

    def used() -> int:
        return sum(s.width + PAD for k, s in cols.items() if k != "why") + why_min + PAD + SCROLLBAR

    for key, step in SHRINK_STEPS:
        if used() <= width:
            break
        cur = cols.get(key)
        if cur is None:
            continue
        if step == "drop":
            del cols[key]
        elif step == "compact":
            c = _BY_KEY[key]
            cols[key] = Shown(key, c.compact_label or c.label, c.compact_width or c.width, True)
        elif isinstance(step, int) and cur.width > step:
            cols[key] = Shown(key, cur.label, max(len(cur.label), step))
    fixed = sum(s.width + PAD for k, s in cols.items() if k != "why")
    cols["why"] = Shown("why", "STALLED", max(why_min, width - fixed - PAD - SCROLLBAR))
    return tuple(cols[c.key] for c in ALL_COLUMNS if c.key in cols)


def content_widths(snap: Snapshot) -> dict[str, int]:
    """How wide the text columns need to be for this cluster (role names, IPs, bare task names, and the
    titles of child processes)."""
    acts = snap.actors
    # over the distinct values only: 10,000 actors have a few dozen roles, IPs and task names
    # (sets built in C: this runs on every snapshot)
    out = {"role": max((4, *map(len, set(map(_ROLE, acts))))),
           "node": max((4, *(len(ip or "-") for ip in set(map(_IP, acts))))),
           "task": max((4, *(len(bare_task(t, r) or "-") for t, r in set(map(_TASK_ROLE, acts)))))}
    for a in compress(acts, map(_PROCS, acts)):
        out["role"] = max(out["role"], len(a.role) + 2)
        for p in a.processes:
            out["role"] = max(out["role"], 2 * p.depth + len(narrow_title(p.title)))
    for o in snap.orphans or ():
        out["role"] = max(out["role"], len(narrow_title(o.title)))
        out["node"] = max(out["node"], len(o.node_ip or "-"))
    return out

