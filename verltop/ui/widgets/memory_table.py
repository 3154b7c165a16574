"""Memory by phase: one row per rank and phase (the last step it ran in), its peak GPU memory and RSS, the
samples they rest on, and its end-of-phase memory over the last steps as a sparkline. Keyed by actor and
phase; rows updated in place."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable

from verltop.model import PHASES, PhaseMemory
from verltop.text.memory_rows import NO_SAMPLES, phase_cell
from verltop.ui.widgets.sparkline import BLOCKS

COLUMNS = (("group", "GROUP"), ("rank", "RANK"), ("phase", "PHASE"), ("step", "STEP"), ("gpu", "GPU PEAK"),
           ("rss", "RSS PEAK"), ("samples", "N"), ("trend", "LAST STEPS"))
TREND_STEPS = 12
MIN_SAMPLES = 3  # fewer: the peak may have been missed (the screen says so)


def _phase_order(phase: str) -> int:
    return PHASES.index(phase) if phase in PHASES else len(PHASES)


def memory_rows(by_phase: Sequence[PhaseMemory]) -> list[tuple[str, PhaseMemory, list[PhaseMemory]]]:
    """``(key, the latest entry, every entry oldest first)`` per actor and phase, in group, rank, phase order."""
    acc: dict[str, list[PhaseMemory]] = {}
    for p in by_phase:
        acc.setdefault(f"{p.actor_id}|{p.phase}", []).append(p)
    out = []
    for k, ps in acc.items():
        ps.sort(key=lambda p: p.step)
        out.append((k, ps[-1], ps))
    out.sort(key=lambda r: (r[1].worker_group or "~", r[1].rank if r[1].rank is not None else 1 << 30,
                            r[1].actor_name or "", _phase_order(r[1].phase)))
    return out


def trend_points(ps: list[PhaseMemory], kind: str | None = None) -> list[tuple[int, float | None]]:
    """What the phase ended at, step after step: of ``kind`` when given (the kind that grows), else GPU memory
    where any is held, else RSS."""
    gpu = kind == "gpu" if kind else any((p.end_gpu_bytes or p.peak_gpu_bytes) for p in ps)
    pts = []
    for p in ps[-TREND_STEPS:]:
        v = (p.end_gpu_bytes if p.end_gpu_bytes is not None else p.peak_gpu_bytes) if gpu else (
            p.end_rss_bytes if p.end_rss_bytes is not None else p.peak_rss_bytes)
        pts.append((p.step, float(v) if v is not None and p.samples else None))
    return pts


def memory_spark(points: list[tuple[int, float | None]], width: int) -> Text:
    """Block characters between the lowest and highest value; a spread under 2 % of the highest (noise) is a
    flat line; ``?`` where a step had no sample."""
    vals = [v for _, v in points if v is not None]
    hi, lo = max(vals, default=0.0), min(vals, default=0.0)
    flat = hi - lo < max(hi * 0.02, float(1 << 20))
    t = Text(" " * max(0, width - len(points)))
    for _, v in points[-width:]:
        if v is None:
            t.append("?", style="grey50")
        else:
            t.append(BLOCKS[0 if flat else min(7, int((v - lo) / (hi - lo) * 7.999))], style="cyan")
    return t


class MemoryTable(DataTable):
    """``wide``: the GROUP column adds the role to the worker group (the sentences name the group)."""

    wide = False
    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def cells(self, last: PhaseMemory, ps: list[PhaseMemory], growing: str | None) -> list[Text]:
        few = last.samples < MIN_SAMPLES
        n = Text(str(last.samples), justify="right", style="yellow" if few else "")
        trend = memory_spark(trend_points(ps, growing), TREND_STEPS)
        if growing:
            trend.stylize("bold yellow")
        group = last.worker_group or last.role or "-"
        if self.wide and last.worker_group and last.role:
            group = f"{last.worker_group} {last.role}"
        return [Text(group), Text("-" if last.rank is None else str(last.rank),
                justify="right"), Text(last.phase, style="bold yellow" if growing else ""),
                Text(str(last.step), justify="right"), Text(phase_cell(last, "gpu"), justify="right"),
                Text(phase_cell(last, "host"), justify="right"), n, trend]

    def show(self, by_phase: Sequence[PhaseMemory], growing: dict[tuple[str, str], str]) -> None:
        """``growing``: (actor_id, phase) → the kind of memory it keeps step after step (marked, its trend).
        A row whose figures did not change is not drawn again (a thousand ranks' rows are mostly unchanged)."""
        if (by_phase is getattr(self, "_shown_by", None) and growing == getattr(self, "_shown_growing", None)
                and self.wide == getattr(self, "_shown_wide", None)):
            return
        if self.wide != getattr(self, "_shown_wide", None):
            self.__dict__.pop("_sigs", None)  # every row's GROUP cell changes
        self._shown_by, self._shown_growing, self._shown_wide = by_phase, dict(growing), self.wide
        sigs: dict[str, tuple] = self.__dict__.setdefault("_sigs", {})
        rows = memory_rows(by_phase)
        keys = {k for k, _, _ in rows}
        with self.app.batch_update():
            for rk in [rk for rk in self.rows if rk.value not in keys]:
                self.remove_row(rk)
                sigs.pop(rk.value or "", None)
            added = False
            for k, last, ps in rows:
                kind = growing.get((last.actor_id, last.phase))
                sig = (last, kind, tuple(trend_points(ps, kind)), self.wide)
                if sigs.get(k) == sig and k in self.rows:
                    continue
                sigs[k] = sig
                cells = self.cells(last, ps, kind)
                if k in self.rows:
                    for (col, _), new in zip(COLUMNS, cells, strict=True):
                        if self.get_cell(k, col) != new:
                            self.update_cell(k, col, new)
                else:
                    self.add_row(*cells, key=k)
                    added = True
            if added:
                order = {k: i for i, (k, _, _) in enumerate(rows)}
                self._place(order)

    def _place(self, order: dict[str, int]) -> None:
        from textual._two_way_dict import TwoWayDict

        want = sorted(self.rows, key=lambda rk: order.get(rk.value or "", 1 << 30))
        self._row_locations = TwoWayDict({rk: i for i, rk in enumerate(want)})
        self._update_count += 1
        self.refresh()


__all__ = ["NO_SAMPLES", "MemoryTable", "memory_rows"]
