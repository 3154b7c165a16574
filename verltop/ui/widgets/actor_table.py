"""The actor table: grouped rows updated in place by key; cursor and scroll survive every refresh."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from verltop.model import ActorRow, Snapshot
from verltop.text import fmt_age
from verltop.ui.render import bar, mem_bar

COLUMNS = (
    ("role", "ROLE", 13),
    ("rank", "RANK", 5),
    ("node", "NODE", 12),
    ("pid", "PID", 7),
    ("gpu", "GPU", 3),
    ("gpu_util", "GPU UTIL", 12),
    ("gpu_mem", "GPU MEM", 12),
    ("cpu", "CPU%", 4),
    ("host_mem", "HOST MEM", 12),
    ("state", "STATE", 5),
    ("task", "TASK", 18),
    ("age", "AGE", 6),
    ("why", "STALLED", 40),
)
COLUMN_KEYS = tuple(c[0] for c in COLUMNS)

GROUPINGS = ("group", "role", "node")
SORTS = ("rank", "gpu", "cpu", "mem", "age")

_STATE_STYLE = {"ALIVE": "green", "DEAD": "grey50", "RESTARTING": "dark_orange", "PENDING_CREATION": "dark_orange",
                "DEPENDENCIES_UNREADY": "dark_orange"}


_STATE_SHORT = {"RESTARTING": "RSTRT", "PENDING_CREATION": "PEND", "DEPENDENCIES_UNREADY": "DEPS"}


def _bare(task: str | None, role: str) -> str | None:
    if task and task.startswith(role + "_"):
        return task[len(role) + 1 :]
    return task


def stall_tag(st) -> str:
    """Short form of a stall reason for the table; the full sentence is under the table and in details."""
    r = st.reason
    if st.rule == "median":
        return r.split(" longer")[0].replace("running ", "") + " median"
    if st.rule == "peers":
        return "peers done " + r.rsplit(" ", 2)[-2] + "s" if r.endswith(" s ago") else "peers done long ago"
    if st.rule == "age":
        return "> " + r.split("(> ")[-1].rstrip(")")
    if st.rule == "gpu_idle":
        return "GPU idle"
    if st.rule == "gpu_spin":
        return "GPU 100% no progress"
    if st.rule == "dead":
        return r.split(":")[0].replace("actor ", "")
    return st.rule


@dataclass(frozen=True, slots=True)
class Row:
    """A row to show. Actor rows carry the actor; their cells are built only when drawn."""

    key: str
    header: tuple | None = None  # cells of a group row
    actor: ActorRow | None = None

    @property
    def actor_id(self) -> str | None:
        return self.actor.actor_id if self.actor else None

    def sig(self) -> tuple:
        """What the cells depend on: equal signatures, equal cells (ages compare by whole seconds)."""
        a = self.actor
        if a is None:
            return ("h", tuple(c.plain if isinstance(c, Text) else c for c in self.header or ()))
        return (a.role, a.roles, a.rank, a.world_size, a.node_ip, a.pid, a.gpu_index,
                None if a.gpu_util_percent is None else round(a.gpu_util_percent),
                None if a.gpu_mem_bytes is None else a.gpu_mem_bytes >> 20, a.gpu_mem_total_bytes,
                None if a.cpu_percent is None else round(a.cpu_percent),
                None if a.rss_bytes is None else a.rss_bytes >> 20, a.host_mem_total_bytes, a.state, a.task,
                None if a.task_running_s is None else int(a.task_running_s), a.stalls)

    def cells(self) -> tuple:
        return self.header if self.actor is None else actor_cells(self.actor)  # type: ignore[return-value]


def _role_text(a: ActorRow) -> Text:
    t = Text(a.role)
    if len(a.roles) > 1:
        t.append(f" +{len(a.roles) - 1}", style="grey50")
    return t


def actor_cells(a: ActorRow) -> tuple:
    dim = a.state != "ALIVE"
    stalled = a.stalled
    rank = "-" if a.rank is None else str(a.rank)  # the world size is on the group row
    # the ROLE column already says the role: show the bare method
    task = Text(_bare(a.task, a.role) or "-", style="bold" if stalled else "")
    why = Text(", ".join(stall_tag(x) for x in a.stalls), style="bold red" if stalled else "")
    cpu = "-" if a.cpu_percent is None else f"{a.cpu_percent:.0f}"
    role = _role_text(a)
    if stalled:
        role.stylize("bold red")
    return (
        role,
        rank,
        a.node_ip or "-",
        str(a.pid) if a.pid else "-",
        "-" if a.gpu_index is None else str(a.gpu_index),
        bar(a.gpu_util_percent, 7, "gpu", dim=dim),
        mem_bar(a.gpu_mem_bytes, a.gpu_mem_total_bytes, 7, dim=dim),
        cpu,
        mem_bar(a.rss_bytes, a.host_mem_total_bytes, 7, dim=dim),
        Text(_STATE_SHORT.get(a.state, a.state[:5]), style=_STATE_STYLE.get(a.state, "")),
        task,
        Text(fmt_age(a.task_running_s), style="bold red" if stalled else ""),
        why,
    )


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


def header_cells(name: str, members: list[ActorRow], grouping: str) -> tuple:
    """A group row: the name in the first column, what the group hosts under TASK, counts at the end."""
    stalled = sum(1 for m in members if m.stalled)
    dead = sum(1 for m in members if m.state in ("DEAD", "RESTARTING"))
    label = Text("▼ ", style="grey50")
    label.append(name, style="bold cyan")
    what = Text("")
    if grouping == "group" and members[0].worker_group:
        roles = sorted({r for m in members for r in m.roles})
        what = Text("+".join(roles), style="cyan")
    worlds = {m.world_size for m in members if m.world_size}
    n = len(members)
    if len(worlds) == 1 and members[0].worker_group:
        w = worlds.pop()
        count = f"{n} ranks" if w == n else f"{n} of {w} ranks"
    else:
        count = f"{n} actor{'s' if n != 1 else ''}"
    info = Text(count, style="grey70")
    if stalled:
        info.append(f"  {stalled} stalled", style="bold red")
    if dead:
        info.append(f"  {dead} dead", style="grey50")
    cells = [Text("")] * len(COLUMNS)
    cells[0] = label
    cells[COLUMN_KEYS.index("task")] = what
    cells[-1] = info
    return tuple(cells)


def _sort_value(a: ActorRow, sort: str) -> tuple:
    if sort == "gpu":
        return (-(a.gpu_util_percent or -1),)
    if sort == "cpu":
        return (-(a.cpu_percent or -1),)
    if sort == "mem":
        return (-(a.rss_bytes or -1),)
    if sort == "age":
        return (-(a.task_running_s or -1),)
    return ()


def matches(a: ActorRow, rx: re.Pattern[str] | None, invert: bool) -> bool:
    if rx is None:
        return True
    hay = " ".join(str(x) for x in (a.role, " ".join(a.roles), a.worker_group, a.actor_name, a.class_name,
                                    a.node_ip, a.pid, a.rank, a.task, a.state, a.stall_reason) if x is not None)
    hit = rx.search(hay) is not None
    return hit != invert


def layout_rows(snap: Snapshot, grouping: str, sort: str, rx: re.Pattern[str] | None = None,
                invert: bool = False) -> list[Row]:
    """The ordered rows to show: group headers followed by their actors."""
    groups: dict[str, list[ActorRow]] = {}
    for a in snap.actors:
        if matches(a, rx, invert):
            groups.setdefault(group_of(a, grouping), []).append(a)
    rows: list[Row] = []
    for name, members in groups.items():  # snapshot order: controller, groups, others
        if sort != "rank":
            members = sorted(members, key=lambda a: _sort_value(a, sort))
        rows.append(Row(f"grp:{grouping}:{name}", header=header_cells(name, members, grouping)))
        rows.extend(Row(a.actor_id, actor=a) for a in members)
    return rows


class ActorTable(DataTable):
    """Keyed rows. ``apply`` diffs against what is shown and touches only changed cells of rows in view;
    rows out of view are marked and drawn when scrolled to (10,000 actors cost what 50 do)."""

    MARGIN = 20  # rows above and below the viewport kept current

    class ActorSelected(Message):
        def __init__(self, actor_id: str) -> None:
            self.actor_id = actor_id
            super().__init__()

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self._shown: list[str] = []
        self._sig: dict[str, tuple] = {}  # signature of what each row shows now
        self._cells: dict[str, tuple] = {}
        self._pending: dict[str, Row] = {}  # rows out of view whose content is behind
        self._index: dict[str, int] = {}
        self.rebuilds = 0
        self.cells_built = 0

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    def on_resize(self) -> None:
        # the last column takes what is left, so nothing scrolls sideways on a wide enough terminal
        fixed = sum(w for _, _, w in COLUMNS[:-1]) + 2 * self.cell_padding * len(COLUMNS) + 2
        col = self.columns.get("why")  # type: ignore[call-overload]
        if col is not None:
            col.width = max(24, self.size.width - fixed)
            self.refresh()
        self._flush_visible()

    def _visible(self) -> range:
        top = int(self.scroll_y)
        return range(max(0, top - self.MARGIN), top + max(self.size.height, 50) + self.MARGIN)

    def _draw(self, r: Row, sig: tuple) -> None:
        cells = r.cells()
        self.cells_built += 1
        old = self._cells.get(r.key)
        for i, (ck, value) in enumerate(zip(COLUMN_KEYS, cells, strict=True)):
            if old is None or old[i] != value:
                self.update_cell(r.key, ck, value)
        self._cells[r.key] = cells
        self._sig[r.key] = sig

    def apply(self, rows: list[Row]) -> None:
        keys = [r.key for r in rows]
        if keys != self._shown:
            self._rebuild(rows)
            return
        vis = self._visible()
        for i, r in enumerate(rows):
            sig = r.sig()
            if self._sig.get(r.key) == sig:
                self._pending.pop(r.key, None)
                continue
            if i in vis:
                self._pending.pop(r.key, None)
                self._draw(r, sig)
            else:
                self._pending[r.key] = r

    def _flush_visible(self) -> None:
        if not self._pending:
            return
        vis = self._visible()
        for k in [k for k in self._pending if self._index.get(k, -1) in vis]:
            r = self._pending.pop(k)
            self._draw(r, r.sig())

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self._flush_visible()

    def _placeholder(self, r: Row) -> tuple:
        a = r.actor
        assert a is not None
        return (Text(a.role), "" if a.rank is None else str(a.rank), *([""] * (len(COLUMNS) - 2)))

    def _rebuild(self, rows: list[Row]) -> None:
        """Membership or order changed: re-lay rows, keeping the cursor on the same row and the scroll."""
        self.rebuilds += 1
        cur = self.selected_key()
        scroll = self.scroll_y
        vis = range(max(0, int(scroll) - self.MARGIN), int(scroll) + max(self.size.height, 50) + self.MARGIN)
        with self.app.batch_update():
            self.clear()
            self._cells.clear()
            self._sig.clear()
            self._pending.clear()
            for i, r in enumerate(rows):
                if r.actor is None or i in vis:
                    cells = r.cells()
                    self.cells_built += 1
                    self._cells[r.key] = cells
                    self._sig[r.key] = r.sig()
                else:
                    cells = self._placeholder(r)
                    self._cells[r.key] = cells
                    self._pending[r.key] = r
                self.add_row(*cells, key=r.key)
            self._shown = keys = [r.key for r in rows]
            self._index = {k: i for i, k in enumerate(keys)}
            if cur is not None and cur in self._index:
                self.move_cursor(row=self._index[cur], animate=False, scroll=False)
            self.scroll_to(y=scroll, animate=False)

    def visible_actor_rows(self) -> list[str]:
        vis = self._visible()
        return [k for i, k in enumerate(self._shown) if i in vis and not k.startswith("grp:")]

    def selected_key(self) -> str | None:
        if not self._shown or self.cursor_row < 0 or self.cursor_row >= len(self._shown):
            return None
        return self._shown[self.cursor_row]

    def selected_actor(self) -> str | None:
        k = self.selected_key()
        return None if k is None or k.startswith("grp:") else k

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        k = event.row_key.value if event.row_key is not None else None
        if k and not k.startswith("grp:"):
            self.post_message(self.ActorSelected(k))


def selection_text(a: ActorRow) -> Text:
    """One line under the table: the selected actor and, if stalled, the full reasons."""
    t = Text()
    t.append(f"{a.worker_group or a.role}", style="bold")
    if a.rank is not None:
        t.append(f" rank {a.rank}", style="bold")
    t.append(f"  {a.actor_name or a.actor_id[:12]}  pid {a.pid or '-'}  {a.task or 'idle'}", style="grey70")
    if a.stalled:
        t.append("  STALLED: ", style="bold red")
        t.append(a.stall_reason or "", style="red")
    elif a.death_cause:
        t.append(f"  {a.death_cause}", style="red")
    return t
