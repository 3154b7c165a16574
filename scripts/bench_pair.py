"""The TUI's refresh of two checkouts at once: this one and ``OTHER`` (say, a ``git worktree`` of the commit
before a change), each against its own synthetic dashboard, started together round after round.

A shared machine's speed moves by tens of percent within minutes; runs one after the other then hide a 10 %
change. Run side by side, a slow moment hits both, and the per-round ratio holds where the figures do not.
Figures: CPU time per 2 s poll cycle of each TUI process (``bench --child idle``), and the ratio this/other.
With ``--first-frame N``: the time from process start to the first table drawn, N starts of each checkout
alternated against one synthetic dashboard (a start is too short to share the machine side by side).

    python -m scripts.bench_pair ../verltop-before [--size 1k|10k|64] [--rounds 6] [--secs 30]
    python -m scripts.bench_pair ../verltop-before --first-frame 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scripts.bench import PY, ROOT, FakeServer

SIZES = {"64": (8, 0), "1k": (128, 0), "10k": (128, 8900)}  # nodes of 8 GPUs, extra actors


def _child(tree: Path, url: str, secs: float) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "scripts.bench", "--child", "idle", url, str(secs)], cwd=tree,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _result(p: subprocess.Popen, secs: float) -> dict:
    out, _ = p.communicate(timeout=secs + 120)
    lines = out.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise SystemExit(f"a TUI child failed (exit {p.returncode})")
    return json.loads(lines[-1])


def _first_frame(tree: Path, url: str) -> float:
    out = subprocess.run([PY, "-m", "scripts.bench", "--child", "first_frame", url, repr(time.time())], cwd=tree,
                         capture_output=True, text=True, timeout=120)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise SystemExit(f"a TUI start failed (exit {out.returncode})")
    return json.loads(lines[-1])["first_frame_s"]


def first_frames(here: Path, other: Path, size: str, n: int) -> None:
    nodes, extra = SIZES[size]
    srv = FakeServer(nodes, 8, extra)
    ours, theirs = [], []
    try:
        for r in range(n):
            order = [(here, ours), (other, theirs)]
            if r % 2:
                order.reverse()
            for tree, out in order:
                out.append(_first_frame(tree, srv.url))
            print(f"start {r + 1}: this {ours[-1]:.2f} s, other {theirs[-1]:.2f} s", flush=True)
    finally:
        srv.stop()
    print(f"{size} actors, first frame, {n} starts each: this {statistics.median(ours):.2f} s, other "
          f"{statistics.median(theirs):.2f} s (medians; this {min(ours):.2f}–{max(ours):.2f}, other "
          f"{min(theirs):.2f}–{max(theirs):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("other", type=Path, help="the other checkout (its scripts/bench.py runs its TUI)")
    ap.add_argument("--size", choices=sorted(SIZES), default="1k")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--secs", type=float, default=30.0, help="measured seconds per round (after 6 s of start-up)")
    ap.add_argument("--first-frame", type=int, metavar="N", help="instead: N starts of each, to the first frame")
    a = ap.parse_args()
    other, here = a.other.resolve(), ROOT
    if not (other / "scripts" / "bench.py").exists():
        raise SystemExit(f"{other} is not a verltop checkout (no scripts/bench.py)")
    if a.first_frame:
        return first_frames(here, other, a.size, a.first_frame)
    nodes, extra = SIZES[a.size]
    ours, theirs, ratios = [], [], []
    for r in range(a.rounds):
        servers = [FakeServer(nodes, 8, extra), FakeServer(nodes, 8, extra)]
        try:
            order = [(here, servers[0]), (other, servers[1])]
            if r % 2:  # who starts first alternates
                order.reverse()
            procs = {tree: _child(tree, srv.url, a.secs) for tree, srv in order}
            got = {tree: _result(p, a.secs) for tree, p in procs.items()}
        finally:
            for s in servers:
                s.stop()
        mine, base = got[here]["cpu_per_cycle_ms"], got[other]["cpu_per_cycle_ms"]
        ours.append(mine)
        theirs.append(base)
        ratios.append(mine / base)
        print(f"round {r + 1}: this {mine:.1f} ms, other {base:.1f} ms a cycle: {ratios[-1]:.3f}; peak RSS "
              f"{got[here]['rss_mb']:.0f} / {got[other]['rss_mb']:.0f} MB", flush=True)
    print(f"{a.size} actors, {a.rounds} rounds: this {statistics.median(ours):.1f} ms, other "
          f"{statistics.median(theirs):.1f} ms (medians); this/other {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}–{max(ratios):.3f})")


if __name__ == "__main__":
    sys.exit(main())
