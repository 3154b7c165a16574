"""On a GPU machine with a Ray head running: a rollout server shaped like verl 0.9's whose engine processes hold
GPU memory, captured as verltop sees it — then the server SIGKILLed and its engine an orphan on the GPU.

    python scripts/device_tree_job.py OUT_DIR          (run by scripts/device_tree_run.sh)

The server is the demo's ``vLLMHttpServer`` (``vllm_server_0_0``): ``VLLM::EngineCore_DP0`` → ``VLLM::Worker_TP0``,
``VLLM::Worker_TP1``; with ``VERLTOP_DEMO_GPU_MB=M`` worker r holds (r + 1) × M MiB on the GPU, the actor and
the engine core none — the case where verltop used to show the actor without a GPU and its children nowhere.
Writes into OUT_DIR: the dashboard's answers, ``verltop snapshot --json`` on the local (NVML) and the probe
(dashboard ``processesPids``) paths, the same after the kill, and ``pids.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def dashboard(path: str) -> bytes:
    req = urllib.request.Request("http://127.0.0.1:8265" + path)
    tok = Path.home().joinpath(".ray", "auth_token")
    if tok.exists():
        req.add_header("Authorization", f"Bearer {tok.read_text().strip()}")
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def verltop(out: Path, name: str, *args: str) -> dict:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "verltop", "--address", "http://127.0.0.1:8265", *args],
                       capture_output=True, text=True, timeout=180)
    (out / f"{name}.json").write_text(p.stdout)
    (out / f"{name}.stderr.txt").write_text(p.stderr + f"\nrc={p.returncode} wall_s={time.monotonic() - t0:.2f}\n")
    return json.loads(p.stdout) if p.returncode == 0 else {}


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    import ray

    from verltop.demo.rollout import SERVER_NAME, vLLMHttpServer

    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    state = out / "state"
    # the engine in a session of its own, so that the kill below leaves it (Ray 2.60 kills a dead worker's
    # process group: an engine in the server's group dies with the server, as the first capture showed)
    server = ray.remote(vLLMHttpServer).options(name=SERVER_NAME, num_cpus=0).remote(str(state), 0, 2, True)
    info = ray.get(server.launch_server.remote(), timeout=300)
    ray.get(server.generate.remote([1, 2, 3], "warm-up"), timeout=120)  # one batch through the TP workers
    node_id = ray.get_runtime_context().get_node_id()
    (out / "pids.json").write_text(json.dumps({**info, "node_id": node_id}))
    print("server up:", info, flush=True)
    time.sleep(6)  # the dashboard agent reports every 5 s
    (out / "nodes_NODE_ID.json").write_bytes(dashboard(f"/nodes/{node_id}"))
    (out / "nodes_view_summary.json").write_bytes(dashboard("/nodes?view=summary"))
    (out / "actors.json").write_bytes(dashboard("/api/v0/actors?detail=1&limit=100"))
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv"],
                         capture_output=True, text=True, check=False)
    (out / "nvidia_smi_apps.csv").write_text(smi.stdout + smi.stderr)
    local = verltop(out, "snapshot_local", "snapshot", "--json")
    probe = verltop(out, "snapshot_probe", "snapshot", "--json", "--no-local", "--remote-processes")
    for name, doc in (("local", local), ("probe", probe)):
        srv = next((a for a in doc.get("actors", []) if a["actor_name"] == SERVER_NAME), None)
        print(name, json.dumps(srv and {k: srv[k] for k in ("pid", "gpu_index", "gpu_mem_bytes", "processes")}),
              flush=True)
    (out / "ready_for_tui").write_text("1")
    # the TUI is captured by the shell script now; wait for it
    deadline = time.monotonic() + 60
    while not (out / "tui_done").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    os.kill(info["server_pid"], signal.SIGKILL)  # as the OOM killer: the engine is left, holding the GPU
    time.sleep(8)
    after = verltop(out, "snapshot_after_kill", "snapshot", "--json")
    print("orphans:", json.dumps(after.get("orphans")), flush=True)
    (out / "nodes_NODE_ID.after_kill.json").write_bytes(dashboard(f"/nodes/{node_id}"))
    (out / "ready_for_tui2").write_text("1")
    deadline = time.monotonic() + 60
    while not (out / "tui2_done").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in [info["engine"], *info["workers"]]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
