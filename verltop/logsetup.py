"""Where verltop's own log goes: a private file while the TUI owns the terminal, stderr (one line per
record, no traceback) for the one-shot commands."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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


NATIVE_LOG_MAX = 8 << 20  # the file of native writes is started afresh at a TUI's start beyond this


@contextmanager
def native_stderr_to(log_path: Path | None) -> Iterator[Path | None]:
    """While the TUI owns the terminal, writes to file descriptor 2 that bypass Python go to ``<log>.native``
    (mode 0600) instead of over the screen: Ray's core worker (joined to read the other nodes through probes)
    logs from C++ threads straight to fd 2, for instance when its cluster goes away. Textual and Python's
    ``sys.stderr`` keep the terminal, through a duplicate of the descriptor. Yields the file, or None where
    nothing was moved (no log file, or the descriptors could not be set up)."""
    if log_path is None or sys.__stderr__ is None:
        yield None
        return
    native = log_path.with_name(log_path.name + ".native")
    try:
        if native.exists() and native.stat().st_size > NATIVE_LOG_MAX:
            native.unlink()
        fd = os.open(native, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        sys.__stderr__.flush()
        tty_fd = os.dup(2)
    except OSError:
        yield None
        return
    old_std, old_err = sys.__stderr__, sys.stderr
    tty = os.fdopen(tty_fd, "w", buffering=1, encoding=old_std.encoding, errors=old_std.errors)
    os.dup2(fd, 2)
    os.close(fd)
    sys.__stderr__ = sys.stderr = tty
    try:
        yield native
    finally:
        try:
            tty.flush()
        except OSError:  # the terminal went away: fd 2 is put back all the same
            pass
        os.dup2(tty_fd, 2)
        sys.__stderr__, sys.stderr = old_std, old_err
        tty.close()
