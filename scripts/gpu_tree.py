"""The ``tree`` shape of ``scripts/gpu_check.py``: a rollout server whose engine processes hold the GPU.

The demo's ``vLLMHttpServer`` (verl 0.9's shape) runs as ``vllm_server_0_0`` and starts its engine
(``VLLM::EngineCore_DP0`` with ``VLLM::Worker_TP0`` and ``TP1`` below it) in a session of its own, as a launcher
that calls setsid does; with ``VERLTOP_DEMO_GPU_MB`` each TP worker holds (rank + 1) × that much GPU memory and
the actor itself none. verltop must put those processes and their GPU memory under the actor — from this
machine's /proc and NVML, and through a probe actor and the dashboard's ``processesPids`` — and, once the
server is SIGKILLed (as the OOM killer would), list the engine left holding the GPU as orphans.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import time
from typing import Any

GPU_MB = 1024
TITLES = {"VLLM::EngineCore_DP0", "VLLM::Worker_TP0", "VLLM::Worker_TP1"}


def run_tree(sc: Any) -> None:
    """``sc``: the running ``gpu_check.Scenario`` (its cluster is up; ``sc.verltop``, ``sc.checks``)."""
    import ray

    from verltop.demo.rollout import SERVER_NAME, vLLMHttpServer

    c = sc.checks
    if not c.check("setproctitle is installed (the engine's processes are titled as vLLM titles them)",
                   importlib.util.find_spec("setproctitle") is not None, "pip install setproctitle"):
        return
    server = ray.remote(vLLMHttpServer).options(
        name=SERVER_NAME, num_cpus=0, runtime_env={"env_vars": {"VERLTOP_DEMO_GPU_MB": str(GPU_MB)}},
    ).remote(str(sc.dir / "state"), 0, 2, True)
    info = ray.get(server.launch_server.remote(), timeout=300)
    ray.get(server.generate.remote([1, 2, 3], "warm-up"), timeout=120)  # one batch through the TP workers
    engine = [info["engine"], *info["workers"]]
    sc.pids.add(info["server_pid"])
    sc.own_pids.update(engine)  # not Ray workers: ended by pid at the stop
    sc.hang_t = time.time()
    time.sleep(6.0)  # the dashboard's agents report every 5 s

    for name, args, where in (("snapshot.json", ("snapshot", "--json"), "this machine"),
                              ("snapshot_probe.json", ("snapshot", "--json", "--no-local", "--remote-processes"),
                               "a probe")):
        doc = sc.verltop(name, *args) or {}
        row = next((a for a in doc.get("actors", []) if a.get("actor_name") == SERVER_NAME), {})
        procs = {p.get("pid"): p for p in row.get("processes") or []}
        c.check(f"{where}: the server's engine and TP workers listed under it, by title",
                set(procs) == set(engine) and {p.get("title") for p in procs.values()} == TITLES,
                {p: q.get("title") for p, q in procs.items()})
        held = [procs.get(pid, {}).get("gpu_mem_bytes") or 0 for pid in info["workers"]]
        c.check(f"{where}: each TP worker's GPU memory (≥ {GPU_MB} MiB × rank + 1) and the actor's total",
                all(h >= (r + 1) * GPU_MB << 20 for r, h in enumerate(held))
                and (row.get("gpu_mem_bytes") or 0) >= sum(held) and row.get("gpu_index") is not None,
                {"workers": held, "actor": row.get("gpu_mem_bytes"), "gpu": row.get("gpu_index")})

    os.kill(info["server_pid"], signal.SIGKILL)  # as the OOM killer: the engine is left, holding the GPU
    time.sleep(8.0)
    after = sc.verltop("snapshot_after_kill.json", "snapshot", "--json") or {}
    orphans = {o.get("pid"): o for o in after.get("orphans") or []}
    c.check("after the server was killed: its engine and TP workers listed as orphans",
            set(engine) <= set(orphans), sorted(orphans))
    c.check("the orphans still hold their GPU memory",
            all((orphans.get(pid, {}).get("gpu_mem_bytes") or 0) > 0 for pid in info["workers"]),
            {pid: orphans.get(pid, {}).get("gpu_mem_bytes") for pid in info["workers"]})
