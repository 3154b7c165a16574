"""The README and docs/ against the code: the keys table is the keymap's, every relative link leads to a file,
every picture is one the snapshot tests compare, and the front page stays a front page.

``python -m tests.test_docs`` rewrites the README's keys table from ``verltop/ui/keymap.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from textual.binding import Binding

from verltop.ui import keymap
from verltop.ui.screens.help import key_text

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
BEGIN, END = "<!-- keys: generated from verltop/ui/keymap.py by `python -m tests.test_docs` -->", "<!-- keys end -->"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SNAPSHOTS = ROOT / "tests" / "snapshots" / "__snapshots__"


def _rows(bindings: list[Binding]) -> list[str]:
    """One row per thing a key does (keys doing the same thing share it), as the help screen groups them."""
    seen: dict[str, list[str]] = {}
    for b in bindings:
        what = b.tooltip or b.description
        if what:
            seen.setdefault(what, []).append(key_text(b))
    cell = lambda s: s.replace("|", "\\|")  # noqa: E731
    return [f"| {cell(' / '.join(f'`{k}`' for k in dict.fromkeys(keys)))} | {cell(what)} |"
            for what, keys in seen.items()]


def keys_table() -> str:
    """The README's keys: the main screen's and a replay's, from the keymap; the other screens' are in `?`."""
    (_, main), (replay_title, replay) = keymap.SECTIONS[0], keymap.SECTIONS[1]
    out = [BEGIN, "", "| key | what |", "| --- | --- |", *_rows(main), "", f"{replay_title}:", "",
           "| key | what |", "| --- | --- |", *_rows(replay), "", END]
    return "\n".join(out)


def readme_keys(text: str) -> str:
    a, b = text.index(BEGIN), text.index(END) + len(END)
    return text[a:b]


def test_readme_keys_are_the_keymaps():
    assert readme_keys(README.read_text()) == keys_table(), "run `python -m tests.test_docs` to regenerate"


def links(path: Path) -> list[str]:
    """Relative links and pictures of a markdown file (code spans and fenced blocks left out)."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [u for u in LINK.findall(text) if not re.match(r"[a-z]+:", u) and not u.startswith("#")]


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a markdown file's headings."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_every_relative_link_leads_to_a_file():
    """And to a heading of it, where the link names one."""
    missing = []
    for md in [README, *DOCS]:
        for url in links(md):
            file, _, anchor = unquote(url).partition("#")
            target = (md.parent / file).resolve()
            if not target.exists() or (anchor and target.suffix == ".md" and anchor not in anchors(target)):
                missing.append(f"{md.relative_to(ROOT)}: {url}")
    assert not missing, missing


def test_pictures_are_the_snapshot_tests_svgs():
    """One source: every picture in the README and docs/ is an SVG that a snapshot test compares."""
    for md in [README, *DOCS]:
        for url in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", md.read_text()):
            target = (md.parent / unquote(url)).resolve()
            assert target.suffix == ".svg" and SNAPSHOTS in target.parents, f"{md.name}: {url}"


def test_readme_is_a_front_page():
    assert len(README.read_text().splitlines()) <= 300


def _rewrite() -> None:
    text = README.read_text()
    README.write_text(text.replace(readme_keys(text), keys_table()))


if __name__ == "__main__":
    _rewrite()
