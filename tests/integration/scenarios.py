"""Scenario job for the dump tests: real verl worker groups (CPU, gloo) put into hangs whose answer is known.

Two parts, both run in processes of the scenario cluster, never in the pytest process:

- the **job**: worker classes (verl ``Worker`` subclasses fused into ``WorkerDict`` actors with
  ``create_colocated_worker_cls``, exactly as verl's trainer and ``verltop/demo`` do) whose ``act(plan)`` puts
  each rank where the plan says (``all_reduce``, ``all_gather``, ``broadcast``, ``barrier``, ``straggle``
  outside any collective until released, ``die``, ``return``), and ``TaskRunner``, a verl-like controller
  actor (class name ``TaskRunner``: verltop's role ``controller``) that builds the groups and drives them;
- the **host** (``python scenarios.py host``): starts a multi-raylet Ray cluster on this machine
  (``ray.cluster_utils.Cluster``: head + two worker nodes), creates the controller and answers JSON-line
  commands on stdin/stdout. The pytest process talks to it (``conftest.ScenarioCluster``) and never
  connects to Ray itself, so the demo cluster of ``conftest.demo`` and this one never share a driver.

Cluster layout (deterministic placement; logical CPUs only):

- head node: 5 CPUs and resource ``head``: the controller (1 CPU, pinned by ``head``) and group ``B``
  (``RayResourcePool([4])``: one STRICT_PACK placement group of 4 bundles, which fits nowhere else);
- worker nodes n1, n2: 2 CPUs each: group ``A`` (``RayResourcePool([2, 2])``: two placement groups of 2
  bundles, one per node, since after B the head has no CPU left). Ranks 0-1 of A on one node, 2-3 on the
  other (``RANK = pg_idx * 2 + local_rank``).

Group A hosts two colocated roles (``actor_rollout`` + ``critic``, tasks ``WorkerDict.actor_rollout_act``);
group B one role (``ref``). ``all_gather`` and ``broadcast`` run on a second gloo process group over the
same ranks (``dist.new_group``): with a mismatch on ONE gloo group, gloo pairs the messages of the two
different collectives and raises a size error instead of hanging, which is not what NCCL does; on separate
groups the ranks hang in their own collective, as NCCL ranks do.

Where ranks are: each rank writes ``{state_dir}/pos/{group}.{rank}`` (JSON ``{"tag", "op", "pid"}``)
right before it enters its op, and ``{state_dir}/pids/{group}.{rank}`` (``pid``, ``node_id``, ``actor_id``)
once set up. A straggling rank polls ``{state_dir}/release-{tag}`` and, once it exists, runs the rest
of its plan (``straggle>all_reduce``: straggle, then join the all_reduce).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import ray
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register

from verltop.demo.rendezvous import join_gloo

PG_TIMEOUT = timedelta(hours=1)
POLL_S = 0.2

_SIDE_GROUP: Any = None  # the second gloo group of this process (one per process: colocated roles share it)


# ----------------------------------------------------------------------------------------------- workers


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _straggle(release: Path) -> None:
    """Where a straggler sits: outside any collective, until the test releases it."""
    while not release.exists():
        time.sleep(POLL_S)


class ScenarioWorker(Worker):
    """Base of the scenario roles: a gloo group, a side group, and ``act`` that goes where the plan says."""

    role = "scenario"

    def __init__(self, state_dir: str, group: str) -> None:
        super().__init__()
        self.state_dir = Path(state_dir)
        self.group = group

    def _setup(self) -> dict[str, Any]:
        import torch
        import torch.distributed as dist

        global _SIDE_GROUP
        torch.set_num_threads(1)
        if not dist.is_initialized():
            addr, port = self.get_master_addr_port()
            note = self.state_dir / "rendezvous" / f"{os.environ.get('WG_PREFIX', 'wg')}-{port}"
            join_gloo(self.rank, self.world_size, addr, note, PG_TIMEOUT)
            _SIDE_GROUP = dist.new_group(backend="gloo", timeout=PG_TIMEOUT)
        ctx = ray.get_runtime_context()
        info = {"group": self.group, "rank": self.rank, "world_size": self.world_size, "role": self.role,
                "pid": os.getpid(), "node_id": ctx.get_node_id(), "actor_id": ctx.get_actor_id()}
        _write(self.state_dir / "pids" / f"{self.group}.{self.rank}", info)
        dist.barrier()
        return info

    def _act(self, plan: dict[str, str], tag: str) -> dict[str, Any]:
        import torch
        import torch.distributed as dist

        steps = plan.get(str(self.rank), plan.get("*", "return")).split(">")
        pos = self.state_dir / "pos" / f"{self.group}.{self.rank}"
        for op in steps:
            _write(pos, {"tag": tag, "op": op, "pid": os.getpid(), "t": time.time()})
            if op == "all_reduce":
                dist.all_reduce(torch.ones(1024))
            elif op == "all_gather":
                out = [torch.zeros(16) for _ in range(self.world_size)]
                dist.all_gather(out, torch.ones(16), group=_SIDE_GROUP)
            elif op == "broadcast":
                dist.broadcast(torch.zeros(16), src=(self.rank + 1) % self.world_size, group=_SIDE_GROUP)
            elif op == "barrier":
                dist.barrier()
            elif op == "straggle":
                _straggle(self.state_dir / f"release-{tag}")
            elif op == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            elif op != "return":
                raise ValueError(f"unknown op {op!r}")
        _write(pos, {"tag": tag, "op": "done", "pid": os.getpid(), "t": time.time()})
        return {"rank": self.rank, "done": steps}


class ActorRolloutScenario(ScenarioWorker):
    role = "actor_rollout"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def setup(self) -> dict[str, Any]:
        return self._setup()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def act(self, plan: dict[str, str], tag: str) -> dict[str, Any]:
        return self._act(plan, tag)


class CriticScenario(ScenarioWorker):
    role = "critic"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def setup(self) -> dict[str, Any]:
        return self._setup()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def act(self, plan: dict[str, str], tag: str) -> dict[str, Any]:
        return self._act(plan, tag)


class RefScenario(ScenarioWorker):
    role = "ref"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def setup(self) -> dict[str, Any]:
        return self._setup()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def act(self, plan: dict[str, str], tag: str) -> dict[str, Any]:
        return self._act(plan, tag)


# name -> (pool bundles per placement group, {role: worker class}); B first so that it takes the head node
GROUPS: dict[str, tuple[list[int], dict[str, type]]] = {
    "B": ([4], {"ref": RefScenario}),
    "A": ([2, 2], {"actor_rollout": ActorRolloutScenario, "critic": CriticScenario}),
}


# ------------------------------------------------------------------------------------ rollout servers


class SGLangHttpServer:
    """verl's ``SGLangHttpServer``, reduced to its process tree: an asyncio actor whose schedulers (one per TP
    rank) and detokenizer are its own child processes (``tests/proc_shapes.py``: titled as SGLang titles
    them, dying with their parent as SGLang's do)."""

    def __init__(self) -> None:
        self.procs: list[Any] = []

    async def launch_server(self, shapes: str) -> dict[str, Any]:
        """Start the children (``shapes``: the path of ``tests/proc_shapes.py``); their pids."""
        sys.path.insert(0, str(Path(shapes).parent))
        import proc_shapes

        pids: list[int] = []
        for spec in proc_shapes.SHAPES["sglang"]:
            p, sub = proc_shapes.spawn(spec)
            self.procs.append(p)
            pids += sub
        return {"server_pid": os.getpid(), "children": pids}


# -------------------------------------------------------------------------------------------- controller


@ray.remote(num_cpus=1)
class TaskRunner:
    """The controller, as verl's ``TaskRunner``: builds the worker groups, then drives them."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.wgs: dict[str, Any] = {}  # group -> the worker group of its first role
        self.first_role: dict[str, str] = {}

    def setup(self) -> dict[str, Any]:
        from verl.single_controller.ray import (
            RayClassWithInitArgs,
            RayResourcePool,
            RayWorkerGroup,
            create_colocated_worker_cls,
        )

        out: dict[str, Any] = {"runner_pid": os.getpid(), "groups": {}}
        for name, (bundles, roles) in GROUPS.items():
            pool = RayResourcePool(bundles, use_gpu=False, name_prefix=f"pool_{name.lower()}", max_colocate_count=1)
            class_dict = {role: RayClassWithInitArgs(cls=ray.remote(cls), state_dir=self.state_dir, group=name)
                          for role, cls in roles.items()}
            wg_dict = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=create_colocated_worker_cls(class_dict))
            spawned = wg_dict.spawn(prefix_set=class_dict.keys())
            for role in roles:  # every role joins (the process group is set up once per process)
                spawned[role].setup()
            first = next(iter(roles))
            self.wgs[name] = spawned[first]
            self.first_role[name] = first
            out["groups"][name] = {"prefix": wg_dict.name_prefix, "roles": list(roles), "world_size": wg_dict.world_size}
        return out

    def start(self, group: str, plan: dict[str, str], tag: str) -> list[Any]:
        """Launch ``act`` on every rank and return at once (the refs, for the host to wait on)."""
        wg = self.wgs[group]
        return list(wg.execute_all_async(f"{self.first_role[group]}_act", plan, tag))

    def run(self, group: str, plan: dict[str, str], tag: str) -> list[Any]:
        """Launch ``act`` and wait for every rank, in verl's own ``ray.get`` (``func_generator``)."""
        return self.wgs[group].act(plan, tag)


# -------------------------------------------------------------------------------------------------- host


class Host:
    """The scenario cluster and its controller; commands arrive as JSON lines."""

    def __init__(self, state_dir: str, nodes: int) -> None:
        from ray.cluster_utils import Cluster

        self.state_dir = state_dir
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for net
        from net import AGENT_PORT, free_port

        port = free_port()
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 5, "resources": {"head": 1}, "include_dashboard": True,
            "dashboard_host": "127.0.0.1", "dashboard_port": port, **AGENT_PORT,
        })
        for _ in range(nodes - 1):
            self.cluster.add_node(num_cpus=2)
        ray.init(address=self.cluster.address, logging_level="WARNING", log_to_driver=False)
        self.dashboard = f"http://127.0.0.1:{port}"
        self.runner = TaskRunner.options(resources={"head": 0.01}).remote(state_dir)
        self.setup = ray.get(self.runner.setup.remote(), timeout=240)
        self.pending: dict[str, list[Any]] = {}
        self.servers: list[Any] = []  # rollout-shaped servers (``rollout``), kept alive while the host runs

    def info(self) -> dict[str, Any]:
        ranks = []
        for f in sorted(Path(self.state_dir, "pids").glob("*.*")):
            if not f.name.endswith(".tmp"):
                ranks.append(json.loads(f.read_text()))
        nodes = [{"node_id": n["NodeID"], "alive": n["Alive"], "is_head": n["NodeManagerAddress"] and
                  n.get("Resources", {}).get("head", 0) > 0} for n in ray.nodes()]
        return {"dashboard": self.dashboard, "gcs": self.cluster.address, "state_dir": self.state_dir,
                "nodes": nodes, "ranks": ranks, **self.setup}

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd["cmd"]
        if op == "info":
            return self.info()
        if op == "start":
            self.pending[cmd["tag"]] = ray.get(self.runner.start.remote(cmd["group"], cmd["plan"], cmd["tag"]))
            return {}
        if op == "run":
            self.pending[cmd["tag"]] = [self.runner.run.remote(cmd["group"], cmd["plan"], cmd["tag"])]
            return {}
        if op == "wait":
            refs = self.pending.get(cmd["tag"], [])
            ready, rest = ray.wait(refs, num_returns=len(refs), timeout=cmd.get("wait_s", 30))
            out: dict[str, Any] = {"done": not rest, "errors": []}
            for r in ready:
                try:
                    ray.get(r)
                except Exception as e:  # noqa: BLE001 - reported to the test
                    out["errors"].append(" ".join(str(e).split())[:300])
            if not rest:
                self.pending.pop(cmd["tag"], None)
            return out
        if op == "rollout":
            return self.rollout()
        if op == "descendants":
            import psutil

            return {"pids": [p.pid for p in psutil.Process().children(recursive=True)]}
        raise ValueError(f"unknown command {op!r}")

    def rollout(self) -> dict[str, Any]:
        """A vLLM-shaped server (the demo's ``vLLMHttpServer``: engine core + 2 TP workers doing gloo) on the
        first worker node and an SGLang-shaped one on the second: ``{"vllm": {...}, "sglang": {...}}`` with
        their actor ids, nodes and the pids of their processes."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from verltop.demo.rollout import vLLMHttpServer

        workers = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and not n.get("Resources", {}).get("head"))
        out: dict[str, Any] = {}
        shapes = str(Path(__file__).resolve().parent.parent / "proc_shapes.py")
        for kind, cls, name, node, args, call in (
                # its engine in a session of its own, so that a killed server leaves it behind (Ray 2.60 kills
                # a dead worker's own process group)
                ("vllm", vLLMHttpServer, "vllm_server_0_0", workers[0],
                 (str(Path(self.state_dir, "rollout")), 0, 2, True), ()),
                ("sglang", SGLangHttpServer, "sglang_server_0_0", workers[1], (), (shapes,))):
            h = ray.remote(cls).options(name=name, num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                node, soft=False)).remote(*args)
            info = ray.get(h.launch_server.remote(*call), timeout=240)
            out[kind] = {"actor_id": h._actor_id.hex(), "node_id": node, **info}
            self.servers.append(h)
        return out

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            ray.shutdown()
        self.cluster.shutdown()


def _token_ready() -> None:
    """With ``RAY_AUTH_MODE=token`` (set by the caller: Ray reads it when ``ray`` is imported), reuse or
    create ``~/.ray/auth_token``, as ``ray.init()`` does for a new local cluster; verltop finds it there."""
    if os.environ.get("RAY_AUTH_MODE") != "token":
        return
    from ray._private.authentication.authentication_token_setup import ensure_token_if_auth_enabled

    ensure_token_if_auth_enabled(None, create_token_if_missing=True)


def host_main(argv: list[str]) -> int:
    import argparse
    import traceback

    p = argparse.ArgumentParser()
    p.add_argument("--state-dir", required=True)
    p.add_argument("--nodes", type=int, default=3)
    args = p.parse_args(argv)
    # the protocol owns the real stdout; anything Ray prints goes to stderr
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    _token_ready()
    t0 = time.monotonic()
    try:
        host = Host(args.state_dir, args.nodes)
    except BaseException:
        proto.write(json.dumps({"ok": False, "error": traceback.format_exc()}) + "\n")
        raise
    proto.write(json.dumps({"ok": True, "startup_s": round(time.monotonic() - t0, 1), **host.info()}) + "\n")
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            if cmd["cmd"] == "stop":
                break
            try:
                reply = {"ok": True, **host.handle(cmd)}
            except Exception:  # noqa: BLE001 - the test sees the traceback
                reply = {"ok": False, "error": traceback.format_exc()}
            proto.write(json.dumps(reply) + "\n")
    finally:
        host.stop()
        proto.write(json.dumps({"ok": True, "stopped": True}) + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["host"]:
        sys.exit(host_main(sys.argv[2:]))
    sys.exit(f"usage: {sys.argv[0]} host --state-dir DIR [--nodes N]")
