"""The layer rules, enforced: each layer imports only the layers below it; arrows point one way.

- ``model`` (a package by domain), ``convert``, ``codec``: plain data, number coercion and the model's full JSON
  round trip; they import nothing else of verltop.
- ``sources``: fetch and parse only; the model and themselves; never textual or rich.
- ``analysis``: pure; the model and itself (no text: it returns data, reasons too); no I/O libraries.
- ``text``: every sentence, cell and JSON view made from data; the model and analysis.
- ``engine``: sources, analysis and text; never ui, textual or rich.
- ``ui``: the engine, analysis and text; never a source, nor an I/O library.
- ``cli`` on top.
- no import cycles between modules: lazy (function-level) and ``if TYPE_CHECKING:`` imports included.
- ``ray`` only in ``demo``, the remote probe and the code the probe runs on nodes (inside a Ray worker);
  not on the TUI's path at all.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).parent.parent / "verltop"

BASE = ("verltop.model", "verltop.convert", "verltop.codec")
IO_LIBS = ("aiohttp", "pynvml", "psutil", "subprocess", "ray", "socket", "http", "urllib")


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every module a file imports, anywhere in it: in functions and under ``if TYPE_CHECKING:`` too (a
    type-only import is still an arrow between layers, and hides a circle as well as any other)."""
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:  # `from verltop.engine import nccl_ras` imports the module, not the package
                sub = f"{node.module}.{a.name}"
                out.add(sub if _is_module(sub) else node.module)
    return out


def _is_module(name: str) -> bool:
    if not name.startswith("verltop."):
        return False
    p = PKG.parent.joinpath(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def files(sub: str) -> list[Path]:
    return sorted((PKG / sub).rglob("*.py")) if (PKG / sub).is_dir() else [PKG / f"{sub}.py"]


def allowed(m: str, prefixes: tuple[str, ...]) -> bool:
    return not m.startswith("verltop") or m.startswith(prefixes)


def test_base_modules_import_nothing_of_verltop_but_each_other():
    for name in ("model", "convert", "codec"):
        for f in files(name):
            for m in imports(f):
                assert allowed(m, BASE), (f, m)


def test_sources_fetch_and_parse_only():
    for f in files("sources"):
        for m in imports(f):
            assert allowed(m, (*BASE, "verltop.sources")), (f, m)
            assert not m.startswith(("textual", "rich")), (f, m)


def test_analysis_is_pure():
    for f in files("analysis"):
        for m in imports(f):
            assert allowed(m, (*BASE, "verltop.analysis")), (f, m)
            assert m.split(".")[0] not in (*IO_LIBS, "textual", "rich", "os", "time", "asyncio"), (f, m)


# the model's "why" types: analysis fills them with facts, verltop.text says them
REASONS = ("ChainEnd", "EndWhy", "Suspect", "SuspectWhy", "Where", "Fate", "Peers")


def test_analysis_gives_reasons_as_data():
    """No chain end or suspect is made in analysis with a sentence built there (an f-string or a ``+`` of
    strings): its reasons are facts, put in words by ``verltop.text.chains`` and ``verltop.text.suspects``."""
    for f in files("analysis"):
        for node in ast.walk(ast.parse(f.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REASONS):
                continue
            for arg in (*node.args, *(k.value for k in node.keywords)):
                built = [n for n in ast.walk(arg) if isinstance(n, ast.JoinedStr)
                         or (isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Mod)))]
                assert not built, f"{f.name}:{node.lineno}: {node.func.id}(...) is given a sentence"


def _phrases(path: Path) -> set[str]:
    """The string pieces of a module (f-strings' literal parts too) that are words, not identifiers."""
    return {n.value.strip() for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and " " in n.value.strip()
            and len(n.value.strip()) >= 12}


def test_the_words_of_reasons_live_in_text_only():
    said = set().union(*(_phrases(PKG / "text" / f"{m}.py") for m in ("chains", "suspects", "ras")))
    for f in files("analysis"):
        assert not _phrases(f) & said, (f, sorted(_phrases(f) & said))


def test_text_is_made_from_the_model_and_analysis():
    for f in files("text"):
        for m in imports(f):
            assert allowed(m, (*BASE, "verltop.analysis", "verltop.text")), (f, m)
            assert m.split(".")[0] not in (*IO_LIBS, "textual", "rich", "os", "asyncio"), (f, m)


def test_engine_never_draws():
    for f in files("engine"):
        for m in imports(f):
            assert allowed(m, (*BASE, "verltop.sources", "verltop.analysis", "verltop.text", "verltop.engine")), (f, m)
            assert not m.startswith(("textual", "rich")), (f, m)


def test_ui_talks_to_the_engine_not_to_sources():
    for f in files("ui"):
        for m in imports(f):
            assert not m.startswith("verltop.sources"), (f, m)
            assert allowed(m, (*BASE, "verltop.engine", "verltop.analysis", "verltop.ui", "verltop.text")), (f, m)
            assert m.split(".")[0] not in IO_LIBS, (f, m)


def test_no_import_cycles():
    graph: dict[str, set[str]] = {}
    for f in PKG.rglob("*.py"):
        name = module_name(f)
        graph[name] = {m for m in imports(f) if m.startswith("verltop.") and m != name}
    known = set(graph)
    for deps in graph.values():
        deps &= known
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph[n]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " → ".join([*stack[stack.index(d):], d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)


def test_ray_only_in_demo_and_probe():
    for f in PKG.rglob("*.py"):
        # node_check runs inside the probe's Ray worker on each node (it may use Ray's own copy of pynvml there)
        if "demo" in f.parts or f.name.startswith("probe") or f.name == "node_check.py":
            continue
        assert not any(m.split(".")[0] == "ray" for m in imports(f)), f


def test_tui_path_does_not_import_ray_or_torch():
    code = ("import sys, verltop.cli, verltop.ui.app, verltop.ui.screens.main, verltop.ui.screens.stacks, "
            "verltop.ui.screens.help, verltop.ui.screens.nodes, verltop.engine, verltop.engine.monitor, "
            "verltop.engine.doctor, verltop.sources.stacks, verltop.sources.node_check; "
            "print(sorted(m for m in ('ray', 'torch', 'verl') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_dump_sends_its_first_reads_before_importing_the_engine():
    """``verltop dump`` starts fast on purpose: the engine declares its first reads in a light module, sent
    before the monitor, analysis or aiohttp are imported."""
    code = ("import sys, verltop.sources.wire as w\n"
            "def stop(*a, **k):\n"
            "    print(sorted(m for m in sys.modules if m.startswith('verltop.') or m == 'aiohttp'))\n"
            "    raise SystemExit(0)\n"
            "w.Prefetch.__init__ = stop\n"
            "from verltop.cli import main\n"
            "main(['dump', '--address', 'http://127.0.0.1:9', '--timeout', '1'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PKG.parent).stdout
    assert ast.literal_eval(out) == ["verltop.cli", "verltop.cli_memory", "verltop.cli_watch", "verltop.engine",
                         "verltop.engine.prefetch", "verltop.logsetup", "verltop.sources", "verltop.sources.config", "verltop.sources.reads",
                         "verltop.sources.wire"]


def test_no_module_over_600_lines():
    """Small rooms: a module past 600 lines holds several jobs; split it by what each part holds."""
    big = {str(f.relative_to(PKG.parent)): n for f in PKG.rglob("*.py") if (n := len(f.read_text().splitlines())) > 600}
    assert not big, big


def test_a_snapshot_builds_no_dump_or_ras_model():
    """A snapshot's engine and JSON contract leave the stack analysis and the RAS model unimported: their
    dataclasses (~0.7 ms each to build) are a dump's and an answer's cost, not every snapshot's."""
    code = ("import sys, verltop.engine.oneshot, verltop.engine.monitor, verltop.text.contract\n"
            "print(sorted(m for m in ('verltop.model.stacks', 'verltop.model.ras', 'verltop.analysis.merge',\n"
            "                         'verltop.analysis.ras', 'verltop.text.chains') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PKG.parent).stdout
    assert ast.literal_eval(out) == []
