"""What memory by phase costs at 1,024 ranks: the book-keeping of one poll, the view of one snapshot, the book's size.

    python -m scripts.bench_memory            # from the repository root (about a minute on 2 busy cores)

1,024 verl ranks (128 nodes × 8 GPUs, one process and one child each on every GPU) and their controller run 40
steps of 6 phases of 3 s. As ``verltop watch`` polls such a job: this machine's 8 ranks and the controller are
sampled every second, 8 other nodes' reports (64 ranks) every 5 s, and the running tasks' phases are worked
out once per tasks poll (every 2 s). Measured: the book-keeping per 1 s poll (averaged over the polls, node
reports included), the same when all 1,024 ranks sit in one local sample (the worst case), the view per
snapshot (20 steps by phase, growth, headroom) between steps and at a step's start (every rank's steps move),
and the book's memory (tracemalloc, a second run) once it holds its last steps.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc

from verltop.analysis.history import TaskHistory
from verltop.analysis.snapshot_build import ClusterData, build_snapshot
from verltop.engine.memory_book import MemoryWatch
from verltop.model import Gpu, Node, PhaseRun, ProcStat, ProcTree, RawActor, RawTask, Step
from verltop.sources.local import LocalSample

RANKS = 1024
GPUS = 8
NODES = RANKS // GPUS
PHASES = [("old_log_prob", "actor_rollout_compute_log_prob"), ("ref", "actor_rollout_compute_ref_log_prob"),
          ("values", "critic_compute_values"), ("update_critic", "critic_update_critic"),
          ("update_actor", "actor_rollout_update_actor"), ("weight_sync", "actor_rollout_update_weights")]
PHASE_S = 3.0
STEP_S = PHASE_S * len(PHASES)
STEPS = 40
GIB = 1 << 30
MIB = 1 << 20
HOST = (2048 * GIB, 900 * GIB, "ray_memory_threshold")


def actors() -> list[RawActor]:
    out = [RawActor(f"a{r:04d}", "create_colocated_worker_cls.<locals>.WorkerDict", "ALIVE",
                    f"wgWorkerDict_{r // GPUS}:{r % GPUS}", f"n{r // GPUS}", 10_000 + r,
                    env=(("RANK", str(r)), ("WORLD_SIZE", str(RANKS)), ("WG_PREFIX", "wg"),
                         ("RAY_LOCAL_WORLD_SIZE", str(GPUS))))
           for r in range(RANKS)]
    out.append(RawActor("ctl", "TaskRunner", "ALIVE", None, "n0", 9_999))
    return out


def tasks_at(t: float, acts: list[RawActor]) -> list[RawTask]:
    k = int(t // STEP_S)
    p = int((t - k * STEP_S) // PHASE_S)
    start = (k * STEP_S + p * PHASE_S) * 1000
    method = PHASES[p][1]
    return [RawTask(f"t{k}-{p}-{a.actor_id}", method, f"WorkerDict.{method}", "RUNNING", a.actor_id, a.node_id,
                    a.pid, start) for a in acts if a.actor_id != "ctl"]


def gpus_of(t: float, acts: list[RawActor]) -> tuple[Gpu, ...]:
    per_gpu: list[list] = [[] for _ in range(len(acts) // GPUS + 1)]
    for i, a in enumerate(a for a in acts if a.actor_id != "ctl"):
        g = 40 * GIB + int(t) % 5 * MIB + (MIB * int(t) if a.actor_id == "a0001" else 0)
        per_gpu[i // GPUS].append((a.pid, g, None))
        per_gpu[i // GPUS].append((a.pid + 100_000, GIB, None))  # its child (a TP worker)
    return tuple(Gpu(i, "H100", 90.0, None, 80 * GIB, processes=tuple(ps)) for i, ps in enumerate(per_gpu) if ps)


def procs_of(acts: list[RawActor]) -> dict[int, ProcStat]:
    return {a.pid: ProcStat(a.pid, 50.0, 9 * GIB + (a.pid % 7) * MIB) for a in acts}


def tree_of(acts: list[RawActor]) -> ProcTree:
    return ProcTree(0.0, tuple(a.pid for a in acts),
                    procs=tuple(ProcStat(a.pid + 100_000, None, GIB, ppid=a.pid) for a in acts if a.actor_id != "ctl"))


def run(acts: list[RawActor], all_local: bool) -> tuple[list[float], MemoryWatch, float]:
    """Feed ``STEPS`` steps; returns the book-keeping ms per 1 s poll, the watch, and the last time."""
    by_id = {a.actor_id: a for a in acts}
    local = acts if all_local else [a for a in acts if a.node_id == "n0"]
    tree = tree_of(local)
    procs = procs_of(local)
    nodes = [[a for a in acts if a.node_id == f"n{n}" and a.actor_id != "ctl"] for n in range(NODES)]
    w = MemoryWatch(threshold=0.95)
    per_poll: list[float] = []
    tasks = tasks_at(0.5, acts)
    t = 0.5
    cursor = 1
    while t < STEPS * STEP_S:
        now = tasks_at(t, acts)
        if now[0].task_id != tasks[0].task_id:
            tasks = now  # a new tasks list object (the engine's tasks poll)
        s = LocalSample(t, procs, gpus_of(t, local), None, tree)
        t0 = time.perf_counter()
        w.feed_local(s, local, tasks, by_id, HOST)
        ms = (time.perf_counter() - t0) * 1000
        if not all_local and int(t) % 5 == 0:  # a node-details round: 8 nodes' reports
            reports = []
            for _ in range(8):
                n = nodes[cursor]
                cursor = cursor % (NODES - 1) + 1
                reports.append((Node(f"n{cursor}", None, None, mem_used_bytes=HOST[1], mem_total_bytes=HOST[0],
                                     gpus=gpus_of(t, n), procs=tuple(procs_of(n).values())), n))
            t0 = time.perf_counter()
            for node, n in reports:
                w.feed_node(node, t - 0.3, n, tasks, by_id)
            ms += (time.perf_counter() - t0) * 1000
        per_poll.append(ms)
        t += 1.0
    return per_poll, w, t


def steps_until(k: int) -> tuple[Step, ...]:
    out = []
    for i in range(k):
        runs = tuple(PhaseRun(ph, "wg", m, i * STEP_S + j * PHASE_S, i * STEP_S + (j + 1) * PHASE_S, RANKS)
                     for j, (ph, m) in enumerate(PHASES))
        out.append(Step(i + 1, i * STEP_S, STEP_S if i < k - 1 else None, runs, ()))
    return tuple(out)


def view_ms(w: MemoryWatch, steps: tuple[Step, ...], rows: tuple) -> tuple[float, object]:
    t0 = time.perf_counter()
    v = w.view(steps, rows)
    return (time.perf_counter() - t0) * 1000, v


def views(w: MemoryWatch, rows: tuple, t: float, acts: list[RawActor]) -> tuple[float, float, float, object]:
    """The view the first time, between steps (this machine's ranks sampled since), at a step's start."""
    first_ms, _ = view_ms(w, steps_until(STEPS - 1), rows)
    between = []
    for k in range(5):
        w.book.add(t + k, [(a.actor_id, f"t{STEPS - 1}-5-{a.actor_id}", "weight_sync", None,
                            (STEPS - 1) * STEP_S + 5 * PHASE_S, 41 * GIB, 9 * GIB, None, None, None)
                           for a in acts[:8]])
        ms, v = view_ms(w, steps_until(STEPS), rows)
        between.append(ms)
    new_step, _ = view_ms(w, steps_until(STEPS + 1), rows)
    return first_ms, statistics.median(between[1:]), new_step, v


def main() -> None:
    acts = actors()
    rows = build_snapshot(ClusterData("x", actors=tuple(acts)), TaskHistory(), 0.0).actors
    per_poll, w, t = run(acts, all_local=False)
    first, between, new_step, v = views(w, rows, t, acts)
    worst, w_all, t = run(acts, all_local=True)
    first_all, between_all, new_step_all, v_all = views(w_all, rows, t, acts)
    del w, w_all
    tracemalloc.start()
    _, w2, t = run(acts, all_local=True)
    views(w2, rows, t, acts)
    book_mib = tracemalloc.get_traced_memory()[0] / 2 ** 20
    tracemalloc.stop()
    p95 = sorted(per_poll)[int(0.95 * len(per_poll))]
    print(f"book-keeping per 1 s poll, {RANKS} ranks on {NODES} nodes: mean {statistics.mean(per_poll):.2f} ms, "
          f"median {statistics.median(per_poll):.2f} ms, p95 {p95:.2f} ms (this node's 9 actors every poll, "
          f"8 nodes' reports every 5th)")
    print(f"  its view per snapshot: {between:.1f} ms between steps, {new_step:.1f} ms at a step's start, "
          f"{first:.0f} ms the first time ({len(v.by_phase)} by-phase rows)")
    print(f"worst case, all {RANKS} ranks in one local sample every second: median {statistics.median(worst):.2f} ms "
          f"per poll")
    print(f"  its view per snapshot: {between_all:.1f} ms between steps, {new_step_all:.1f} ms at a step's start, "
          f"{first_all:.0f} ms the first time; {len(v_all.by_phase)} by-phase rows, {len(v_all.headroom)} headroom "
          f"rows")
    eps = sum(len(ab.eps) for ab in w2.book.actors.values())
    print(f"  book and view state: {eps} episodes ({eps / (RANKS + 1):.0f} per actor), {book_mib:.1f} MiB traced")


if __name__ == "__main__":
    main()
