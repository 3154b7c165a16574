"""A three-raylet Ray cluster (``ray.cluster_utils.Cluster`` on this machine) whose nodes differ on purpose, for
``verltop doctor``; it runs in its own process so that no test process is ever connected to it.

    python tests/integration/doctor_cluster.py STATE_DIR [--plain]   → one JSON line when ready, then commands
                                                                          on stdin

``--plain``: the head alone, without token auth (``RAY_AUTH_MODE=disabled``), as a cluster started without one.

- ``head`` and ``third``: raylets started with ``NCCL_SOCKET_IFNAME=eth0`` (or the first non-loopback
  interface of this machine).
- ``odd``: its raylet (so every worker it starts) has ``NCCL_SOCKET_IFNAME=lo``, and a directory on its
  ``PYTHONPATH`` holding nothing but a fake ``transformers`` distribution (``ODD_TRANSFORMERS``), so its workers
  read a different transformers version than the others.
- ``odd`` also answers doctor's ptrace check as a Kubernetes pod without ``SYS_PTRACE`` would
  (``PTRACE_DENIED_ENV``, honoured by ``node_check`` for tests only: root on one machine cannot be refused).
- every raylet's environment carries planted secrets (``SECRETS``), and so does the runtime env of one job
  actor per node (with ``NCCL_DEBUG=WARN``, the same everywhere), as a user's ``runtime_env`` would.
- fast GCS health checks, so a node that dies is declared dead within seconds.

Commands (one per line, each answered by one JSON line): ``info``, ``stop NODE`` / ``cont NODE`` (SIGSTOP /
SIGCONT that node's raylet), ``kill NODE`` (the node leaves: its raylet and workers are killed), ``quit``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

SECRETS = {
    "WANDB_API_KEY": "sk-planted-doctor-wandb-51f0c2a9e8d7",
    "HF_TOKEN": "hf_plantedDoctorSecretQw3Er4Ty5Ui6",
    "AWS_SECRET_ACCESS_KEY": "planted/doctor+aws/9Zx8Yw7Vu6Ts5",
}
TOKEN = "planted-doctor-auth-token-8c7b6a5d4e3f2a1b"
ODD_TRANSFORMERS = "4.0.0"
JOB_NCCL = {"NCCL_DEBUG": "WARN"}
PTRACE_DENIED_ENV = "VERLTOP_TEST_PTRACE_DENIED"  # verltop.sources.node_check.TEST_DENY_ENV


class Job:
    """One job actor per node: a Ray worker with a runtime env, idle."""

    def pid(self) -> int:
        return os.getpid()


def fast_iface() -> str:
    names = sorted(os.listdir("/sys/class/net"))
    return "eth0" if "eth0" in names else next(n for n in names if n != "lo")


def fake_dist(root: Path, name: str, version: str) -> Path:
    d = root / f"{name}-{version}.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


def main() -> None:
    state = Path(sys.argv[1])
    plain = "--plain" in sys.argv[2:]
    # the protocol owns the real stdout: Ray writes to fd 1 from its own threads (a dead raylet's last log
    # lines once landed in the middle of a reply), so everything else goes to stderr, the host's log
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    state.mkdir(parents=True, exist_ok=True)
    os.environ.update(SECRETS)
    if plain:
        os.environ["RAY_AUTH_MODE"] = "disabled"
        os.environ.pop("RAY_AUTH_TOKEN", None)
    else:
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = TOKEN
    os.environ.pop("RAY_ADDRESS", None)
    import ray
    from ray.cluster_utils import Cluster

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for net
    from net import AGENT_PORT

    base = dict(os.environ)
    iface = fast_iface()

    def env_for(nccl: str, pythonpath: str | None = None) -> None:
        os.environ.clear()
        os.environ.update(base)
        os.environ["NCCL_SOCKET_IFNAME"] = nccl
        if pythonpath:
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, base.get("PYTHONPATH")) if p)

    env_for(iface)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"n_head": 10}, "include_dashboard": True, "dashboard_host": "127.0.0.1",
        "dashboard_port": None, **AGENT_PORT,
        "_system_config": {"health_check_period_ms": 1000, "health_check_timeout_ms": 5000,
                           "health_check_failure_threshold": 5, "health_check_initial_delay_ms": 1000},
    })
    nodes = {"head": cluster.head_node}
    if not plain:
        env_for("lo", str(fake_dist(state / "odd-site", "transformers", ODD_TRANSFORMERS)))
        os.environ[PTRACE_DENIED_ENV] = "1"  # answers as a pod without SYS_PTRACE (none can be made here for real)
        nodes["odd"] = cluster.add_node(num_cpus=2, resources={"n_odd": 10})
        env_for(iface)
        nodes["third"] = cluster.add_node(num_cpus=2, resources={"n_third": 10})
    os.environ.clear()
    os.environ.update(base)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    job = ray.remote(num_cpus=0)(Job)
    actors = [job.options(resources={f"n_{k}": 1}, runtime_env={"env_vars": {**SECRETS, **JOB_NCCL}}).remote()
              for k in nodes]
    ray.get([a.pid.remote() for a in actors])
    raylets = {k: n.all_processes["raylet"][0].process.pid for k, n in nodes.items()}
    info = {"address": "http://" + cluster.webui_url, "gcs": cluster.address, "iface": iface,
            "nodes": {k: n.node_id for k, n in nodes.items()}, "raylets": raylets}
    proto.write(json.dumps(info) + "\n")
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "quit":
            break
        if cmd[0] in ("stop", "cont"):
            os.kill(raylets[cmd[1]], signal.SIGSTOP if cmd[0] == "stop" else signal.SIGCONT)
        elif cmd[0] == "kill":
            cluster.remove_node(nodes[cmd[1]], allow_graceful=False)
        proto.write(json.dumps({"ok": cmd[0], "at": time.time(), **info}) + "\n")
    ray.shutdown()
    for n in list(cluster.worker_nodes):
        os.kill(n.all_processes["raylet"][0].process.pid, signal.SIGCONT)
    cluster.shutdown()


if __name__ == "__main__":
    main()
