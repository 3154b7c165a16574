"""The object store's groups as a table: one row per holder and call site, keyed, updated in place."""

from __future__ import annotations

from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.widgets import DataTable

from verltop.model import ObjectGroup
from verltop.text.cells import shorten
from verltop.text.object_store import call_site_text, group_size, holder_text

COLUMNS = (("size", "SIZE"), ("objects", "OBJS"), ("refs", "REFS"), ("holder", "HOLDER"), ("ip", "NODE"),
           ("call_site", "CALL SITE"))


def group_key(g: ObjectGroup) -> str:
    return f"{g.ip}|{g.pid}|{g.call_site or ''}"


class ObjectGroups(DataTable):
    """Largest first; ``show`` removes vanished rows, updates changed cells, adds new ones, sorts once."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def cells(self, g: ObjectGroup, wide: bool) -> list[Text]:
        site = call_site_text(g.call_site)
        holder = holder_text(g, with_name=wide)
        return [Text(group_size(g), justify="right"), Text(str(g.objects), justify="right"),
                Text(str(g.refs), justify="right"), Text(holder if wide else shorten(holder, 28)),
                Text(g.ip or "-"), Text(site if wide else shorten(site, 30), style="grey70" if not g.call_site else "")]

    def show(self, groups: tuple[ObjectGroup, ...], wide: bool) -> None:
        """The rows in the report's order (largest first), keyed: the cursor stays on its group."""
        keys = [group_key(g) for g in groups]
        order = {k: i for i, k in enumerate(keys)}
        with self.app.batch_update():
            for rk in [rk for rk in self.rows if rk.value not in order]:
                self.remove_row(rk)
            for g, k in zip(groups, keys, strict=True):
                cells = self.cells(g, wide)
                if k in self.rows:
                    for (col, _), new in zip(COLUMNS, cells, strict=True):
                        if self.get_cell(k, col) != new:
                            self.update_cell(k, col, new)
                else:
                    self.add_row(*cells, key=k)
            now = sorted(self.rows, key=lambda rk: self.get_row_index(rk))
            want = sorted(self.rows, key=lambda rk: order[rk.value or ""])
            if now != want:  # DataTable sorts by cell values only: place the rows by the report's ranking
                self._row_locations = TwoWayDict({rk: i for i, rk in enumerate(want)})
                self._update_count += 1
                self.refresh()
