"""Writing dumps: mode 0600, never over an existing file unless asked."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


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


def write_dump(report_json: dict[str, Any], report_text: str, directory: str | Path = ".") -> tuple[Path, Path]:
    txt, js = default_dump_paths(directory)
    write_private(txt, report_text)
    write_private(js, json.dumps(report_json, indent=1))
    return txt, js
