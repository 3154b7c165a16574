"""py-spy's text dump (what the dashboard's /worker/traceback returns), from real captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from verltop.sources.pyspy import parse_text

RUN = Path(__file__).parents[1] / "fixtures" / "real-gpu-run"
NATIVE = sorted(RUN.glob("*/pyspy_rank*.native.txt"))


@pytest.mark.parametrize("path", NATIVE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_frame_line_is_a_frame_with_its_location(path):
    """A frame's location is the last parenthesised part of its line: templated C++ names carry " (" of their
    own (``__nv_dl_tag<void (at::native::sum_functor<...>::*)(...)>``) and must not split there."""
    text = path.read_text()
    threads, err = parse_text(text)
    assert err is None
    frames = [f for t in threads for f in t.frames]
    assert len(frames) == sum(1 for ln in text.splitlines() if ln.startswith("    "))
    for f in frames:
        assert f.file and "(" not in f.file and ")" not in f.file and " " not in f.file, f


def test_cpp_template_frame_keeps_its_whole_name():
    threads, _ = parse_text((RUN / "x2-straggler" / "pyspy_rank0.native.txt").read_text())
    (f,) = [f for f in threads[0].frames if "gpu_reduce_kernel" in f.func]
    assert f.file == "libtorch_cuda.so" and f.line is None
    assert f.func.startswith("at::native::gpu_reduce_kernel<float, float, 4, 4,") and "sum_functor" in f.func
    assert f.func.endswith("double>")
