"""The JSON-line protocol of the tests' cluster host processes: one JSON object per line on their stdout."""

from __future__ import annotations

import json
import selectors
import subprocess
import time
from typing import Any


def read_json_line(proc: subprocess.Popen, timeout_s: float) -> dict[str, Any] | None:
    """The next line of ``proc``'s stdout that is a JSON object (other lines are skipped); None when the
    process ended or nothing came within ``timeout_s``."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if sel.select(timeout=1.0):
                line = proc.stdout.readline()
                if not line:
                    return None
                if line.startswith("{"):
                    return json.loads(line)
            elif proc.poll() is not None:
                return None
        return None
    finally:
        sel.close()
