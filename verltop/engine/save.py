"""Writing dumps: mode 0600, never over an existing file unless asked; the same body from the TUI and the CLI."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from verltop.model import DumpReport
from verltop.text.contract import dump_json
from verltop.text.dump import dump_text, full_stacks_text


def write_private(path: str | Path, text: str, overwrite: bool = False) -> Path:
    """Create ``path`` with mode 0600. Raises FileExistsError rather than overwrite (unless asked)."""
    p = Path(path).expanduser()
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    fd = os.open(p, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode on O_TRUNC; make it private anyway
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fd = -1
            f.write(text)
    finally:
        if fd != -1:
            os.close(fd)
    return p


def default_dump_paths(directory: str | Path = ".", now: float | None = None) -> tuple[Path, Path]:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now or time.time()))
    d = Path(directory)
    base = d / f"verltop-dump-{stamp}"
    n = 1
    while base.with_suffix(".txt").exists() or base.with_suffix(".json").exists():
        n += 1
        base = d / f"verltop-dump-{stamp}-{n}"
    return base.with_suffix(".txt"), base.with_suffix(".json")


def dump_file_text(report: DumpReport, as_json: bool = False) -> str:
    """What a saved dump holds: the JSON contract, or the report with every rank's full stacks after it."""
    if as_json:
        return json.dumps(dump_json(report), indent=1)
    return dump_text(report) + "\n\n" + full_stacks_text(report)


def save_dump(report: DumpReport, path: str | Path, as_json: bool = False, overwrite: bool = False) -> Path:
    """``verltop dump --output PATH``: one file, text or JSON."""
    return write_private(path, dump_file_text(report, as_json), overwrite=overwrite)


def write_dump(report: DumpReport, directory: str | Path = ".") -> tuple[Path, Path]:
    """The TUI's ``w``: the text and the JSON side by side, under a new stamped name in ``directory``."""
    txt, js = default_dump_paths(directory)
    write_private(txt, dump_file_text(report))
    write_private(js, dump_file_text(report, as_json=True))
    return txt, js
