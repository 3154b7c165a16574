"""What process trees cost per poll at 1,024 actors (run alone, or as a step of scripts/bench.py).

    python -m scripts.bench_processes [--actors 1024] [--polls 40]     # from the repository root

Three parts, each measured for real:

- **read**: this machine's /proc read (``LocalSampler.sample_tree``, the local poll's share) with 1,024 real
  actor-like processes here, one in eight a rollout server with an engine and two TP workers below it
  (384 descendants), as if every actor of the job ran on this host — the worst case; a real head node has
  a few dozen. Median per poll after the first read; the first read (every pid's ``stat``) is reported
  too, and the full re-read every 60 s is spread over the polls between. CPU time of the reading thread
  (``time.thread_time``): on a shared machine the wall clock mostly measures the other processes.
- **join**: ``build_snapshot`` at 1,024 actors with those trees and an NVML-like GPU sample, minus the same
  without trees (the analysis thread's share).
- **layout**: the table's rows (``layout_rows``) with the trees open, minus without (off the UI loop).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TARGET_MS = 5.0


def _spawn(n: int) -> tuple[list[subprocess.Popen], list[int]]:
    """``n`` root processes; every eighth with an engine (two workers below it). Cheap: bash and sleep."""
    procs, roots = [], []
    server = ('(exec -a VLLM::EngineCore_DP0 bash -c "(exec -a VLLM::Worker_TP0 sleep 900) & '
              '(exec -a VLLM::Worker_TP1 sleep 900) & wait") & exec -a ray::vLLMHttpServer sleep 900')
    for i in range(n):
        cmd = server if i % 8 == 0 else "exec -a ray::WorkerDict sleep 900"
        p = subprocess.Popen(["bash", "-c", cmd], start_new_session=True)  # one group each: killed whole
        procs.append(p)
        roots.append(p.pid)
    time.sleep(2.0)
    return procs, roots


def bench_read(n: int, polls: int) -> dict[str, float]:
    from verltop.sources.local import LocalSampler

    procs, roots = _spawn(n)
    try:
        s = LocalSampler(use_nvml=False)
        wanted = set(roots)
        # CPU time, not wall time: on a shared 2-core machine the wall clock mostly measures the others
        t0 = time.thread_time()
        first = s.sample_tree(wanted)
        first_ms = (time.thread_time() - t0) * 1000
        times = []
        for _ in range(polls):
            time.sleep(0.25)
            t0 = time.thread_time()
            tree = s.sample_tree(wanted)
            times.append((time.thread_time() - t0) * 1000)
        assert len(tree.procs) == 3 * ((n + 7) // 8), len(tree.procs)
        reader = s._reader
        t0 = time.thread_time()
        reader._full_at = -1e9  # force the full re-read that happens once every full_every_s
        s.sample_tree(wanted)
        full_ms = (time.thread_time() - t0) * 1000
        polls_per_full = reader.full_every_s / s.tree_every_s  # the tree is read every 2 s
        return {"first_ms": first_ms, "poll_ms": statistics.median(times), "p95_ms": sorted(times)[int(0.95 * len(times))],
                "full_ms": full_ms, "amortised_ms": statistics.median(times) + full_ms / polls_per_full,
                "descendants": len(first.procs), "roots": n}
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait()


def _cluster(n: int, trees: bool, local: int | None = None):
    from verltop.analysis.snapshot_build import ClusterData
    from verltop.model import Gpu, Node, ProcStat, ProcTree, RawActor

    local = n if local is None else local
    actors, procs, gpu_procs = [], [], []
    for i in range(n):
        pid = 10_000 + i * 10
        node = "n1" if i < local else f"r{i // 8}"
        if i % 8 == 0:
            actors.append(RawActor(f"s{i:04d}", "vLLMHttpServer", "ALIVE", f"vllm_server_{i // 8}_0", node, pid))
            if i >= local:
                continue
            procs += [ProcStat(pid + 1, 1.0, 1 << 28, None, "VLLM::EngineCore_DP0", pid),
                      ProcStat(pid + 2, 50.0, 1 << 30, None, "VLLM::Worker_TP0", pid + 1),
                      ProcStat(pid + 3, 50.0, 1 << 30, None, "VLLM::Worker_TP1", pid + 1)]
            gpu_procs += [(pid + 2, 40 << 30, None), (pid + 3, 40 << 30, None)]
        else:
            actors.append(RawActor(f"w{i:04d}", "create_colocated_worker_cls.<locals>.WorkerDict", "ALIVE",
                                   f"abcdefWorkerDict_0:{i}", node, pid,
                                   env=(("RANK", str(i)), ("WORLD_SIZE", str(n)), ("WG_PREFIX", "abcdef"))))
            gpu_procs.append((pid, 60 << 30, None))
    gpus = tuple(Gpu(g, "H200", 90.0, None, 140 << 30, processes=tuple(gpu_procs[g::8])) for g in range(8))
    tree = ProcTree(time.time(), tuple(a.pid for a in actors if a.node_id == "n1"), tuple(procs)) if trees else None
    nodes = (Node("n1", "10.0.0.1", "h", is_head=True), *(Node(f"r{k}", f"10.0.1.{k}", f"h{k}") for k in range(n // 8)))
    return ClusterData(address="x", actors=tuple(actors), nodes=nodes, local_node_ids=frozenset({"n1"}), local_gpus=gpus,
                       local_tree=tree)


def _median_ms(fn, reps: int = 15) -> float:
    t = []
    for _ in range(reps):
        t0 = time.thread_time()
        fn()
        t.append(time.thread_time() - t0)
    return statistics.median(t) * 1000


def bench_join(n: int, local: int | None = None) -> dict[str, float]:
    from verltop.analysis.history import TaskHistory
    from verltop.analysis.snapshot_build import build_snapshot
    from verltop.ui.widgets.actor_table import layout_rows

    with_t, without = _cluster(n, True, local), _cluster(n, False, local)
    now = time.time()
    build_snapshot(with_t, TaskHistory(), now)
    join = _median_ms(lambda: build_snapshot(with_t, TaskHistory(), now)) - \
        _median_ms(lambda: build_snapshot(without, TaskHistory(), now))
    s_with = build_snapshot(with_t, TaskHistory(), now)
    s_without = build_snapshot(without, TaskHistory(), now)
    assert sum(len(a.processes) for a in s_with.actors) == 3 * (((n if local is None else local) + 7) // 8)
    layout = _median_ms(lambda: layout_rows(s_with, "group", "rank")) - \
        _median_ms(lambda: layout_rows(replace(s_without), "group", "rank"))
    return {"join_ms": max(0.0, join), "layout_ms": max(0.0, layout), "rows": len(layout_rows(s_with, "group", "rank"))}


def bench_processes(n: int = 1024, polls: int = 40, head_local: int = 8) -> list[tuple]:
    """Two layouts of ``n`` actors: the job's head node (``head_local`` actors here, the rest on other nodes,
    whose trees are read only when asked) and every actor on this machine (the worst case)."""
    out = []
    for local, label in ((head_local, f"{head_local} of them on this node"), (n, "all on this node")):
        r = bench_read(local, polls)
        j = bench_join(n, local)
        total = r["amortised_ms"] + j["join_ms"]
        out.append((f"process trees, {n} actors, {label} ({r['descendants']} descendants): /proc read, median / "
                    f"p95 (first read {r['first_ms']:.0f} ms; full re-read {r['full_ms']:.0f} ms every 60 s)",
                    f"{r['poll_ms']:.1f} / {r['p95_ms']:.1f} ms", "-", None))
        out.append((f"process trees, {n} actors, {label}: join (analysis thread) + layout ({j['rows']} rows, "
                    "off the UI loop)", f"{j['join_ms']:.1f} + {j['layout_ms']:.1f} ms", "-", None))
        out.append((f"process trees, {n} actors, {label}: added CPU per 2 s poll cycle (read + re-read spread + join)",
                    f"{total:.1f} ms", f"≤ {TARGET_MS:.0f} ms", total <= TARGET_MS))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--actors", type=int, default=1024)
    ap.add_argument("--polls", type=int, default=40)
    a = ap.parse_args()
    for row in bench_processes(a.actors, a.polls):
        print(" | ".join(str(x) for x in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
