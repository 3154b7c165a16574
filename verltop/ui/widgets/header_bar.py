"""The header: cluster totals, the verl phase, the progress clock and the data's freshness.

Built from items that never split: on a narrow terminal an item moves to the next line whole, so nothing
runs into its neighbour.
"""

from __future__ import annotations

import io
import operator
import time

from rich.console import Console
from rich.text import Text

from verltop.engine.base import Playback
from verltop.model import Problem, Snapshot
from verltop.text.cells import age, duration, size
from verltop.text.training import header_metrics, header_tag
from verltop.ui.render import bar
from verltop.ui.widgets.text_line import TextLine

GAP = "   "
MAX_LINES = 6
NARROW = 100


def _item(*parts: tuple[str, str]) -> Text:
    t = Text()
    for s, style in parts:
        t.append(s, style=style)
    return t


def playback_item(p: Playback) -> Text:
    """``REPLAY ▶ ×4  2026-11-29 03:12:58 CET  +12:30 / 45:00``: the recorded time and where it stands."""
    state = "END" if p.ended else "‖" if p.paused else "▶"
    t = _item((f" REPLAY {state} ×{p.speed:g} ", "bold reverse cyan"))
    t.append(" " + time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(p.at_s)), style="bold cyan")
    t.append(f"  +{duration(p.at_s - p.start_s)} / {duration(p.end_s - p.start_s)}", style="cyan")
    return t


_STALLS = operator.attrgetter("stalls")
_STALLED: list = [None, 0]  # the last snapshot's rows and how many are stalled: the header redraws every second


def _stalled(actors: tuple) -> int:
    if _STALLED[0] is not actors:
        _STALLED[:] = [actors, sum(map(bool, map(_STALLS, actors)))]
    return _STALLED[1]


def header_items(s: Snapshot | None, paused: bool, problem: Problem | None = None, now: float | None = None,
                 playback: Playback | None = None, narrow: bool = False, note: bool = True) -> list[list[Text]]:
    """The header's items, in rows that are kept apart: identity and counts; load, phase and progress;
    freshness and errors. ``now`` (later than the snapshot) moves the progress clock and the data's age on.
    A replay's ``playback`` (the recorded time) comes first."""
    replay = [[playback_item(playback)]] if playback is not None else []
    if s is None:
        msg = problem.text if problem else "connecting to the dashboard…"
        return [*replay, [_item(("verltop ", "bold"), (msg, "bold yellow" if problem else "grey70"))]]
    late = max(0.0, now - s.taken_at) if now is not None else 0.0
    alive_nodes = [n for n in s.nodes if n.state == "ALIVE"]
    gpus = [g for n in alive_nodes for g in n.gpus]
    cpu_vals = [n.cpu_percent for n in alive_nodes if n.cpu_percent is not None]
    mem_used = sum(n.mem_used_bytes or 0 for n in alive_nodes)
    mem_total = sum(n.mem_total_bytes or 0 for n in alive_nodes)

    # a narrow terminal: the address without its scheme, so that "N stalled" does not push a line down
    addr = s.address.split("://", 1)[-1] if narrow else s.address
    first = [_item(("verltop ", "bold"), (addr, "grey70"))]
    nodes = _item((f"nodes {len(alive_nodes)}", "bold"))
    if len(alive_nodes) != len(s.nodes):
        nodes.append(f" ({len(s.nodes) - len(alive_nodes)} dead)", style="red")
    first.append(nodes)
    g = _item((f"GPUs {len(gpus)}", "bold"))
    utils = [x.util_percent for x in gpus if x.util_percent is not None]
    if utils:
        g.append(" ")
        g.append_text(bar(sum(utils) / len(utils), 8, "gpu"))
    first.append(g)
    actors = _item(("actors ", "bold"), (str(len(s.actors)), ""))
    stalled = _stalled(s.actors)
    if stalled:
        actors.append(f"  {stalled} stalled", style="bold red")
    first.append(actors)
    if not gpus and s.gpu_note and note:  # why there are none: last, and only where it fits (header_text)
        first.append(_item((s.gpu_note, "grey50")))

    second = [_item(("CPU ", "bold")), _item(("MEM ", "bold"))]
    second[0].append_text(bar(sum(cpu_vals) / len(cpu_vals) if cpu_vals else None, 8, "cpu"))
    second[1].append_text(bar(mem_used / mem_total * 100 if mem_total else None, 8, "mem",
                              label=f"{size(mem_used)}/{size(mem_total)}" if mem_total else None))
    store = _object_store(alive_nodes)
    if store is not None:
        second.append(store)
    second.append(_item(("phase ", "bold"), (s.phase or "-", "bold magenta" if s.phase else "grey50")))
    if s.steps:
        second.append(_step_item(s))
    prog = _item(("last progress ", "bold"))
    if s.progress_s is None:
        prog.append("-", style="grey50")
    else:
        p = s.progress_s + late
        prog.append(f"{age(p)} ago", style="bold red" if p > 60 else "green")
    second.append(prog)
    if paused:
        second.append(_item(("PAUSED", "bold reverse yellow")))

    third: list[Text] = []
    stale = s.stale_sources(late)
    if stale:
        oldest = max(stale, key=lambda x: x.age_s or 0)
        third.append(_item((f"{oldest.name} data {age((oldest.age_s or 0) + late)} old (stale)", "bold yellow")))
    third += [_item((e, "yellow")) for e in _errors(s)]
    if s.truncated:
        third.append(_item((s.truncated, "yellow")))
    return [row for row in (*replay, first, second, _training_items(s), third) if row]


def _training_items(s: Snapshot) -> list[Text]:
    """verl's latest logged metrics and the newest anomaly's tag (h: the health screen)."""
    if s.training is None:
        return []
    items = [_item((header_metrics(s.training), "cyan"))]
    tag = header_tag(s.training)
    if tag:
        items.append(_item((f"⚠ {tag}", "bold red"), ("  h: health", "grey50")))
    return items


def _errors(s: Snapshot) -> list[str]:
    """Each source's error once: sources that fail alike share a line (``actors, tasks, nodes: …``)."""
    by_text: dict[str, list[str]] = {}
    for src in s.sources:
        if src.error:
            by_text.setdefault(src.error.text, []).append(src.name)
    return [f"{', '.join(names)}: {text}" for text, names in by_text.items()]


def _object_store(nodes: list) -> Text | None:
    """``OBJ 60.0M/80.0M spilled 60.0M`` over the nodes whose raylet reported its store (from 1 % used)."""
    known = [n for n in nodes if n.object_store_total_bytes]
    if not known:
        return None
    used = sum(n.object_store_used_bytes or 0 for n in known)
    total = sum(n.object_store_total_bytes or 0 for n in known)
    spilled = sum(n.object_store_spilled_bytes or 0 for n in known)
    if used < total / 100 and not spilled:
        return None  # an idle store says nothing worth a place in the header
    t = _item(("OBJ ", "bold"))
    t.append_text(bar(used / total * 100 if total else None, 6, "mem", label=f"{size(used)}/{size(total)}"))
    if spilled:
        t.append(f" spilled {size(spilled)}", style="bold yellow")
    return t


def _step_item(s: Snapshot) -> Text:
    """``step 123 · 10.2s/step`` (median of the last ten finished steps)."""
    from verltop.analysis.steps import median_step_s

    med = median_step_s(s.steps)
    t = _item(("step ", "bold"), (str(s.steps[-1].index), ""))
    if med is not None:
        t.append(f" · {duration(med)}/step", style="cyan")
    return t


def _wrapped(item: Text, width: int) -> list[Text]:
    """An item longer than a line (an error's sentence) on as many lines as it needs, cut between words."""
    console = Console(width=width, file=io.StringIO(), color_system=None)
    return [line for line in item.wrap(console, width, overflow="ellipsis")]


def flow(rows: list[list[Text]], width: int, max_lines: int = MAX_LINES) -> Text:
    """Items into lines of at most ``width`` cells, ``GAP`` apart; an item longer than a line wraps onto
    lines of its own. Each row of items starts a new line."""
    lines: list[Text] = []
    for row in rows:
        cur: Text | None = None
        for item in row:
            if item.cell_len > width:
                if cur is not None:
                    lines.append(cur)
                *whole, item = _wrapped(item, width)
                lines += whole
                cur = None
            if cur is not None and cur.cell_len + len(GAP) + item.cell_len <= width:
                cur.append(GAP)
                cur.append_text(item)
                continue
            if cur is not None:
                lines.append(cur)
            cur = item.copy()
        if cur is not None:
            lines.append(cur)
    if len(lines) > max_lines:
        lines = [*lines[:max_lines - 1], Text(f"… {len(lines) - max_lines + 1} more lines", style="grey50")]
    return Text("\n").join(lines)


def header_text(s: Snapshot | None, paused: bool, width: int = 160, problem: Problem | None = None,
                now: float | None = None, playback: Playback | None = None) -> Text:
    """The header for ``width`` cells: on a narrow terminal the address loses its scheme; why there are no GPUs
    is said only where it does not cost a line (so "N stalled" never pushes the table down)."""
    width, narrow = max(20, width), width < NARROW
    full = flow(header_items(s, paused, problem, now, playback, narrow), width)
    if s is None or s.gpu_note is None:
        return full
    # what only explains (why there are no GPUs) never costs the header a line
    bare = flow(header_items(s, paused, problem, now, playback, narrow, note=False), width)
    return bare if bare.plain.count("\n") < full.plain.count("\n") else full


class HeaderBar(TextLine):
    """As many lines as its items need at this width; repainted only when its text changes."""

    def show_snapshot(self, s: Snapshot | None, paused: bool, problem: Problem | None = None,
                      now: float | None = None, playback: Playback | None = None) -> None:
        text = header_text(s, paused, self.size.width or 160, problem, now, playback)
        lines = text.plain.count("\n") + 1
        if self.styles.height is None or self.styles.height.value != lines:
            self.styles.height = lines
        self.show(text)
        late = max(0.0, now - s.taken_at) if s is not None and now is not None else 0.0
        stale = s is not None and (bool(s.errors) or bool(s.stale_sources(late)))
        self.set_class(stale, "-stale")
