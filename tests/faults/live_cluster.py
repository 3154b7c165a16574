"""A real two-node Ray cluster (``ray.cluster_utils.Cluster``: two raylets on this machine) running a small
verl-shaped job, in its own process so that no test process is ever connected to it.

    python -m tests.faults.live_cluster [DASHBOARD_PORT]   → one JSON line when ready, then commands on stdin

The job: a ``TaskRunner`` controller on the head node and four ``WorkerDict`` ranks of one worker group
(ranks 0, 1 on the head node, 2, 3 on the second node), each inside ``actor_rollout_update_actor`` for
good. Every actor's runtime env carries the rank keys AND planted secrets (``SECRETS``), as a user's
``runtime_env={"env_vars": {...}}`` does. Token auth is on, with ``TOKEN``; dashboard profiling is on.

Commands (one per line, each answered by one JSON line): ``info``, ``remove_node`` (the second node leaves
the cluster: its raylet and workers are killed), ``kill RANK`` (SIGKILL that rank's process), ``stop_raylet``
/ ``cont_raylet`` (SIGSTOP / SIGCONT the second node's raylet), ``quit``.

:class:`LiveCluster` runs it from a test (stdlib only: the test process never imports ray).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.net import AGENT_PORT, free_port

SECRETS = {
    "WANDB_API_KEY": "sk-planted-wandb-7d1e0c9b5a3f4e2d8c6b",
    "HF_TOKEN": "hf_plantedSecretZx9Yw8Vu7Ts6Rq5Po4",
}
TOKEN = "planted-auth-token-0f9e8d7c6b5a49382716"
WG_PREFIX = "fltGrp"
WORLD = 4
ROOT = Path(__file__).resolve().parents[2]


class WorkerDict:
    """One rank: its step never ends (py-spy sees this frame)."""

    def actor_rollout_update_actor(self) -> None:
        while True:
            time.sleep(0.2)

    def pid(self) -> int:
        return os.getpid()


class TaskRunner:
    """The controller: waits on every rank's step."""

    def run(self, workers: list) -> None:
        import ray

        ray.get([w.actor_rollout_update_actor.remote() for w in workers])


def main() -> None:
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = TOKEN
    os.environ["RAY_DASHBOARD_ENABLE_PROFILING"] = "1"
    bindir = os.path.dirname(sys.executable)  # the dashboard agent looks for py-spy on PATH
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    import ray
    from ray.cluster_utils import Cluster

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 8, "resources": {"head": 100}, "include_dashboard": True, "dashboard_host": "127.0.0.1",
        "dashboard_port": port or None, **AGENT_PORT,
    })
    second = cluster.add_node(num_cpus=8, resources={"second": 100})
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    worker_cls = ray.remote(num_cpus=0)(WorkerDict)
    runner_cls = ray.remote(num_cpus=0)(TaskRunner)
    workers = []
    for rank in range(WORLD):
        env = {**SECRETS, "WG_PREFIX": WG_PREFIX, "WORLD_SIZE": str(WORLD), "RANK": str(rank)}
        workers.append(worker_cls.options(
            name=f"{WG_PREFIX}WorkerDict_0:{rank}", resources={"head" if rank < 2 else "second": 1},
            max_restarts=0, runtime_env={"env_vars": env},
        ).remote())
    pids = ray.get([w.pid.remote() for w in workers])
    runner = runner_cls.options(resources={"head": 1}, runtime_env={"env_vars": dict(SECRETS)}).remote()
    ray.get(runner.__ray_ready__.remote())
    runner.run.remote(workers)
    raylet = second.all_processes["raylet"][0].process.pid
    info = {"address": "http://" + cluster.webui_url, "gcs": cluster.address, "pids": pids,
            "nodes": {"head": cluster.head_node.node_id, "second": second.node_id}, "raylet2": raylet}
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "quit":
            break
        if cmd[0] == "remove_node":
            cluster.remove_node(second)
        elif cmd[0] == "kill":
            os.kill(pids[int(cmd[1])], signal.SIGKILL)
        elif cmd[0] in ("stop_raylet", "cont_raylet"):
            os.kill(raylet, signal.SIGSTOP if cmd[0] == "stop_raylet" else signal.SIGCONT)
        print(json.dumps({"ok": cmd[0], **info}), flush=True)
    ray.shutdown()
    cluster.shutdown()


class LiveCluster:
    """Starts ``main`` in a child process; ``send(cmd)`` runs a command; ``stop()`` tears everything down."""

    def __init__(self, start_timeout_s: float = 120.0) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.live_cluster", str(free_port())], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            start_new_session=True,
        )
        self.info = self._read(start_timeout_s)
        self.address: str = self.info["address"]
        self.pids: list[int] = self.info["pids"]
        self.nodes: dict[str, str] = self.info["nodes"]
        self.token = TOKEN

    def _read(self, timeout_s: float) -> dict[str, Any]:
        from tests.jsonlines import read_json_line  # this file also runs as the cluster's host script

        got = read_json_line(self.proc, timeout_s)
        if got is None:
            self.stop()
            raise RuntimeError("the live Ray cluster did not start (or stopped answering)")
        return got

    def send(self, cmd: str, timeout_s: float = 60.0) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self._read(timeout_s)

    def env(self, **extra: str) -> dict[str, str]:
        """An environment for a verltop process: the token in RAY_AUTH_TOKEN, no other RAY_ variable."""
        e = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        e["HOME"] = "/nonexistent-verltop-home"
        e["RAY_AUTH_TOKEN"] = TOKEN
        e.update(extra)
        return e

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        try:  # whatever of the cluster is left in its process group (the session started for it)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(10)


if __name__ == "__main__":
    main()
