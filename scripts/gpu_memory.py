"""Memory by phase of a real torch job on one GPU, as verltop's engine books it, against torch's own figures.

    python3 scripts/gpu_memory.py [OUT_DIR]      # on a machine with a GPU, torch, psutil and nvidia-ml-py

Two rank processes share GPU 0, each shaped as a verl worker: weights of 4 GiB, then steps of ``gen`` (2 s,
nothing new), ``old_log_prob`` (2 s; rank 0 takes 3 GiB of activations and gives them back) and
``update_actor`` (3 s; both take 2 GiB and give them back, rank 1 keeps 256 MiB more every step: the leak).
Each phase ends with ``torch.cuda.empty_cache()`` (as verl's workers do around their phases); torch's peak
reserved and allocated memory is read in every phase (``reset_peak_memory_stats`` at its start).

The parent samples as ``verltop``'s local poll does, every 0.5 s: NVML's per-process list
(``LocalSampler.sample_gpus``) and psutil's RSS, with each rank's title naming its call
(``ray::WorkerDict.actor_rollout_update_actor``) as Ray's would, booked by ``MemoryWatch.feed_local``; the
view is built with the steps the ranks report. Printed: per step and rank, NVML's peak against torch's peak
reserved in each phase, the growth found (truth: rank 1, update_actor, 256 MiB per step), the headroom (the
GPU's total less the other rank), and NVML's figure less torch's reserved (CUDA's context and what torch does
not count). ``OUT_DIR/gpu_memory.json`` holds it all.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

MIB = 1 << 20
GIB = 1 << 30
STEPS = 9
PLAN = (("gen", "generate_sequences", 2.0), ("old_log_prob", "compute_log_prob", 2.0),
        ("update_actor", "update_actor", 3.0))
LEAK = 256 * MIB


def worker(rank: int, state, q) -> None:
    import torch

    dev = torch.device("cuda:0")
    weights = torch.empty(4 * GIB, dtype=torch.uint8, device=dev)
    kept = []
    torch.cuda.synchronize()
    for step in range(STEPS):
        for i, (phase, _method, secs) in enumerate(PLAN):
            torch.cuda.reset_peak_memory_stats(dev)
            state[0], state[1], state[2] = float(i), time.time(), float(step)
            t0 = time.time()
            tmp = None
            if phase == "old_log_prob" and rank == 0:
                tmp = torch.ones(3 * GIB, dtype=torch.uint8, device=dev)
            if phase == "update_actor":
                tmp = torch.ones(2 * GIB, dtype=torch.uint8, device=dev)
                if rank == 1:
                    kept.append(torch.ones(LEAK, dtype=torch.uint8, device=dev))
            torch.cuda.synchronize()
            time.sleep(max(0.0, secs - (time.time() - t0)))
            del tmp
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            q.put((rank, step, phase, t0, time.time(), torch.cuda.max_memory_reserved(dev),
                   torch.cuda.max_memory_allocated(dev), torch.cuda.memory_reserved(dev)))
            state[0] = -1.0
            time.sleep(0.3)
    del weights, kept
    state[0] = -2.0


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import psutil

    from verltop.analysis.history import TaskHistory
    from verltop.analysis.snapshot_build import ClusterData, build_snapshot
    from verltop.engine.memory_book import MemoryWatch
    from verltop.model import PhaseRun, ProcStat, RawActor, Step
    from verltop.sources.local import LocalSample, LocalSampler

    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    states = [ctx.Array("d", [-1.0, 0.0, 0.0]) for _ in range(2)]
    procs = [ctx.Process(target=worker, args=(r, states[r], q)) for r in range(2)]
    for p in procs:
        p.start()
    actors = [RawActor(f"a{r}", "create_colocated_worker_cls.<locals>.WorkerDict", "ALIVE", f"wgWorkerDict_0:{r}", "n1",
                       p.pid, env=(("RANK", str(r)), ("WORLD_SIZE", "2"), ("WG_PREFIX", "wg"),
                                   ("RAY_LOCAL_WORLD_SIZE", "2")))
              for r, p in enumerate(procs)]
    by_id = {a.actor_id: a for a in actors}
    sampler = LocalSampler(use_nvml=True)
    w = MemoryWatch(threshold=0.95)
    torch_rows: list[tuple] = []
    nvml_errors: set[str] = set()
    samples = 0
    ps = {a.pid: psutil.Process(a.pid) for a in actors}
    while any(s[0] != -2.0 for s in states) and all(p.is_alive() or p.exitcode == 0 for p in procs):
        t = time.time()
        gpus, err = sampler.sample_gpus({a.pid for a in actors})
        if err:
            nvml_errors.add(err)
        titles, stats = {}, {}
        for a, s in zip(actors, states, strict=True):
            i = int(s[0])
            titles[a.pid] = f"ray::WorkerDict.actor_rollout_{PLAN[i][1]}" if i >= 0 else "ray::WorkerDict"
            try:
                stats[a.pid] = ProcStat(a.pid, None, ps[a.pid].memory_info().rss)
            except psutil.Error:
                pass
        w.feed_local(LocalSample(t, stats, gpus, err, None, titles), actors, [], by_id, None)
        samples += 1
        while not q.empty():
            torch_rows.append(q.get())
        time.sleep(max(0.0, 0.5 - (time.time() - t)))
    for p in procs:
        p.join(timeout=60)
    while not q.empty():
        torch_rows.append(q.get())

    steps = []
    for k in range(STEPS):
        runs = []
        for phase, method, _ in PLAN:
            rows = [r for r in torch_rows if r[1] == k and r[2] == phase]
            if rows:
                runs.append(PhaseRun(phase, "wg", f"actor_rollout_{method}", min(r[3] for r in rows),
                                     max(r[4] for r in rows), len(rows)))
        if runs:
            nxt = min((r[3] for r in torch_rows if r[1] == k + 1), default=None)
            start = min(r.start_s for r in runs)
            steps.append(Step(k + 1, start, None if nxt is None else nxt - start, tuple(runs), ()))
    snap_rows = build_snapshot(ClusterData("x", actors=tuple(actors)), TaskHistory(), time.time()).actors
    view = w.view(tuple(steps), snap_rows)
    torch_by = {(r[0], r[1] + 1, r[2]): r for r in torch_rows}
    table = []
    for p in view.by_phase:
        rank = p.rank
        tr = torch_by.get((rank, p.step, p.phase))
        table.append({"step": p.step, "rank": rank, "phase": p.phase, "samples": p.samples,
                      "nvml_peak_mib": None if p.peak_gpu_bytes is None else round(p.peak_gpu_bytes / MIB),
                      "nvml_end_mib": None if p.end_gpu_bytes is None else round(p.end_gpu_bytes / MIB),
                      "torch_peak_reserved_mib": None if tr is None else round(tr[5] / MIB),
                      "torch_peak_allocated_mib": None if tr is None else round(tr[6] / MIB),
                      "nvml_less_torch_mib": None if tr is None or p.peak_gpu_bytes is None
                      else round((p.peak_gpu_bytes - tr[5]) / MIB)})
    result = {
        "device": gpus[0].name if gpus else None,
        "nvml_errors": sorted(nvml_errors),
        "samples": samples,
        "by_phase": table,
        "growth": [{"rank": g.rank, "phase": g.phase, "kind": g.kind, "mib_per_step": round(g.bytes_per_step / MIB, 1),
                    "steps": g.steps, "peers_mib_per_step": None if g.peers_bytes_per_step is None
                    else round(g.peers_bytes_per_step / MIB, 1)} for g in view.growth],
        "headroom": [{"rank": h.rank, "kind": h.kind, "peak_mib": None if h.peak_bytes is None else round(h.peak_bytes / MIB),
                      "limit_mib": None if h.limit_bytes is None else round(h.limit_bytes / MIB),
                      "source": h.limit_source, "steps_to_limit": h.steps_to_limit} for h in view.headroom],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_memory.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "by_phase"}, indent=1))
    for row in table:
        if row["phase"] != "gen" or row["rank"] == 0:
            print(row)
    os._exit(0)


if __name__ == "__main__":
    main()
