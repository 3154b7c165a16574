"""The layer rules of the design, enforced: arrows point right; ray never on the TUI's path."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).parent.parent / "verltop"


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_analysis_imports_only_model_and_stdlib():
    for f in (PKG / "analysis").glob("*.py"):
        for m in imports(f):
            top = m.split(".")[0]
            assert top != "textual" and top != "aiohttp" and top != "ray" and top != "psutil", (f, m)
            if top == "verltop":
                assert m.startswith(("verltop.model", "verltop.analysis")), (f, m)


def test_ui_never_fetches():
    for f in (PKG / "ui").rglob("*.py"):
        for m in imports(f):
            assert m.split(".")[0] not in ("aiohttp", "pynvml", "psutil", "subprocess", "ray"), (f, m)


def test_sources_never_draw():
    for f in (PKG / "sources").glob("*.py"):
        for m in imports(f):
            assert not m.startswith(("textual", "verltop.ui", "rich")), (f, m)


def test_ray_only_in_demo_and_probe():
    for f in PKG.rglob("*.py"):
        if "demo" in f.parts or f.name == "probe.py":
            continue
        assert not any(m.split(".")[0] == "ray" for m in imports(f)), f


def test_tui_path_does_not_import_ray_or_torch():
    code = ("import sys, verltop.cli, verltop.ui.app, verltop.ui.screens.main, verltop.ui.screens.stacks, "
            "verltop.sources.poller, verltop.sources.stacks; "
            "print(sorted(m for m in ('ray', 'torch', 'verl') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
