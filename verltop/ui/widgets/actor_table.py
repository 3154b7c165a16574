"""The actor table: grouped rows updated in place by key; cursor and scroll survive every refresh.

The columns are fitted in ``table_columns``, the rows laid out in ``table_rows``, the cells drawn in
``table_cells``; this module is the scroll view that shows them.
"""

from __future__ import annotations

import operator

from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from verltop.model import PendingItem, Snapshot
from verltop.text.cells import shorten
from verltop.ui import keymap
from verltop.ui.widgets import pending_rows
from verltop.ui.widgets import process_rows as PR
from verltop.ui.widgets.row_segments import RowSegments
from verltop.ui.widgets.table_cells import actor_cell
from verltop.ui.widgets.table_columns import PAD, SCROLLBAR, content_widths, fit_columns
from verltop.ui.widgets.table_rows import layout_rows
from verltop.ui.widgets.table_types import Row, Shown

# the names callers knew this module by
__all__ = ["ActorTable", "Row", "Shown", "actor_cell", "layout_rows"]
_NODE_ID, _KEY = operator.attrgetter("node_id"), operator.attrgetter("key")


def _middle(t: Text, keep: int, width: int) -> Text:
    """A name cell too wide for its column, shortened from the middle after its first ``keep`` cells (a tree's
    branch, a marker): ``└ Eng…ore_DP0``, not ``└ EngineCore_…``; its end says which one it is."""
    if t.cell_len <= width:
        return t
    head, name = t[:keep], t[keep:]
    short = shorten(name.plain, max(1, width - keep))
    out = head.copy()
    out.append(short, style=name.spans[0].style if name.spans else name.style)
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
        self._segments = RowSegments(self._row_console)
        self._shape: tuple[bool, bool, tuple] = (True, True, ())  # has_gpu, multi_node, content widths
        self._cols: tuple[Shown, ...] = fit_columns(200)
        self._age = self._age_index()
        self._width = self._cols_width()
        self.now: float | None = None
        self._pass: tuple[int, Style] | None = None  # (width, base style) while a repaint renders its lines
        self._head: tuple[tuple, Style, Strip] | None = None  # the header line: (its columns, its style, strip)

    # ---------------------------------------------------------- columns

    def _cols_width(self) -> int:
        return sum(c.width + PAD for c in self._cols)

    def _age_index(self) -> int:
        return next(i for i, c in enumerate(self._cols) if c.key == "age")

    @property
    def column_keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self._cols)

    def set_shape(self, snap: Snapshot, why: int = 0) -> None:
        """What the cluster has decides which columns exist: GPUs on any node, more than one node, and how
        wide its role, node and task names are; ``why``: what STALLED must hold whole (a suspect's mark)."""
        has_gpu = any(n.gpus for n in snap.nodes) or any(a.gpu_index is not None for a in snap.actors)
        multi = len(snap.nodes) > 1 or len(set(map(_NODE_ID, snap.actors)) - {None, ""}) > 1
        shape = (has_gpu, multi, tuple(sorted({**content_widths(snap), "why": why}.items())))
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
        reordered = list(map(_KEY, rows)) != list(map(_KEY, self._rows))
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
        if c.key == "why" and r.mark:  # a dump's suspect: its mark first, the stall's tags after
            t = Text(r.mark, style="bold magenta")
            rest = PR.proc_cell(r, c) if r.proc is not None else actor_cell(r.actor, c, self.now) if r.actor else ""
            more = rest.plain if isinstance(rest, Text) else rest
            if more and len(r.mark) + 2 + len(more) <= c.width:  # else the mark alone, not cut
                t.append(", ")
                t.append_text(rest) if isinstance(rest, Text) else t.append(rest)
            return t
        if r.proc is not None:
            v = PR.proc_cell(r, c)
            return _middle(v, len(r.branch), c.width) if c.key == "role" and isinstance(v, Text) else v
        assert r.actor is not None
        v = actor_cell(r.actor, c, self.now)
        if c.key == "why" and r.note:  # a slow rank: "+41s gen"
            t = v.copy() if isinstance(v, Text) else Text(v)
            t.append(("  " if t.plain else "") + r.note, style="bold dark_orange")
            return t
        if c.key == "role" and r.marker:
            t = Text(r.marker + " ", style="grey50")
            t.append_text(v) if isinstance(v, Text) else t.append(v)
            return _middle(t, 2, c.width)
        return _middle(v, 0, c.width) if c.key == "role" and isinstance(v, Text) else v

    def get_row(self, key: str) -> list[str]:
        return list(self.cells(key).values())

    def visible_actor_nodes(self) -> list[str]:
        """The nodes of the actors on screen, top first (what the engine reads first)."""
        top, bottom = self._view()
        return [r.actor.node_id for r in self._rows[top:bottom] if r.actor is not None and r.actor.node_id]

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
        # (group and pending lines are drawn by ``_finish``: only the cursor lies over a line of cells)
        post = self.get_component_rich_style("actor-table--cursor", partial=True) if selected else None
        segs, width = self._segments.line(cells, [c.width for c in cols], post)
        return Strip(segs, width)

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
            return self._line_strip([self._cell(r, c) for c in self._cols], self._cols, r, selected)
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
        """The column labels, rendered once per set of columns (and style) rather than every repaint."""
        style = self.get_component_rich_style("actor-table--header", partial=True)
        if self._head is not None and self._head[0] is self._cols and self._head[1] == style:
            return self._head[2]
        line = Text(no_wrap=True)
        for c in self._cols:
            line.append(" " + c.label.ljust(c.width)[: c.width] + " ")
        line.stylize(style)
        strip = Strip(list(line.render(self._row_console)), line.cell_len)
        self._head = (self._cols, style, strip)
        return strip

    def render_lines(self, crop: Region) -> list[Strip]:
        # the width and the base style once per repaint, not per line: each is a walk of the DOM (a lookup in
        # the compositor's map, the ancestors' styles), and was a tenth of a 1,024-actor refresh's CPU
        self._pass = (self.size.width, self.rich_style)
        try:
            return super().render_lines(crop)
        finally:
            self._pass = None

    def render_line(self, y: int) -> Strip:
        sx = int(self.scroll_offset.x)
        width, base = self._pass or (self.size.width, self.rich_style)
        if y == 0:
            strip = self._header()
        else:
            i = int(self.scroll_offset.y) + y - 1
            if i >= len(self._rows):
                return Strip.blank(width, base)
            r = self._rows[i]
            sel = i == self.cursor_row
            key = (r.key, sel)
            strip = self._strips.get(key)
            if strip is None or self._sig.get(r.key) is None:
                self._sig.setdefault(r.key, r.sig(self.now))
                strip = self._strips[key] = self._render_row(r, sel)
        return strip.crop_extend(sx, sx + width, base)

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
