"""Processes shaped like the inference engines verl 0.9 runs (vLLM's engine core and TP workers, SGLang's
schedulers and detokenizer) and like a reward function's sandbox: real processes with the engines' titles
(set as setproctitle sets them), process trees, gloo collectives and the waiter frames of the real code
(same function names, same file names), so that verltop's dumps see what they see on a real job.

``spawn(target, *args)`` starts ``python -c "from shapes.<module> import <fn>; <fn>(*args)"``: a real child
process of the caller, like vLLM's and SGLang's spawned children.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # tests/: puts `shapes` on sys.path of the children


def spawn(target: str, *args: object) -> subprocess.Popen:
    module, fn = target.rsplit(".", 1)
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from shapes.{module} import {fn}; "
            f"{fn}(*__import__('json').loads({json.dumps(json.dumps(list(args)))}))")
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)


def set_title(title: str) -> None:
    """What setproctitle does on Linux: overwrite the argv area (``/proc/PID/cmdline`` becomes the title and
    NULs) and set comm (15 characters) with prctl(PR_SET_NAME)."""
    import ctypes

    with open("/proc/self/stat", "rb") as f:
        rest = f.read().rsplit(b")", 1)[1].split()
    start, end = int(rest[48 - 3]), int(rest[49 - 3])  # arg_start, arg_end (fields 48, 49)
    size = end - start
    data = title.encode()[: size - 1]
    with open("/proc/self/mem", "r+b", buffering=0) as m:
        m.seek(start)
        m.write(data + b"\0" * (size - len(data)))
    ctypes.CDLL(None).prctl(15, title.encode()[:15], 0, 0, 0)


def die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL), as verl's vLLM worker extension and SGLang's schedulers do."""
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)


def wait_for(path: Path, poll_s: float = 0.05) -> None:
    import time

    while not path.exists():
        time.sleep(poll_s)


def touch(path: Path, text: str = "") -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
