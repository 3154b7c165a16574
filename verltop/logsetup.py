"""Where verltop's own log goes: a private file while the TUI owns the terminal, stderr (one line per
record, no traceback) for the one-shot commands."""

from __future__ import annotations

import logging
import os
from pathlib import Path


def default_log_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "verltop" / "verltop.log"


class _OneLine(logging.Formatter):
    def formatException(self, ei) -> str:
        return ""

    def format(self, record: logging.LogRecord) -> str:
        record.exc_text = ""
        return super().format(record)


def to_file(path: str | Path | None = None) -> Path | None:
    """Log (warnings and errors, with tracebacks) to ``path``, mode 0600, rotated at 1 MB. Returns the path,
    or None when it cannot be written (then nothing is logged: the TUI must not print)."""
    p = Path(path) if path else default_log_path()
    root = logging.getLogger("verltop")
    root.setLevel(logging.INFO)
    root.propagate = False
    from logging.handlers import RotatingFileHandler  # the TUI's only: one-shot commands skip its import

    try:
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.close(fd)
        h: logging.Handler = RotatingFileHandler(p, maxBytes=1 << 20, backupCount=2, encoding="utf-8")
    except OSError:
        root.addHandler(logging.NullHandler())
        return None
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(h)
    return p


def to_stderr() -> None:
    root = logging.getLogger("verltop")
    root.setLevel(logging.WARNING)
    root.propagate = False
    h = logging.StreamHandler()
    h.setFormatter(_OneLine("verltop: %(levelname)s: %(message)s"))
    root.addHandler(h)
