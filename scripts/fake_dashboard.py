"""Serve a synthetic Ray 2.60 dashboard for a fake verl cluster until Ctrl-C.

    python -m scripts.fake_dashboard --nodes 128 --gpus 8 --port 8266 [--token T] [--seed 1]
    verltop --address http://127.0.0.1:8266

Run it from the repository root (it serves ``tests.fakeray``).

See tests/fakeray/server.py for the endpoints and tests/fakeray/cluster.py for the model.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from tests.fakeray.cluster import ClusterConfig, FakeCluster
from tests.fakeray.server import FakeDashboard


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8266, help="0 picks a free port")
    p.add_argument("--token", default=None, help="enable token auth with this token")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--profiling", action="store_true", help="answer /worker/traceback (else 403 like Ray 2.56+)")
    p.add_argument("--rollout-mode", choices=("async", "sync"), default="async")
    p.add_argument("--engine", choices=("legacy", "new"), default="legacy")
    p.add_argument("--rm-nodes", type=int, default=0, help="nodes of a separate reward-model WorkerDict group")
    p.add_argument("--agent-loop-workers", type=int, default=None)
    p.add_argument("--rollout-servers", type=int, default=None)
    p.add_argument("--extra-actors", type=int, default=0, help="filler CPU actors (e.g. to reach 10,000)")
    p.add_argument("--dead-actors", type=int, default=0)
    p.add_argument("--speed", type=float, default=1.0, help="divide every phase length by this")
    p.add_argument("--hang-at", type=float, default=None, metavar="S",
                   help="seconds after start at which a collective hangs (straggler = --hang-rank)")
    p.add_argument("--hang-rank", type=int, default=0)
    p.add_argument("--kill-rank-at", type=float, default=None, metavar="S",
                   help="kill --hang-rank's WorkerDict S seconds after start (its peers hang)")
    p.add_argument("--delay", type=float, default=0.0, help="add this latency to every request")
    p.add_argument("--traceback-delay", type=float, default=0.0, metavar="S",
                   help="each /worker/traceback answers after S (a node agent's round trip and py-spy run)")
    p.add_argument("--dead-nodes", type=int, default=0, metavar="N",
                   help="the last N nodes' agents never answer /worker/traceback (a node down or hung)")
    p.add_argument("--max-finished", type=int, default=2000, metavar="N",
                   help="FINISHED task attempts kept (Ray's GCS keeps 100000: task_events_max_num_task_in_gcs)")
    return p.parse_args(argv)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    cfg = ClusterConfig(
        nodes=a.nodes, gpus_per_node=a.gpus, token=a.token, seed=a.seed, profiling=a.profiling,
        rollout_mode=a.rollout_mode, engine=a.engine, rm_nodes=a.rm_nodes,
        agent_loop_workers=a.agent_loop_workers, rollout_servers=a.rollout_servers,
        extra_actors=a.extra_actors, dead_actors=a.dead_actors, speed=a.speed,
        hang_at_s=a.hang_at, hang_rank=a.hang_rank, max_finished_tasks=a.max_finished,
    )
    cluster = FakeCluster(cfg)
    fd = FakeDashboard(cluster, host=a.host, port=a.port, prewarm=True)
    fd.faults.delay_s = a.delay
    fd.app_state.traceback_delay_s = a.traceback_delay
    if a.dead_nodes:  # worker nodes (the head keeps the controller)
        fd.app_state.dead_nodes = {n.node_id for n in [n for n in cluster.nodes if not n.is_head][-a.dead_nodes:]}
    # Ctrl-C and SIGTERM stop it, even when started in the background by a shell (which ignores SIGINT
    # for background jobs, and the child inherits that)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    fd.start()
    killed = False
    last = ""
    try:  # from here on: a Ctrl-C must stop the server's threads, whenever it comes
        s = cluster.summary()
        print(f"fake Ray {cfg.ray_version} dashboard at {fd.url}  ({s['nodes']} nodes, {s['gpus']} GPUs, "
              f"{s['actors']} actors, step {s['step_len_s']} s, auth {'token' if a.token else 'disabled'}, "
              f"profiling {'on' if a.profiling else 'off'})", flush=True)
        while True:
            time.sleep(1.0)
            if a.kill_rank_at is not None and not killed and cluster.now() >= cluster.created_at + a.kill_rank_at:
                cluster.kill_rank(a.hang_rank)
                killed = True
                print(f"killed rank {a.hang_rank}", flush=True)
            pos = cluster.position()
            line = f"step {pos['step']} {pos['phase']}{' (HUNG)' if pos['hung'] else ''}"
            if line != last:
                print(f"{time.strftime('%H:%M:%S')} {line}  requests={fd.stats.total()}", flush=True)
                last = line
    except KeyboardInterrupt:
        pass
    finally:
        fd.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
