"""A table line's segments, built cell by cell, are exactly what ``Text.render`` of the joined line gives
(same pieces, same styles: the screen and its SVG snapshots do not change)."""

from __future__ import annotations

import random

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from verltop.ui.render import bar, mem_bar
from verltop.ui.widgets.row_segments import RowSegments, fit

CONSOLE = Console(width=1000, color_system="truecolor", legacy_windows=False, force_terminal=True)
CURSOR = Style(bgcolor="#224466")
GROUP = Style(bgcolor="grey23", bold=True)


def _by_text(cells: list, widths: list[int], post: list[Style]) -> list[Segment]:
    """The line as the table drew it before: one Text, each cell cut and padded, stylized, rendered."""
    line = Text(no_wrap=True, overflow="crop")
    for width, c in zip(widths, cells, strict=True):
        if isinstance(c, Text) and c.spans:
            t = c.copy()
            t.truncate(width, overflow="ellipsis", pad=True)
            line.append(" ")
            line.append_text(t)
            line.append(" ")
            continue
        plain, style = (c.plain, c.style) if isinstance(c, Text) else (str(c), "")
        if style:
            line.append(" ")
            line.append(fit(plain, width), style)
            line.append(" ")
        else:
            line.append(f" {fit(plain, width)} ")
    for p in post:
        line.stylize(p)
    return list(line.render(CONSOLE))


def _cell(rng: random.Random):
    kind = rng.randrange(7)
    word = rng.choice(["", "-", "7", "actor_rollout", "critic_update_critic", "10.0.0.12", "ALIVE", "日本語名前"])
    if kind == 0:
        return word
    if kind == 1:
        return Text(word, style=rng.choice(["", "bold red", "green", "grey50", "bold"]))
    if kind == 2:
        return bar(rng.choice([None, 0.0, 3.0, 45.5, 99.0, 100.0]), 7, rng.choice(["gpu", "mem"]), dim=rng.random() < .2)
    if kind == 3:
        return mem_bar(rng.choice([None, 5 << 30]), rng.choice([None, 0, 80 << 30]), 7)
    if kind == 4:  # a mark, then the stall's tags (the WHY column)
        t = Text("◆ straggler", style="bold magenta")
        t.append(", ")
        t.append("peers 40s", style="bold red")
        return t
    if kind == 5:  # spans with gaps no style covers
        t = Text("└ ")
        t.append(word or "x", style="grey50")
        t.append(" tail")
        return t
    return Text(word)


def test_lines_match_text_render_for_random_cells() -> None:
    rng = random.Random(20261207)
    rs = RowSegments(CONSOLE)
    for _ in range(3000):
        n = rng.randrange(1, 9)
        cells = [_cell(rng) for _ in range(n)]
        widths = [rng.choice([1, 2, 3, 6, 12, 20]) for _ in range(n)]
        post = rng.choice([[], [CURSOR], [GROUP], [GROUP, CURSOR]])
        want = _by_text(cells, widths, post)
        got, width = rs.line(cells, widths, (post[0] + post[1] if len(post) == 2 else post[0]) if post else None)
        assert got == want, (cells, widths, post)
        assert width == Segment.get_line_length(want)


def test_cells_drawn_in_parts_are_cached_and_bounded() -> None:
    rs = RowSegments(CONSOLE)
    cells = [bar(45.0, 7, "gpu"), "x"]
    first, _ = rs.line(cells, [12, 3])
    again, _ = rs.line([bar(45.0, 7, "gpu"), "x"], [12, 3])
    assert first == again and len(rs._parts) == 1
    for v in range(5000):
        rs.line([bar(v / 50, 7, "gpu", label=str(v))], [12])
    assert len(rs._parts) <= 4096
