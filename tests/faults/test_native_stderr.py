"""Writes to file descriptor 2 from native code (Ray's core worker logs from C++ threads, for instance when the
cluster it joined for the probes goes away) do not land on the TUI's screen: they go to the log's ``.native``
file, while Textual and Python's stderr keep the terminal."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.faults.helpers import FakeDashboardProcess, PtyTui
from tests.wait import wait_until

GUARD = """
import os, sys
from pathlib import Path
from verltop.logsetup import native_stderr_to
log = Path(sys.argv[1])
with native_stderr_to(log) as native:
    os.write(2, b"native noise\\n")
    print("drawn by textual", file=sys.__stderr__, flush=True)
    print("python's stderr", file=sys.stderr, flush=True)
os.write(2, b"after\\n")
print(native)
"""


def test_native_writes_go_to_the_file_and_python_keeps_the_terminal(tmp_path):
    log = tmp_path / "verltop.log"
    out = subprocess.run([sys.executable, "-c", GUARD, str(log)], capture_output=True, text=True, timeout=60,
                         check=True)
    assert out.stderr == "drawn by textual\npython's stderr\nafter\n"  # fd 2 is the terminal again after
    native = Path(out.stdout.strip())
    assert native == tmp_path / "verltop.log.native"
    assert native.read_text() == "native noise\n"
    assert stat.S_IMODE(native.stat().st_mode) == 0o600


def test_no_log_file_moves_nothing(tmp_path):
    code = GUARD.replace("log = Path(sys.argv[1])", "log = None")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stderr == "native noise\ndrawn by textual\npython's stderr\nafter\n" and out.stdout.strip() == "None"


# the real TUI, and a write to fd 2 from another thread a moment after its start, as Ray's C++ threads make
NOISY = """
import os, sys, threading
threading.Timer(3.0, lambda: os.write(2, b"NATIVE-NOISE from a thread\\n")).start()
sys.argv = ["verltop", *sys.argv[1:]]
from verltop.cli import run
run()
"""


def test_the_tuis_screen_gets_no_native_writes(tmp_path):
    log = tmp_path / "verltop.log"
    with FakeDashboardProcess("--nodes", "1", "--gpus", "2") as fd:
        tui = PtyTui("--address", fd.url, "--log-file", str(log), env=dict(os.environ), cwd=tmp_path,
                     python=("-c", NOISY))
        try:
            tui.wait_output(b"ALIVE", 30)
            native = tmp_path / "verltop.log.native"
            wait_until(lambda: native.exists() and b"NATIVE-NOISE" in native.read_bytes(), 20,
                       "the thread's write in the .native file", detail=lambda: bytes(tui.out[-500:]))
            tui.press("j")  # the TUI still answers keys and draws after it
            n = len(tui.out)
            wait_until(lambda: len(tui.out) > n, 10, "a redraw after the key")
        finally:
            code = tui.quit()
    assert b"NATIVE-NOISE" not in tui.out
    assert code == 0
