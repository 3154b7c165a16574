#!/usr/bin/env python3
"""Soak of ``verltop watch``: the daemon against a synthetic verl job for a long time, with faults; are its
memory and disk flat?

    python -m scripts.watch_soak                   # 25 minutes, 256 GPUs
    python -m scripts.watch_soak --minutes 5 --nodes 4

This process serves the synthetic Ray 2.60 dashboard (tests/fakeray, profiling on so stacks come through
``/worker/traceback``) and runs the real ``verltop watch`` CLI in its own process with small bounds
(recording kept 6 min in 2-minute segments, at most 48 MB; 4 incident directories), so that pruning runs
many times within the soak. Faults, on a 5-minute cycle:

- a hang (a collective never completes) for 70 s, then cleared: an incident with a capture;
- the dashboard gone (connections refused) for 30 s, then back;
- the dashboard answering 500 for 20 s;
- a rank killed (its peers hang), the hang cleared 40 s later (the dead rank stays dead: a new one each
  cycle, as on a cluster where Ray does not restart it).

Every 10 s it samples the watch process (RSS, open fds, threads) and the watch directory (recording and
incident bytes), and at the end prints, as Markdown: each figure after the warm-up, at the end, its max,
the slope over the second half, and the incidents and outages the watch recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CYCLE_S = 300.0
SCHEDULE = [(20.0, "hang", 70.0), (120.0, "down", 30.0), (180.0, "errors", 20.0), (220.0, "kill", 40.0)]


def proc_stats(pid: int) -> dict[str, float]:
    out = {"rss_mb": 0.0, "fds": 0.0, "threads": 0.0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_mb"] = int(line.split()[1]) / 1024
            elif line.startswith("Threads:"):
                out["threads"] = float(line.split()[1])
        out["fds"] = float(len(os.listdir(f"/proc/{pid}/fd")))
    except OSError:
        pass
    return out


def du_mb(p: Path) -> float:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 1e6 if p.exists() else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=25.0)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--dir", default=None, help="watch directory (default: a new temporary one)")
    a = ap.parse_args()
    from tests.fakeray import FakeDashboard
    from tests.fakeray.cluster import ClusterConfig, FakeCluster

    cluster = FakeCluster(ClusterConfig(nodes=a.nodes, gpus_per_node=8, speed=2.0, profiling=True, seed=3))
    fd = FakeDashboard(cluster, prewarm=True).start()
    d = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="verltop-watch-soak-"))
    out = open(d.parent / f"{d.name}.out", "w")  # noqa: SIM115 - closed at the end
    w = subprocess.Popen([sys.executable, "-m", "verltop", "watch", "--address", fd.url, "--dir", str(d),
                          "--no-local", "--stall-after", "30", "--clear-after", "15", "--keep", "6m", "--segment", "2m",
                          "--max-size", "48M", "--keep-incidents", "4", "--max-captures", "30", "--before", "60"],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=out,
                         stderr=subprocess.STDOUT, start_new_session=True)
    print(f"watch pid {w.pid} → {d}; {a.minutes:g} min", file=sys.stderr)
    t0 = time.time()
    samples: list[dict[str, float]] = []
    faults: list[tuple[float, str]] = []
    active: dict[str, float] = {}
    killed = 0
    try:
        while time.time() - t0 < a.minutes * 60:
            now = time.time() - t0
            c = now % CYCLE_S
            for at, kind, dur in SCHEDULE:
                if at <= c < at + dur and kind not in active:
                    active[kind] = now
                    faults.append((now, kind))
                    if kind == "hang":
                        cluster.set_hang(rank=(killed + 1) % (a.nodes * 8))
                    elif kind == "down":
                        fd.take_down()
                    elif kind == "errors":
                        fd.faults.status_code = 500
                    elif kind == "kill":
                        cluster.kill_rank(killed)
                        killed += 1
                elif kind in active and not at <= c < at + dur:
                    del active[kind]
                    if kind in ("hang", "kill"):
                        cluster.clear_hang()
                    elif kind == "down":
                        fd.bring_up()
                    elif kind == "errors":
                        fd.faults.status_code = None
            if not samples or now - samples[-1]["t"] >= 10:
                assert w.poll() is None, f"the watch exited: {w.returncode}"
                s = {"t": now, **proc_stats(w.pid), "recording_mb": du_mb(d / "recording"),
                     "incidents_mb": du_mb(d / "incidents"),
                     "incidents": float(len(list((d / "incidents").glob("*/incident.json"))) if (d / "incidents").exists() else 0)}
                samples.append(s)
                print(" ".join(f"{k}={v:.1f}" for k, v in s.items()), file=sys.stderr)
            time.sleep(1)
        w.send_signal(signal.SIGTERM)
        rc = w.wait(60)
    finally:
        if w.poll() is None:
            os.killpg(w.pid, signal.SIGKILL)
        fd.stop()
        out.close()
    report(samples, faults, d, rc)
    return 0


def report(samples: list[dict[str, float]], faults: list[tuple[float, str]], d: Path, rc: int) -> None:
    from verltop.engine import recording_format as rf
    from verltop.engine.recording_reader import Recording

    warm = [s for s in samples if s["t"] >= 120] or samples
    half = [s for s in warm if s["t"] >= (warm[0]["t"] + warm[-1]["t"]) / 2]
    minutes = (samples[-1]["t"] - samples[0]["t"]) / 60
    print(f"\n{minutes:.0f} minutes, {len(faults)} faults ({', '.join(sorted({k for _, k in faults}))}), "
          f"watch exit code {rc} after SIGTERM\n")
    print("| figure | after warm-up | at end | max | slope, second half |")
    print("| --- | --- | --- | --- | --- |")
    for k in ("rss_mb", "fds", "threads", "recording_mb", "incidents_mb"):
        xs = [s["t"] for s in half]
        ys = [s[k] for s in half]
        n = len(xs)
        mx = sum(xs) / n
        slope = sum((x - mx) * (y - sum(ys) / n) for x, y in zip(xs, ys, strict=True)) / max(
            1e-9, sum((x - mx) ** 2 for x in xs)) * 60
        print(f"| {k} | {warm[0][k]:.1f} | {samples[-1][k]:.1f} | {max(s[k] for s in samples):.1f} | "
              f"{slope:+.2f}/min |")
    incs = sorted((d / "incidents").glob("*/incident.json"))
    print(f"\nincident directories kept: {len(incs)} (of {sum(1 for _, k in faults if k in ('hang', 'kill'))} "
          "stalls caused); the newest:")
    for p in incs[-2:]:
        doc = json.loads(p.read_text())
        print(f"- {p.parent.name}: {doc['summary'][:200]}…")
    log = (d / "watch.log").read_text() if (d / "watch.log").exists() else ""
    print(f"\nwatch.log: {log.count('INCIDENT')} incidents, {log.count('dashboard: ')} outages/errors seen, "
          f"{log.count('answers again')} recoveries, {log.count('deleted recording segment')} segments and "
          f"{log.count('deleted old incident')} incidents pruned")
    rec = Recording.open(d / "recording")
    print(f"recording now: {len(rec.files)} segments, {(rec.times[-1] - rec.times[0]) / 60:.1f} min, "
          f"{len(rec.events_of(rf.STATUS))} status events, damage: {rec.damage or 'none'}")


if __name__ == "__main__":
    sys.exit(main())
