"""A table line's cells straight to segments: what ``Text.render`` of the line would give, without the Text.

The table draws every visible row again whenever its figures move (each snapshot, and each second for the
age). Building a ``Text`` of the line and rendering it walks every span of the line per row; here a cell with
one style is one segment, a cell drawn in parts (a bar) is rendered once per distinct look and reused, and
unstyled neighbours are joined as ``Text.render`` joins them, so the screen (and its SVG) is the same.
"""

from __future__ import annotations

from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

NULL = Style.null()
_CACHE_MAX = 4096  # distinct cells drawn in parts (bars by value and width): a few hundred in practice


def fit(plain: str, width: int) -> str:
    """``plain`` cut to ``width`` cells with an ellipsis, or padded to it (``Text.truncate``'s ellipsis, pad)."""
    n = cell_len(plain)
    if n > width:
        return set_cell_size(plain, width - 1) + "…"
    return plain + " " * (width - n) if n < width else plain


class RowSegments:
    """Renders lines of cells for one console (its styles); caches what it drew in parts."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._styles: dict[str | Style, Style] = {}
        self._parts: dict[tuple, tuple[tuple[str, Style], ...]] = {}

    def _style(self, name: str | Style) -> Style:
        s = self._styles.get(name)
        if s is None:
            s = self._styles[name] = self.console.get_style(name, default=NULL)
        return s

    def _spanned(self, c: Text, width: int) -> tuple[tuple[str, Style], ...]:
        """A cell styled in parts, cut or padded to ``width`` as Rich does, as (text, style) pieces; a piece
        no span covers has the null style (the line's own, joined with its unstyled neighbours)."""
        key = (c.plain, tuple(c.spans), c.style, width)
        got = self._parts.get(key)
        if got is None:
            t = c.copy()
            t.truncate(width, overflow="ellipsis", pad=True)
            w = Text()
            w.append_text(t)  # as in a line: the cell's own style becomes a span (a bare render drops it)
            got = tuple((s.text, s.style or NULL) for s in w.render(self.console))
            if len(self._parts) >= _CACHE_MAX:
                self._parts.clear()
            self._parts[key] = got
        return got

    def line(self, cells: list, widths: list[int], post: Style | None = None) -> tuple[list[Segment], int]:
        """Each cell in its width with a space either side, as ``Text.render`` of the joined line would draw
        it, then ``post`` over the whole line (a cursor, a group row's background): ``(segments, cells)``."""
        out: list[tuple[str, Style]] = []
        plain: list[str] = []  # unstyled text not yet emitted: it joins its unstyled neighbours
        styled = False
        total = 0
        for width, c in zip(widths, cells, strict=True):
            total += width + 2
            if isinstance(c, Text) and c.spans:
                plain.append(" ")
                for text, style in self._spanned(c, width):
                    if style:
                        styled = True
                        if plain:
                            out.append(("".join(plain), NULL))
                            plain = []
                        out.append((text, style))
                    else:
                        plain.append(text)
                plain.append(" ")
                continue
            text, style = (c.plain, c.style) if isinstance(c, Text) else (str(c), "")
            text = fit(text, width)
            if style and text:
                styled = True
                plain.append(" ")
                out.append(("".join(plain), NULL))
                out.append((text, self._style(style)))
                plain = [" "]
            else:
                plain.append(f" {text} ")
        if plain:
            out.append(("".join(plain), NULL))
        if post is not None:
            return [Segment(t, s + post) for t, s in out], total
        if not styled:  # no span at all: Rich's one segment with no style
            return [Segment("".join(t for t, _ in out))], total
        return [Segment(t, s) for t, s in out], total
