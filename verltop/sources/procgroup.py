"""Ending what verltop started: a child run in its own session (py-spy, an ``--on-incident`` hook) is
killed with its whole process group, so nothing it started outlives it."""

from __future__ import annotations

import os
import signal


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid``; nothing when it is gone already (or not ours)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
