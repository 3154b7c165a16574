"""The actor table: grouped rows updated in place by key; cursor and scroll survive every refresh."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.console import Console
from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from verltop import fmt
from verltop.model import ActorRow, GroupWork, PendingItem, ProcRow, Snapshot
from verltop.ui import keymap
from verltop.ui.render import LEVEL_STYLE, bar, level, mem_bar
from verltop.ui.widgets import pending_rows
from verltop.ui.widgets import process_rows as PR


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
GPU_COLUMNS = ("gpu", "gpu_util", "gpu_mem")
PAD = 2  # one space each side of every cell: neighbours never touch
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


@dataclass(frozen=True, slots=True)
class Shown:
    """A column as laid out now."""

    key: str
    label: str
    width: int
    compact: bool = False


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
        if c.key in content:
            w = max(len(c.label), min(w, content[c.key]))
        cols[c.key] = Shown(c.key, c.label, w)
    why_min = _BY_KEY["why"].width

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


GROUPINGS = ("group", "role", "node")
SORTS = ("rank", "gpu", "cpu", "mem", "age", "growth")

_STATE_STYLE = {"ALIVE": "green", "DEAD": "grey50", "RESTARTING": "dark_orange", "PENDING_CREATION": "dark_orange",
                "DEPENDENCIES_UNREADY": "dark_orange"}


_STATE_SHORT = {"RESTARTING": "RSTRT", "PENDING_CREATION": "PEND", "DEPENDENCIES_UNREADY": "DEPS"}


def _bare(task: str | None, role: str) -> str | None:
    if task and task.startswith(role + "_"):
        return task[len(role) + 1 :]
    return task


@dataclass(frozen=True, slots=True)
class Row:
    """A row to show. Actor rows carry the actor; their cells are built only when drawn. Group rows are one
    line of text across the table (name, what the group hosts, counts), never cut into columns. Process rows
    (``proc``) are an actor's descendants under it (``parent``; keyed ``proc:<actor_id>:<pid>``, as pids
    repeat across nodes) or orphans (``orphan:<node_id>:<pid>``, with a ``note``)."""

    key: str
    header: Text | None = None
    actor: ActorRow | None = None
    proc: ProcRow | None = None
    parent: ActorRow | None = None
    branch: str = ""  # process rows: the tree's drawing before the title
    note: str = ""  # orphans: whose they were
    marker: str = ""  # actor rows with processes: ▾ open, ▸ closed
    pending: PendingItem | None = None  # a line of the "pending" group (ui/widgets/pending_rows.py)

    @property
    def actor_id(self) -> str | None:
        if self.actor:
            return self.actor.actor_id
        return self.parent.actor_id if self.parent else None

    def sig(self, now: float | None = None) -> tuple:
        """What the cells depend on: equal signatures, equal cells (ages compare by whole seconds)."""
        a = self.actor
        if self.pending is not None:
            return (("p", pending_rows.sig(self.pending, now)), None)
        if self.proc is not None:
            p = self.proc
            return (("p", self.branch, self.note, p.title, p.pid, p.ppid, p.gpu_index,
                     None if p.gpu_mem_bytes is None else p.gpu_mem_bytes >> 20, p.gpu_mem_total_bytes,
                     None if p.cpu_percent is None else round(p.cpu_percent),
                     None if p.rss_bytes is None else p.rss_bytes >> 20, p.node_ip,
                     self.parent.host_mem_total_bytes if self.parent else None), None)
        if a is None:
            return (("h", self.header.plain if self.header is not None else ""), None)
        static = (self.marker, a.role, a.roles, a.rank, a.world_size, a.node_ip, a.pid, a.gpu_index,
                  None if a.gpu_util_percent is None else round(a.gpu_util_percent),
                  None if a.gpu_mem_bytes is None else a.gpu_mem_bytes >> 20, a.gpu_mem_total_bytes,
                  None if a.cpu_percent is None else round(a.cpu_percent),
                  None if a.rss_bytes is None else a.rss_bytes >> 20, a.host_mem_total_bytes, a.state, a.task,
                  a.stalls, a.trend, a.num_restarts)
        # the age ticks every second; kept apart so the rest of the row is not re-rendered for it
        return (static, _int_age(a, now))


def _int_age(a: ActorRow, now: float | None) -> int | None:
    r = a.running_s(now) if now is not None else a.task_running_s
    return None if r is None else int(r)


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
        return Text(_bare(a.task, a.role) or "-", style="bold" if a.stalled else "")
    if k == "age":
        return Text(fmt.age(a.running_s(now) if now is not None else a.task_running_s),
                    style="bold red" if a.stalled else "")
    if k == "why":
        t = Text(", ".join(st.tag for st in a.stalls), style="bold red" if a.stalled else "")
        if a.num_restarts:  # a restart loop shows even when nothing is stalled right now
            t.append(("  " if a.stalls else "") + f"↻ {fmt.plural(a.num_restarts, 'restart')}", style="dark_orange")
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


def group_of(a: ActorRow, grouping: str) -> str:
    if grouping == "role":
        return a.role
    if grouping == "node":
        return a.node_ip or a.node_id or "?"
    if a.role == "controller":
        return "controller"
    if a.worker_group:
        return a.worker_group
    return a.role


def header_text(name: str, members: list[ActorRow], grouping: str, work: GroupWork | None = None) -> Text:
    """A group row: ``▼ name  roles it hosts  N ranks  S stalled  D dead  R restarts  P pending  T retries``."""
    stalled = sum(1 for m in members if m.stalled)
    dead = sum(1 for m in members if m.state in ("DEAD", "RESTARTING"))
    restarts = sum(m.num_restarts or 0 for m in members)
    t = Text("▼ ", style="grey50")
    t.append(name, style="bold cyan")
    if grouping == "group" and members[0].worker_group:
        roles = sorted({r for m in members for r in m.roles})
        t.append("  " + "+".join(roles), style="cyan")
    worlds = {m.world_size for m in members if m.world_size}
    n = len(members)
    if len(worlds) == 1 and members[0].worker_group:
        w = worlds.pop()
        count = f"{n} ranks" if w == n else f"{n} of {w} ranks"
    else:
        count = fmt.plural(n, "actor")
    t.append(f"  {count}", style="grey70")
    if stalled:
        t.append(f"  {stalled} stalled", style="bold red")
    if dead:
        t.append(f"  {dead} dead", style="grey50")
    if restarts:
        t.append(f"  ↻ {fmt.plural(restarts, 'restart')}", style="dark_orange")
    if work is not None:
        if work.pending:
            t.append(f"  {work.pending} pending", style="yellow")
        if work.retries:
            t.append(f"  {work.retries} {'retry' if work.retries == 1 else 'retries'}", style="dark_orange")
    return t


def _sort_value(a: ActorRow, sort: str) -> tuple:
    if sort == "gpu":
        return (-(a.gpu_util_percent or -1),)
    if sort == "cpu":
        return (-(a.cpu_percent or -1),)
    if sort == "mem":
        return (-(a.rss_bytes or -1),)
    if sort == "age":
        return (-(a.task_running_s or -1),)
    if sort == "growth":
        g = growth_bytes_per_min(a)
        return (g is None, -(g or 0.0))
    return ()


def matches(a: ActorRow, rx: re.Pattern[str] | None, invert: bool) -> bool:
    """Does the filter keep the actor? Its own fields, or one of its processes' titles."""
    if rx is None:
        return True
    hay = " ".join(str(x) for x in (a.role, " ".join(a.roles), a.worker_group, a.actor_name, a.class_name,
                                    a.node_ip, a.pid, a.rank, a.task, a.state, a.stall_reason) if x is not None)
    hit = rx.search(hay) is not None or PR.matches_title(a, rx)
    return hit != invert


def layout_rows(snap: Snapshot, grouping: str, sort: str, rx: re.Pattern[str] | None = None,
                invert: bool = False, toggled: dict[str, bool] | None = None) -> list[Row]:
    """The ordered rows to show: group headers followed by their actors, each actor followed by its child
    processes when its tree is open (``toggled``: the user's choices by actor id, over
    ``process_rows.default_open``), and the orphans' group last."""
    groups: dict[str, list[ActorRow]] = {}
    for a in snap.actors:
        if matches(a, rx, invert):
            groups.setdefault(group_of(a, grouping), []).append(a)
    toggled = toggled or {}
    defaults = PR.default_open(snap.actors)
    rows: list[Row] = []
    if snap.pending:  # what Ray has not placed yet comes first: it is why nothing else moves
        shown = [p for p in pending_rows.listed(snap) if pending_rows.matches(p, rx, invert)]
        rows.append(Row(pending_rows.GROUP_KEY, header=pending_rows.header(snap)))
        rows.extend(Row(pending_rows.key_of(p), pending=p) for p in shown)
    work = {w.group: w for w in snap.work} if grouping == "group" else {}
    for name, members in groups.items():  # snapshot order: controller, groups, others
        if sort != "rank":
            members = sorted(members, key=lambda a: _sort_value(a, sort))
        rows.append(Row(f"grp:{grouping}:{name}", header=header_text(name, members, grouping, work.get(name))))
        for a in members:
            if not a.processes:
                rows.append(Row(a.actor_id, actor=a))
                continue
            open_ = PR.is_open(a, toggled, defaults)
            rows.append(Row(a.actor_id, actor=a, marker="▾" if open_ else "▸"))
            if open_:
                rows.extend(Row(f"proc:{a.actor_id}:{p.pid}", proc=p, parent=a, branch=b)
                            for p, b in zip(a.processes, PR.branches(a.processes), strict=True))
    if snap.orphans and not invert and (rx is None or any(o.title and rx.search(o.title) for o in snap.orphans)):
        rows.append(Row("grp:orphans", header=PR.orphans_header(snap.orphans)))
        names = {a.actor_id: a.actor_name or a.class_name for a in snap.actors}
        rows.extend(Row(f"orphan:{o.node_id}:{o.pid}", proc=o, branch=b[2:] if o.depth > 1 else "",
                        note=PR.orphan_note(o, names))
                    for o, b in zip(snap.orphans, PR.branches(snap.orphans), strict=True))
    return rows


def content_widths(snap: Snapshot) -> dict[str, int]:
    """How wide the text columns need to be for this cluster (role names, IPs, bare task names, and the
    titles of child processes)."""
    out = {"role": 4, "node": 4, "task": 4}
    for a in snap.actors:
        out["role"] = max(out["role"], len(a.role) + (2 if a.processes else 0))
        out["node"] = max(out["node"], len(a.node_ip or "-"))
        out["task"] = max(out["task"], len(_bare(a.task, a.role) or "-"))
        for p in a.processes:
            out["role"] = max(out["role"], 2 * p.depth + len(fmt.short_title(p.title)))
    for o in snap.orphans or ():
        out["role"] = max(out["role"], len(fmt.short_title(o.title)))
        out["node"] = max(out["node"], len(o.node_ip or "-"))
    return out


class ActorTable(ScrollView, can_focus=True):
    """The actor list: a Line-API scroll view with a fixed header line.

    Rows are keyed; ``apply`` swaps in the new row list and keeps the cursor on the same key. Each row is
    rendered to a Strip once per change of what it shows (its ``sig``), so a refresh of 10,000 actors
    renders only the rows on screen that changed — not the whole table, as DataTable would.
    """

    COMPONENT_CLASSES = {"actor-table--header", "actor-table--cursor", "actor-table--group"}
    DEFAULT_CSS = """
    ActorTable > .actor-table--header { text-style: bold; }
    ActorTable > .actor-table--cursor { background: $primary 30%; }
    ActorTable:focus > .actor-table--cursor { background: $primary 55%; }
    ActorTable > .actor-table--group { background: $panel; }
    """
    BINDINGS = keymap.TABLE

    class ActorSelected(Message):
        def __init__(self, actor_id: str) -> None:
            self.actor_id = actor_id
            super().__init__()

    class Highlighted(Message):
        def __init__(self, key: str | None) -> None:
            self.key = key
            super().__init__()

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._rows: list[Row] = []
        self._index: dict[str, int] = {}
        self._sig: dict[str, tuple] = {}
        self._strips: dict[tuple[str, bool], Strip] = {}
        self._parts: dict[tuple[str, bool], tuple] = {}
        self.cursor_row = 0
        self.rebuilds = 0  # times the row set or order changed
        self.cells_built = 0  # rows rendered
        self._row_console = Console(width=1000, color_system="truecolor", legacy_windows=False, force_terminal=True)
        self._shape: tuple[bool, bool, tuple] = (True, True, ())  # has_gpu, multi_node, content widths
        self._cols: tuple[Shown, ...] = fit_columns(200)
        self._age = self._age_index()
        self._width = self._cols_width()
        self.now: float | None = None

    # ---------------------------------------------------------- columns

    def _cols_width(self) -> int:
        return sum(c.width + PAD for c in self._cols)

    def _age_index(self) -> int:
        return next(i for i, c in enumerate(self._cols) if c.key == "age")

    @property
    def column_keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self._cols)

    def set_shape(self, snap: Snapshot) -> None:
        """What the cluster has decides which columns exist: GPUs on any node, more than one node, and how
        wide its role, node and task names are."""
        has_gpu = any(n.gpus for n in snap.nodes) or any(a.gpu_index is not None for a in snap.actors)
        multi = len({a.node_id for a in snap.actors if a.node_id}) > 1 or len(snap.nodes) > 1
        shape = (has_gpu, multi, tuple(sorted(content_widths(snap).items())))
        if shape != self._shape:
            self._shape = shape
            self._relayout()

    def _relayout(self) -> None:
        has_gpu, multi, content = self._shape
        cols = fit_columns(self.size.width or 200, has_gpu, multi, dict(content))
        if cols != self._cols:
            self._cols = cols
            self._age = self._age_index()
            self._width = self._cols_width()
            self._parts.clear()
            self._strips.clear()
            self.virtual_size = Size(self._width, len(self._rows) + 1)
            self.refresh()

    def on_resize(self) -> None:
        self._relayout()
        # pending lines take the whole width, whatever the columns do
        for k in [k for k in self._strips if k[0].startswith(pending_rows.KEY_PREFIX)]:
            del self._strips[k]

    # ---------------------------------------------------------- data

    @property
    def row_count(self) -> int:
        return len(self._rows)

    @property
    def keys(self) -> list[str]:
        return [r.key for r in self._rows]

    def apply(self, rows: list[Row], now: float | None = None) -> None:
        """Show ``rows``; unchanged rows keep their rendered strips; the cursor stays on its key."""
        if now is not None:
            self.now = now
        cur = self.selected_key()
        reordered = [r.key for r in rows] != [r.key for r in self._rows]
        if reordered:
            self.rebuilds += 1
            self._index = {r.key: i for i, r in enumerate(rows)}
            alive = set(self._index)
            self._sig = {k: v for k, v in self._sig.items() if k in alive}
            self._strips = {k: v for k, v in self._strips.items() if k[0] in alive}
            self._parts = {k: v for k, v in self._parts.items() if k[0] in alive}
        self._rows = rows
        self.virtual_size = Size(self._width, len(rows) + 1)
        if cur is not None and cur in self._index:
            self.cursor_row = self._index[cur]
        self.cursor_row = max(0, min(self.cursor_row, len(rows) - 1))
        if self._resig_visible() or reordered:
            self.refresh()
        if self.selected_key() != cur:
            self.post_message(self.Highlighted(self.selected_key()))

    def tick(self, now: float) -> None:
        """Ages move on between snapshots: re-render the rows on screen whose age (in whole seconds) changed,
        and repaint the AGE column only (the rest of each row is as it was)."""
        self.now = now
        if self._resig_visible():
            x = sum(c.width + PAD for c in self._cols[: self._age]) - int(self.scroll_offset.x)
            w = self._cols[self._age].width + PAD
            if x + w > 0 and x < self.size.width:
                self.refresh(Region(max(0, x), 1, w + min(0, x), max(1, self.size.height - 1)))

    def _resig_visible(self) -> bool:
        top, bottom = self._view()
        changed = False
        for r in self._rows[top:bottom]:
            sig = r.sig(self.now)
            if self._sig.get(r.key) != sig:
                self._sig[r.key] = sig
                self._strips.pop((r.key, False), None)
                self._strips.pop((r.key, True), None)
                changed = True
        return changed

    def _view(self) -> tuple[int, int]:
        top = int(self.scroll_offset.y)
        return top, top + max(1, self.size.height - 1)

    def cells(self, key: str) -> dict[str, str]:
        """The plain text of a row's cells by column key, as laid out now (tests and debugging). A group
        row is one cell, ``group``."""
        r = self._rows[self._index[key]]
        if r.pending is not None:
            return {"pending": pending_rows.line(r.pending, self.now).plain}
        if r.header is not None:
            return {"group": r.header.plain}
        out = {}
        for c in self._cols:
            v = self._cell(r, c)
            out[c.key] = v.plain if isinstance(v, Text) else str(v)
        return out

    def _cell(self, r: Row, c: Shown) -> Text | str:
        if r.proc is not None:
            return PR.proc_cell(r, c)
        assert r.actor is not None
        v = actor_cell(r.actor, c, self.now)
        if c.key == "role" and r.marker:
            t = Text(r.marker + " ", style="grey50")
            t.append_text(v) if isinstance(v, Text) else t.append(v)
            return t
        return v

    def get_row(self, key: str) -> list[str]:
        return list(self.cells(key).values())

    def visible_actor_rows(self) -> list[str]:
        top, bottom = self._view()
        return [r.key for r in self._rows[top:bottom] if r.actor is not None]

    def selected_key(self) -> str | None:
        if not self._rows or not 0 <= self.cursor_row < len(self._rows):
            return None
        return self._rows[self.cursor_row].key

    def selected_row(self) -> Row | None:
        if not self._rows or not 0 <= self.cursor_row < len(self._rows):
            return None
        return self._rows[self.cursor_row]

    def selected_actor(self) -> str | None:
        """The actor of the selected row: an actor row's, or a child process's actor (None on a group row
        or an orphan)."""
        r = self.selected_row()
        return r.actor_id if r is not None else None

    def row_index(self, key: str) -> int | None:
        return self._index.get(key)

    def selected_pending(self) -> PendingItem | None:
        r = self.selected_row()
        return r.pending if r is not None else None

    # ---------------------------------------------------------- drawing

    def _line_strip(self, cells: list, cols: tuple[Shown, ...], r: Row, selected: bool) -> Strip:
        line = Text(no_wrap=True, overflow="crop")
        for col, c in zip(cols, cells, strict=True):
            t = c.copy() if isinstance(c, Text) else Text(str(c))
            t.truncate(col.width, overflow="ellipsis", pad=True)
            line.append(" ")
            line.append_text(t)
            line.append(" ")
        return self._finish(line, r, selected)

    def _finish(self, line: Text, r: Row, selected: bool) -> Strip:
        if r.header is not None:
            line.stylize(self.get_component_rich_style("actor-table--group", partial=True))
        if selected:
            line.stylize(self.get_component_rich_style("actor-table--cursor", partial=True))
        return Strip(list(line.render(self._row_console)), line.cell_len)

    def _render_row(self, r: Row, selected: bool) -> Strip:
        """The row's strip: the parts left and right of AGE are cached by the row's static signature, so
        the once-a-second age tick renders one cell, not thirteen."""
        if r.header is not None or r.pending is not None:
            line = Text(" ", no_wrap=True, overflow="ellipsis")
            line.append_text(pending_rows.line(r.pending, self.now) if r.pending is not None else r.header or Text(""))
            # a pending line's reason is the point: it may use the whole width, not only the columns'
            width = max(self._width, self.size.width - SCROLLBAR) if r.pending is not None else self._width
            line.truncate(width, overflow="ellipsis", pad=True)
            return self._finish(line, r, selected)
        if r.proc is not None:
            self.cells_built += 1
            return self._line_strip([PR.proc_cell(r, c) for c in self._cols], self._cols, r, selected)
        a = r.actor
        assert a is not None
        static, _age = r.sig(self.now)
        ck = (r.key, selected)
        cached = self._parts.get(ck)
        i = self._age
        if cached is None or cached[0] != static:
            self.cells_built += 1
            left = self._line_strip([self._cell(r, c) for c in self._cols[:i]], self._cols[:i], r, selected)
            right = self._line_strip([self._cell(r, c) for c in self._cols[i + 1 :]], self._cols[i + 1 :], r, selected)
            cached = self._parts[ck] = (static, left, right)
        mid = self._line_strip([actor_cell(a, self._cols[i], self.now)], self._cols[i : i + 1], r, selected)
        return Strip.join([cached[1], mid, cached[2]])

    def _header(self) -> Strip:
        line = Text(no_wrap=True)
        for c in self._cols:
            line.append(" " + c.label.ljust(c.width)[: c.width] + " ")
        line.stylize(self.get_component_rich_style("actor-table--header", partial=True))
        return Strip(list(line.render(self._row_console)), line.cell_len)

    def render_line(self, y: int) -> Strip:
        sx = int(self.scroll_offset.x)
        width = self.size.width
        if y == 0:
            strip = self._header()
        else:
            i = int(self.scroll_offset.y) + y - 1
            if i >= len(self._rows):
                return Strip.blank(width, self.rich_style)
            r = self._rows[i]
            sel = i == self.cursor_row
            key = (r.key, sel)
            strip = self._strips.get(key)
            if strip is None or self._sig.get(r.key) is None:
                self._sig.setdefault(r.key, r.sig(self.now))
                strip = self._strips[key] = self._render_row(r, sel)
        return strip.crop_extend(sx, sx + width, self.rich_style)

    # ---------------------------------------------------------- cursor

    def move_cursor(self, row: int) -> None:
        old = self.cursor_row
        self.cursor_row = max(0, min(row, len(self._rows) - 1))
        top, bottom = self._view()
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= bottom:
            self.scroll_to(y=self.cursor_row - (bottom - top) + 1, animate=False)
        if old != self.cursor_row:
            self.refresh()
            self.post_message(self.Highlighted(self.selected_key()))

    def action_cursor_up(self) -> None:
        self.move_cursor(self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.move_cursor(self.cursor_row - max(1, self.size.height - 2))

    def action_page_down(self) -> None:
        self.move_cursor(self.cursor_row + max(1, self.size.height - 2))

    def action_first(self) -> None:
        self.move_cursor(0)

    def action_last(self) -> None:
        self.move_cursor(len(self._rows) - 1)

    def action_select(self) -> None:
        k = self.selected_actor()
        if k:
            self.post_message(self.ActorSelected(k))
        elif self.selected_pending() is not None:
            self.post_message(self.ActorSelected(self.selected_key() or ""))

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            return
        i = int(self.scroll_offset.y) + event.y - 1
        if 0 <= i < len(self._rows):
            self.move_cursor(i)
            if event.chain >= 2:
                self.action_select()

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self._resig_visible()


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
        t.append(f"  GPU {p.gpu_index} {fmt.size(p.gpu_mem_bytes)}", style="grey70")
    t.append(f"  CPU {fmt.pct(p.cpu_percent)}  RSS {fmt.size(p.rss_bytes)}", style="grey70")
    return t


def selection_text(a: ActorRow) -> Text:
    """One line under the table: the selected actor and, if stalled, the full reasons."""
    t = Text()
    t.append(f"{a.worker_group or a.role}", style="bold")
    if a.rank is not None:
        t.append(f" rank {a.rank}" + (f"/{a.world_size}" if a.world_size else ""), style="bold")
    t.append(f"  {a.actor_name or a.actor_id[:12]}  pid {a.pid or '-'}  {a.task or 'idle'}", style="grey70")
    if a.num_restarts:
        t.append(f"  ↻ restarted {a.num_restarts}×", style="dark_orange")
    if a.stalled:
        t.append("  STALLED: ", style="bold red")
        t.append(a.stall_reason or "", style="red")
    elif a.death_cause:
        t.append(f"  {a.death_cause}", style="red")
    return t
