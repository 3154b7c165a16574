"""The header on a narrow terminal: a stall never pushes the table down, an error wraps rather than being cut."""

from __future__ import annotations

from dataclasses import replace

from tests.engine.helpers import synthetic_snapshots
from verltop.model import Problem, SourceStatus
from verltop.ui.widgets.header_bar import header_text

SNAPS = synthetic_snapshots(60)
NOTE = "no NVML: NVIDIA driver library not found (no GPU here)"


def no_gpu(i: int):
    s = SNAPS[i]
    return replace(s, gpu_note=NOTE, nodes=tuple(replace(n, gpus=()) for n in s.nodes))


def test_a_stall_costs_no_line():
    for width in (78, 118):
        before, after = header_text(no_gpu(5), False, width).plain, header_text(no_gpu(30), False, width).plain
        assert "4 stalled" in after and before.count("\n") == after.count("\n"), (before, after)
    assert NOTE in header_text(no_gpu(5), False, 118).plain  # where it fits, the header says why no GPU
    assert header_text(no_gpu(30), False, 78).plain.startswith("verltop 127.0.0.1:8265 ")  # no scheme


def test_sources_failing_alike_share_a_wrapped_line():
    err = Problem("unreachable", "dashboard not reachable at http://127.0.0.1:9: connection refused; is Ray "
                  "running? use --address or RAY_DASHBOARD_ADDRESS")
    s = SNAPS[30]
    s = replace(s, sources=tuple(SourceStatus(n, 1.0, err, 5.0) for n in ("actors", "tasks", "nodes")))
    lines = header_text(s, False, 78).plain.splitlines()
    said = [ln for ln in lines if "not reachable" in ln or "RAY_DASHBOARD_ADDRESS" in ln]
    assert said[0].startswith("actors, tasks, nodes: dashboard not reachable") and len(said) == 2, lines
    assert all(len(ln) <= 78 for ln in lines) and "…" not in "".join(said)
