#!/usr/bin/env python3
"""How big and how fast recordings are: ``verltop watch`` against the synthetic 1,024-GPU verl job.

    python -m scripts.record_bench                 # 10 minutes, hang at half time
    python -m scripts.record_bench --minutes 3 --nodes 16

Runs the synthetic Ray 2.60 dashboard (tests/fakeray, 128 nodes × 8 GPUs: 1,161 actors) and the real
``verltop watch`` CLI in their own processes (``--max-captures 0``: the figure is the recording, not the
dumps), half the time training and half hung (every rank stalled). Then it reads the recording back and
prints, as Markdown: MB per hour (training, hung, both), keyframe and delta sizes, how long opening (the
header scan) and seeking to a random time take, and the watch's peak RSS.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.net import free_port

ROOT = Path(__file__).resolve().parent.parent


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--nodes", type=int, default=128)
    a = ap.parse_args()
    from verltop.engine import recording_format as rf
    from verltop.engine.recording_reader import Recording

    secs = a.minutes * 60
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="verltop-record-bench-"))
    dash = subprocess.Popen([sys.executable, "-m", "scripts.fake_dashboard", "--nodes", str(a.nodes),
                             "--gpus", "8", "--port", str(port), "--hang-at", str(secs / 2 + 30)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(8)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    w = subprocess.Popen([sys.executable, "-m", "verltop", "watch", "--address", f"http://127.0.0.1:{port}", "--dir",
                          str(tmp), "--max-captures", "0", "--no-local"], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.time()
    peak = 0.0
    print(f"recording into {tmp} for {a.minutes:g} min…", file=sys.stderr)
    try:
        while time.time() - t0 < secs:
            time.sleep(5)
            peak = max(peak, rss_mb(w.pid))
        w.send_signal(signal.SIGTERM)
        w.wait(60)
    finally:
        for p in (w, dash):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    t_open = time.perf_counter()
    rec = Recording.open(tmp / "recording")
    open_ms = (time.perf_counter() - t_open) * 1000
    span = rec.times[-1] - rec.times[0]
    total = sum(f.stat().st_size for f in (tmp / "recording").glob("*.vtr"))
    first_stall = None
    cur = rec.cursor()
    for i in range(0, len(rec.snaps), 5):
        s = cur.goto(i)
        if s is not None and sum(x.stalled for x in s.actors) > 100:
            first_stall = s.taken_at
            break

    def mb_h(lo: float, hi: float) -> float:
        b = sum(f.length + rf.FRAME_HEADER.size for f in rec.snaps if lo <= f.t < hi)
        return b / max(1.0, hi - lo) * 3600 / 1e6

    keys = [f.length for f in rec.snaps if f.kind == rf.KEY]
    deltas = [f.length for f in rec.snaps if f.kind == rf.DELTA]
    seeks = []
    rnd = random.Random(1)
    for _ in range(40):
        c = rec.cursor()
        t = rnd.uniform(rec.times[0], rec.times[-1])
        t1 = time.perf_counter()
        c.goto_time(t)
        seeks.append((time.perf_counter() - t1) * 1000)
    s = rec.cursor().goto(len(rec.snaps) - 1)
    print(f"\n{len(s.actors) if s else '?'} actors, {a.nodes} nodes × 8 GPUs, {span / 60:.1f} min recorded "
          f"({len(rec.snaps)} snapshots, {len(keys)} keyframes), stall from {((first_stall or 0) - rec.times[0]) / 60:.1f} min\n")
    print("| figure | value |\n| --- | --- |")
    print(f"| recording, whole run | {total / 1e6:.1f} MB = {total / span * 3600 / 1e6:.1f} MB/hour |")
    if first_stall:
        print(f"| while training | {mb_h(rec.times[0], first_stall - 60):.1f} MB/hour |")
        print(f"| while hung (every rank stalled) | {mb_h(first_stall, rec.times[-1]):.1f} MB/hour |")
    print(f"| keyframe (zlib JSON) | {statistics.median(keys) / 1e3:.0f} kB median |")
    print(f"| delta | {statistics.median(deltas) / 1e3:.1f} kB median, {max(deltas) / 1e3:.0f} kB max |")
    print(f"| open (header scan of {len(rec.snaps) + len(rec.events)} frames) | {open_ms:.0f} ms |")
    print(f"| seek to a random time (keyframe + deltas + build the snapshot) | {statistics.median(seeks):.0f} ms "
          f"median, {sorted(seeks)[int(len(seeks) * 0.95)]:.0f} ms p95 |")
    print(f"| verltop watch peak RSS | {peak:.0f} MB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
