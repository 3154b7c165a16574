"""The actor table: grouped rows updated in place by key; cursor and scroll survive every refresh."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.console import Console
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from verltop.model import ActorRow, Snapshot
from verltop.text import fmt_age
from verltop.ui.render import bar, mem_bar

COLUMNS = (
    ("role", "ROLE", 17),
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
AGE = COLUMN_KEYS.index("age")

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

    def sig(self, now: float | None = None) -> tuple:
        """What the cells depend on: equal signatures, equal cells (ages compare by whole seconds)."""
        a = self.actor
        if a is None:
            return (("h", tuple(c.plain if isinstance(c, Text) else c for c in self.header or ())), None)
        static = (a.role, a.roles, a.rank, a.world_size, a.node_ip, a.pid, a.gpu_index,
                  None if a.gpu_util_percent is None else round(a.gpu_util_percent),
                  None if a.gpu_mem_bytes is None else a.gpu_mem_bytes >> 20, a.gpu_mem_total_bytes,
                  None if a.cpu_percent is None else round(a.cpu_percent),
                  None if a.rss_bytes is None else a.rss_bytes >> 20, a.host_mem_total_bytes, a.state, a.task,
                  a.stalls)
        # the age ticks every second; kept apart so the rest of the row is not re-rendered for it
        return (static, _int_age(a, now))

    def cells(self, now: float | None = None) -> tuple:
        return self.header if self.actor is None else actor_cells(self.actor, now)  # type: ignore[return-value]


def _int_age(a: ActorRow, now: float | None) -> int | None:
    r = a.running_s(now) if now is not None else a.task_running_s
    return None if r is None else int(r)


def _role_text(a: ActorRow) -> Text:
    return Text(a.role)  # the roles a colocated worker hosts are on its group's row


def actor_cells(a: ActorRow, now: float | None = None) -> tuple:
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
        Text(fmt_age(a.running_s(now) if now is not None else a.task_running_s), style="bold red" if stalled else ""),
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
    BINDINGS = [
        Binding("up", "cursor_up", "Up", show=False, id="table-up"),
        Binding("down", "cursor_down", "Down", show=False, id="table-down"),
        Binding("pageup", "page_up", "Page up", show=False, id="table-page-up"),
        Binding("pagedown", "page_down", "Page down", show=False, id="table-page-down"),
        Binding("home", "first", "First", show=False, id="table-first"),
        Binding("end", "last", "Last", show=False, id="table-last"),
        Binding("enter", "select", "Details", show=False, id="table-select"),
    ]

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
        self._cols = list(COLUMNS)
        self._width = sum(w + 2 for _, _, w in self._cols)
        self.now: float | None = None

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
        """Ages move on between snapshots: re-render the rows on screen whose age (in whole seconds) changed."""
        self.now = now
        if self._resig_visible():
            self.refresh()

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

    def get_row(self, key: str) -> list[str]:
        """The plain text of a row's cells (tests and debugging)."""
        r = self._rows[self._index[key]]
        return [c.plain if isinstance(c, Text) else str(c) for c in r.cells(self.now)]

    def visible_actor_rows(self) -> list[str]:
        top, bottom = self._view()
        return [r.key for r in self._rows[top:bottom] if r.actor is not None]

    def selected_key(self) -> str | None:
        if not self._rows or not 0 <= self.cursor_row < len(self._rows):
            return None
        return self._rows[self.cursor_row].key

    def selected_actor(self) -> str | None:
        k = self.selected_key()
        return None if k is None or k.startswith("grp:") else k

    # ---------------------------------------------------------- drawing

    def _line_strip(self, cells: tuple, cols: list, r: Row, selected: bool) -> Strip:
        line = Text(no_wrap=True, overflow="crop")
        for (_, _, width), c in zip(cols, cells, strict=True):
            t = c.copy() if isinstance(c, Text) else Text(str(c))
            t.truncate(width, overflow="ellipsis", pad=True)
            line.append(" ")
            line.append_text(t)
            line.append(" ")
        if r.actor is None:
            line.stylize(self.get_component_rich_style("actor-table--group", partial=True))
        if selected:
            line.stylize(self.get_component_rich_style("actor-table--cursor", partial=True))
        return Strip(list(line.render(self._row_console)), line.cell_len)

    def _render_row(self, r: Row, selected: bool) -> Strip:
        """The row's strip: the parts left and right of AGE are cached by the row's static signature, so
        the once-a-second age tick renders one cell, not thirteen."""
        static, _age = r.sig(self.now)
        ck = (r.key, selected)
        cached = self._parts.get(ck)
        cells = None
        if cached is None or cached[0] != static:
            cells = r.cells(self.now)
            self.cells_built += 1
            left = self._line_strip(cells[:AGE], self._cols[:AGE], r, selected)
            right = self._line_strip(cells[AGE + 1 :], self._cols[AGE + 1 :], r, selected)
            cached = self._parts[ck] = (static, left, right)
        if r.actor is None:
            mid_cells = ("",)
        else:
            stalled = r.actor.stalled
            mid_cells = (Text(fmt_age(r.actor.running_s(self.now) if self.now is not None else r.actor.task_running_s),
                              style="bold red" if stalled else ""),)
        mid = self._line_strip(mid_cells, self._cols[AGE : AGE + 1], r, selected)
        return Strip.join([cached[1], mid, cached[2]])

    def _header(self) -> Strip:
        line = Text(no_wrap=True)
        for _, label, width in self._cols:
            line.append(" " + label.ljust(width)[:width] + " ")
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

    def on_resize(self) -> None:
        # the last column takes what is left, so nothing scrolls sideways on a wide enough terminal
        fixed = sum(w + 2 for _, _, w in self._cols[:-1]) + 1
        last = self._cols[-1]
        w = max(20, self.size.width - fixed - 2)
        if last[2] != w:
            self._cols[-1] = (last[0], last[1], w)
            self._parts.clear()
            self._width = fixed + w + 2
            self._strips.clear()
            self.virtual_size = Size(self._width, len(self._rows) + 1)
            self.refresh()

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
