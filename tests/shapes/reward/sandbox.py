"""A reward function's code sandbox: the scorer runs the candidate program in a child process and waits for
it (``subprocess.run``, as prime_code's fallback does with multiprocessing); this program never returns."""

from __future__ import annotations

import subprocess
import sys
import time

from shapes import ROOT


def score(program: str) -> float:
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from shapes.reward.sandbox import run_tests; run_tests({program!r})"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True)
    return 1.0 if p.returncode == 0 else 0.0


def run_tests(program: str) -> None:
    while "loop forever" in program:
        time.sleep(0.5)  # the candidate's infinite loop
