"""The doctor in words: a check's value as a cell, the one-line summary, the stages of a run, and the text
table of ``verltop doctor``."""

from __future__ import annotations

from verltop.analysis.doctor import cell_marks
from verltop.model import CheckValue, DoctorReport
from verltop.text.cells import size

# what a doctor run is doing, by its progress stage ("probe" counts the nodes that answered)
STAGES = {"nodes": "listing nodes", "connect": "joining the Ray cluster (first time: a few seconds)",
          "path": "checking the shared directory"}


def profiling_note(enabled: bool | None) -> str | None:
    """The dashboard's profiling, when it is off: what verltop does instead, and the fix."""
    if enabled is not False:
        return None
    return ("the dashboard's profiling is off (Ray ≥ 2.56 by default): verltop dumps ranks on other nodes "
            "through its probe actors (ray in verltop's Python); to let the dashboard do it, start the head "
            "with RAY_DASHBOARD_ENABLE_PROFILING=1")


def stage_text(stage: str, done: int, total: int) -> str | None:
    """What a doctor run is doing, for a progress line (``None`` for a stage that says nothing)."""
    if stage == "probe":
        return f"{done}/{total} answered"
    return STAGES.get(stage)


def value_text(check: str, v: CheckValue) -> str:
    """A value as the table shows it: sizes in bytes as ``76.0G``, the clock offset as ``+0.003s``."""
    if v is None:
        return "-"
    if check.endswith("_bytes") and isinstance(v, int | float):
        return size(v)
    if check == "clock.offset_s" and isinstance(v, int | float):
        return f"{round(v, 3) or 0.0:+.3f}s"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def doctor_summary(r: DoctorReport) -> str:
    """One line: how many nodes, mismatches and problems (and how long it took)."""
    took = f" in {r.elapsed_s:.1f} s" if r.elapsed_s is not None else ""
    n = len(r.nodes)
    if r.ok:
        return f"{n} node{'s' if n != 1 else ''} checked{took}: they agree and no problem was found"
    return (f"{n} node{'s' if n != 1 else ''} checked{took}: {len(r.mismatches)} mismatch"
            f"{'es' if len(r.mismatches) != 1 else ''}, {len(r.problems)} problem{'s' if len(r.problems) != 1 else ''}")


DOCTOR_CELL_WIDTH = 32
_ANSI = {"mismatch": ("\x1b[1;31m", "\x1b[0m"), "problem": ("\x1b[33m", "\x1b[0m")}
_MARK = {"mismatch": " *", "problem": " !"}


def _second_line(label: str, hostname: str | None, head: bool) -> str:
    """Under a node's label: its hostname when that says something more, and whether it is the head."""
    name = hostname if hostname and hostname != label else ""
    return f"{name} (head)".strip() if head else (name or "-")


def doctor_text(r: DoctorReport, color: bool = False) -> str:
    """The doctor's table (a column per node, a row per check; values that differ from the majority in red,
    or marked ``*`` without colour; ``!`` a value over its limit), then mismatches and problems with fixes."""
    marks = cell_marks(r)

    def cell(check: str, label: str, v: object) -> tuple[str, str | None]:
        t = value_text(check, v)  # type: ignore[arg-type]
        if len(t) > DOCTOR_CELL_WIDTH:
            t = t[:DOCTOR_CELL_WIDTH - 1] + "…"
        m = marks.get((check, label))
        return (t if color or m is None else t + _MARK[m]), m

    header = [["CHECK", *(n.label for n in r.nodes)],
              ["", *(_second_line(n.label, n.hostname, n.is_head) for n in r.nodes)]]
    rows = [[(c, None), *(cell(c, n.label, n.get(c)) for n in r.nodes)] for c in r.checks]
    widths = [max(len(x) for x in col) for col in zip(*(h for h in header), *([t for t, _ in row] for row in rows),
                                                      strict=True)]

    def line(cells: list[tuple[str, str | None]]) -> str:
        out = []
        for (t, m), w in zip(cells, widths, strict=True):
            pad = t.ljust(w)
            out.append(f"{_ANSI[m][0]}{pad}{_ANSI[m][1]}" if color and m else pad)
        return "  ".join(out).rstrip()

    lines = [f"verltop doctor: {doctor_summary(r)}" + (f"  (shared directory {r.path})" if r.path else ""), ""]
    lines += [line([(t, None) for t in h]) for h in header]
    lines += [line(row) for row in rows]
    if not color and marks:
        lines.append("* differs from the majority   ! a problem (below)")
    for title, found in (("MISMATCHES", r.mismatches), ("PROBLEMS", r.problems)):
        if found:
            lines += ["", f"{title} ({len(found)})"]
            for f in found:
                lines.append(f"  - {f.problem.message}")
                if f.problem.remedy:
                    lines.append(f"    fix: {f.problem.remedy}")
    for n in r.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)
