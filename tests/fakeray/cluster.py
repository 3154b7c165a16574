"""A synthetic verl job on a Ray 2.60 cluster: pure data generation, deterministic for a seed.

Everything is a function of (config, seed, clock time, runtime mutations), so two clusters with the same
config and clock answer the same bytes. The shapes are copied from real Ray 2.60 captures
(``tests/fixtures/real-gpu/ray-gpu-cluster/hung/``): same key names, same types (``num_restarts``
is a string, task times are floats, ``/nodes`` is camelCase, ...).

The job (verl's ``RayPPOTrainer`` layout):

- one ``TaskRunner`` actor (unnamed, head node) running ``TaskRunner.run`` forever;
- one colocated ``WorkerDict`` group, one actor per GPU, named ``{rand6}WorkerDict_{pg_idx}:{local_rank}``, with
  ``RANK``/``WORLD_SIZE``/``WG_PREFIX``/... and the planted secrets in ``serialized_runtime_env``;
- optionally a second ``WorkerDict`` group on the last ``rm_nodes`` nodes (reward model, ``rm_compute_rm_score``);
- ``vllm_server_{r}_{n}`` (``vLLMHttpServer``, one per node by default) whose vLLM GPU children are non-Ray
  processes that show up only in ``gpus[].processesPids``;
- ``agent_loop_worker_{i}_{hex8}`` (``AgentLoopWorker``); filler actors (``extra_actors``) and DEAD ones.

A PPO step cycles through ``phases`` on the clock; each phase with a WorkerDict method gives every rank a
RUNNING actor task, then a FINISHED one. ``hang_at_s`` / :meth:`FakeCluster.set_hang` freezes the step in a
stuck collective: every rank stays RUNNING in the same method, the waiting ranks' GPUs read 100 % and the
straggler's 0 %. :meth:`FakeCluster.kill_rank` does the same with the straggler DEAD.
"""

from __future__ import annotations

import bisect
import json
import math
import random
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

JOB_ID = "01000000"
DRIVER_TASK_ID = "f" * 40 + JOB_ID
NIL_ACTOR_ID = "f" * 32
M64 = (1 << 64) - 1
GIB = 1 << 30
MIB = 1 << 20

# Values that verltop must never display. They sit in every verl actor's serialized_runtime_env, as they do
# when a user passes them through ``ray_kwargs.ray_init.runtime_env.env_vars``.
PLANTED_SECRETS = {
    "WANDB_API_KEY": "sk-fake-wandb-4f3c9a1b7e2d48c0a5b6f1e2d3c4b5a6",
    "HF_TOKEN": "hf_fakeTokenQ7w8e9r0t1y2u3i4o5p6a7s8d9",
}
JOB_ENV = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "VLLM_LOGGING_LEVEL": "WARN",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    **PLANTED_SECRETS,
}

WORKER_DICT_CLASS = "create_colocated_worker_cls.<locals>.WorkerDict"
RUNTIME_ENV_CONFIG = {"setup_timeout_seconds": 600, "eager_install": True, "log_files": []}

# Column order of Ray 2.60's schemas (ray.util.state.common); "base" = detail=False.
ACTOR_COLUMNS = (
    "actor_id", "class_name", "state", "job_id", "name", "node_id", "pid", "ray_namespace",
    "serialized_runtime_env", "required_resources", "death_cause", "is_detached", "placement_group_id",
    "repr_name", "num_restarts", "num_restarts_due_to_lineage_reconstruction",
    "num_restarts_due_to_node_preemption", "call_site", "label_selector", "fallback_strategy",
)
ACTOR_BASE_COLUMNS = ("actor_id", "class_name", "state", "job_id", "name", "node_id", "pid", "ray_namespace")
ACTOR_FILTERABLE = frozenset({
    "actor_id", "class_name", "job_id", "name", "node_id", "pid", "placement_group_id", "ray_namespace",
    "repr_name", "state",
})
TASK_COLUMNS = (
    "task_id", "attempt_number", "name", "state", "job_id", "actor_id", "type", "func_or_class_name",
    "parent_task_id", "node_id", "worker_id", "worker_pid", "error_type", "language", "required_resources",
    "runtime_env_info", "placement_group_id", "events", "profiling_data", "creation_time_ms", "start_time_ms",
    "end_time_ms", "task_log_info", "error_message", "is_debugger_paused", "call_site", "label_selector",
    "fallback_strategy",
)
TASK_BASE_COLUMNS = (
    "task_id", "attempt_number", "name", "state", "job_id", "actor_id", "type", "func_or_class_name",
    "parent_task_id", "node_id", "worker_id", "worker_pid", "error_type",
)
TASK_FILTERABLE = frozenset({
    "actor_id", "attempt_number", "error_type", "func_or_class_name", "is_debugger_paused", "job_id",
    "language", "name", "node_id", "parent_task_id", "placement_group_id", "state", "task_id", "type",
    "worker_id", "worker_pid",
})
NODE_COLUMNS = (
    "node_id", "node_ip", "is_head_node", "state", "state_message", "node_name", "resources_total", "labels",
    "start_time_ms", "end_time_ms",
)
NODE_BASE_COLUMNS = (
    "node_id", "node_ip", "is_head_node", "state", "state_message", "node_name", "resources_total", "labels",
)
NODE_FILTERABLE = frozenset({"is_head_node", "node_id", "node_ip", "node_name", "state"})
WORKER_COLUMNS = (
    "worker_id", "is_alive", "worker_type", "exit_type", "node_id", "ip", "pid", "exit_detail",
    "worker_launch_time_ms", "worker_launched_time_ms", "start_time_ms", "end_time_ms", "debugger_port",
    "num_paused_threads",
)
WORKER_BASE_COLUMNS = ("worker_id", "is_alive", "worker_type", "exit_type", "node_id", "ip", "pid")
WORKER_FILTERABLE = frozenset({
    "debugger_port", "exit_type", "ip", "is_alive", "node_id", "num_paused_threads", "pid", "worker_id",
    "worker_type",
})
# Columns whose filter values Ray converts to int / bool before comparing.
INT_COLUMNS = frozenset({"pid", "worker_pid", "attempt_number", "debugger_port", "num_paused_threads"})
BOOL_COLUMNS = frozenset({"is_head_node", "is_debugger_paused", "is_alive", "is_detached"})


def to_camel_case(snake: str) -> str:
    """Ray's ``to_camel_case`` (dashboard/utils.py), digits and all: ``GPU_group_1_3cb6`` → ``GPUGroup13Cb6``."""
    parts = snake.split("_")
    return parts[0] + "".join(x.title() for x in parts[1:])


def _mix(*xs: int) -> int:
    """A fast deterministic 64-bit hash of small ints (splitmix64 steps)."""
    h = 0x243F6A8885A308D3
    for x in xs:
        h = (h ^ (x & M64)) + 0x9E3779B97F4A7C15 & M64
        h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9 & M64
        h = (h ^ (h >> 27)) * 0x94D049BB133111EB & M64
        h ^= h >> 31
    return h


def _u(*xs: int) -> float:
    """Uniform [0, 1) from ints."""
    return (_mix(*xs) >> 11) / float(1 << 53)


def _hex(h: int, n: int) -> str:
    return format(h & ((1 << (4 * n)) - 1), f"0{n}x")


# ---------------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class Phase:
    """One timed section of a PPO step.

    ``kind``: ``worker`` (every rank of ``group`` runs ``WorkerDict.{method}``), ``driver`` (only TaskRunner
    works, e.g. advantage computation) or ``gen_async`` (AgentLoopWorker.generate_sequences and
    vLLMHttpServer.generate run; WorkerDicts idle).
    """

    name: str
    method: str | None
    seconds: float
    group: str = "main"
    kind: str = "worker"


_METHODS = {
    # phase name: (legacy engine method, new engine method)
    "gen": ("actor_rollout_generate_sequences", "actor_rollout_ref_generate_sequences"),
    "reward": ("rm_compute_rm_score", "rm_compute_rm_score"),
    "old_log_prob": ("actor_rollout_compute_log_prob", "actor_rollout_ref_compute_log_prob"),
    "ref": ("ref_compute_ref_log_prob", "actor_rollout_ref_compute_ref_log_prob"),
    "values": ("critic_compute_values", "critic_infer_batch"),
    "update_critic": ("critic_update_critic", "critic_train_mini_batch"),
    "update_actor": ("actor_rollout_update_actor", "actor_rollout_ref_update_actor"),
    "update_weights": ("actor_rollout_update_weights", "actor_rollout_ref_update_weights"),
}
_DEFAULT_SECONDS = {
    "gen": 24.0, "reward": 3.0, "old_log_prob": 6.0, "ref": 5.0, "values": 4.0, "adv": 1.5,
    "update_critic": 8.0, "update_actor": 12.0, "update_weights": 2.5,
}


@dataclass
class ClusterConfig:
    nodes: int = 2
    gpus_per_node: int = 8
    cpus_per_node: int = 192
    mem_per_node: int = 2 * 1024 * GIB
    gpu_name: str = "NVIDIA H200"
    gpu_mem_mib: int = 143771
    # "async" (verl ≥0.7 default: agent loop + vLLM HTTP servers) or "sync" (generate inside WorkerDict)
    rollout_mode: str = "async"
    # "legacy" (actor_rollout_/ref_/critic_ keys) or "new" (actor_rollout_ref_ + critic TrainingWorker)
    engine: str = "legacy"
    rollout_servers: int | None = None  # default: one per main-group node in async mode, none in sync mode
    server_concurrency: int = 4  # RUNNING vLLMHttpServer.generate calls per server during gen
    agent_loop_workers: int | None = None  # default 8 in async mode, none in sync mode
    rm_nodes: int = 0  # last N nodes hold a separate reward-model WorkerDict group
    critic: bool = True
    ref: bool = True
    extra_actors: int = 0  # filler CPU actors (to reach e.g. 10,000 actors)
    dead_actors: int = 0  # extra DEAD actors with Ray's nested death_cause
    idle_workers_per_node: int = 2  # ray::IDLE pre-started workers
    profiling: bool = False  # RAY_DASHBOARD_ENABLE_PROFILING: /worker/traceback answers py-spy text
    token: str | None = None  # RAY_AUTH_MODE=token with this token
    seed: int = 1
    phases: list[Phase] | None = None  # None: the verl legacy-trainer step for the options above
    phase_seconds: dict[str, float] = field(default_factory=dict)  # override some default lengths
    speed: float = 1.0  # divides every phase length (a faster training loop; timestamps stay wall-clock)
    history_s: float | None = None  # how long training has run when the cluster is created (default 1.4 steps)
    startup_s: float = 90.0  # actor creation + init_model before training
    hang_at_s: float | None = None  # seconds after creation at which a collective hangs
    hang_rank: int = 0  # the straggler: its GPU idles while its peers spin at 100 %
    max_finished_tasks: int = 2000  # recent FINISHED actor tasks kept (creation/init tasks come on top)
    creation_tasks: bool = True  # list ACTOR_CREATION_TASK and *_init_model rows
    report_interval_s: float = 5.0  # node stats (/nodes) refresh like the reporter agent
    tick_s: float = 0.5  # task state is recomputed at most once per tick
    cmdline_pad: int = 800  # trailing "" in process titles (Ray overwrites argv in place)
    worker_core_stats: bool = True  # merge coreWorkerStats into /nodes/{id} workers[] (real 2.60 is often [])
    nccl_timeout_s: float = 600.0  # watchdog lines appear in the waiting ranks' .err this long after a hang
    taskrunner_name: str = ""  # verl leaves it unnamed
    ray_version: str = "2.60.0"


class FakeClock:
    """A manual clock for deterministic tests: ``FakeCluster(clock=clk)``; ``clk.advance(5)``."""

    def __init__(self, start: float | None = None) -> None:
        self.t = float(start if start is not None else time.time())
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> float:
        with self._lock:
            self.t += dt
            return self.t

    def set(self, t: float) -> None:
        self.t = float(t)


# ---------------------------------------------------------------------------------------------- model


@dataclass(eq=False)
class Proc:
    pid: int
    node: int
    kind: str  # agent | runtime_env_agent | idle | driver | actor | vllm_child
    create_time: float
    worker_id: str = ""
    port: int = 0
    actor: Actor | None = None
    gpu: int | None = None  # vllm_child: its GPU index
    cmd: tuple[str, ...] = ()


@dataclass(eq=False)
class Actor:
    idx: int
    actor_id: str
    class_name: str
    cls: str  # __name__ used in task names and process titles (WorkerDict, TaskRunner, ...)
    name: str
    role: str  # taskrunner | worker | rm_worker | server | agent_loop | extra | dead
    node: int
    proc: Proc
    created: float  # seconds
    runtime_env: str
    required_resources: dict[str, float]
    pg_id: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    pg_idx: int | None = None
    group: str | None = None
    state: str = "ALIVE"
    death_cause: dict | None = None
    died_at: float | None = None
    row: dict | None = None  # cached /api/v0/actors detail row
    used_resources: dict | None = None  # cached coreWorkerStats.usedResources


@dataclass(eq=False)
class NodeInfo:
    idx: int
    node_id: str
    ip: str
    hostname: str
    is_head: bool
    start: float
    gpu_uuids: list[str]
    procs: list[Proc] = field(default_factory=list)
    by_pid: dict[int, Proc] = field(default_factory=dict)
    actors: list[Actor] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    boot: float = 0.0
    pg_id: str | None = None
    pg_group: str | None = None
    agent_pid: int = 0
    raylet_pid: int = 0
    gcs_pid: int = 0


@dataclass(eq=False)
class Inst:
    """One actor-task attempt on the timeline."""

    key: tuple
    actor: Actor
    name: str
    start: float
    end: float | None  # None: still running forever (hung)
    parent: str
    final: str = "FINISHED"  # or FAILED
    error: str | None = None


@dataclass
class _Hang:
    at: float  # when it was asked for
    rank: int
    dead: bool
    k: int = 0
    p: int = 0
    start: float = 0.0


class FakeCluster:
    """The cluster model. ``FakeCluster(nodes=128, gpus_per_node=8, seed=1)`` or ``FakeCluster(config)``.

    Thread-safe: the HTTP server reads it from its own thread while a test mutates it.
    """

    def __init__(self, config: ClusterConfig | None = None, *, clock: Callable[[], float] | None = None,
                 **overrides: Any) -> None:
        cfg = config or ClusterConfig()
        if overrides:
            names = {f.name for f in fields(ClusterConfig)}
            bad = set(overrides) - names
            if bad:
                raise TypeError(f"unknown ClusterConfig fields: {sorted(bad)}")
            cfg = ClusterConfig(**{**{f.name: getattr(cfg, f.name) for f in fields(ClusterConfig)}, **overrides})
        if cfg.nodes < 1 or cfg.gpus_per_node < 0:
            raise ValueError("need at least one node")
        if cfg.rm_nodes >= cfg.nodes:
            raise ValueError("rm_nodes must leave at least one node for the main group")
        self.config = cfg
        self.clock: Callable[[], float] = clock or time.time
        self._lock = threading.RLock()
        self.version = 0  # bumped by every mutation
        self.created_at = self.clock()
        self.profiling = cfg.profiling
        self.token = cfg.token
        self._phases = self._make_phases()
        self._durs = [max(1e-3, p.seconds / cfg.speed) for p in self._phases]
        self._offs = [0.0]
        for d in self._durs:
            self._offs.append(self._offs[-1] + d)
        self.step_len = self._offs[-1]
        hist = cfg.history_s if cfg.history_s is not None else 1.4 * self.step_len
        self.train_start = self.created_at - max(0.0, hist)
        self.job_start = self.train_start - max(10.0, cfg.startup_s)
        self._hang: _Hang | None = None
        self._build()
        if cfg.hang_at_s is not None:
            self.set_hang(rank=cfg.hang_rank, at=self.created_at + cfg.hang_at_s)
        self._task_cache: dict[tuple, dict] = {}
        self._inst_cache: dict[tuple, list[Inst]] = {}
        self._task_snap: tuple[tuple, TaskSnapshot] | None = None
        self._node_snap: tuple[tuple, NodeSnapshot] | None = None
        self._static_tasks: list[dict] | None = None

    # ------------------------------------------------------------------------------------------ build

    def _make_phases(self) -> list[Phase]:
        cfg = self.config
        if cfg.phases is not None:
            return [p if isinstance(p, Phase) else Phase(*p) for p in cfg.phases]
        eng = 0 if cfg.engine == "legacy" else 1
        secs = {**_DEFAULT_SECONDS, **cfg.phase_seconds}
        out = []
        if cfg.rollout_mode == "sync":
            out.append(Phase("gen", _METHODS["gen"][eng], secs["gen"]))
        else:
            out.append(Phase("gen", None, secs["gen"], kind="gen_async"))
        if cfg.rm_nodes:
            out.append(Phase("reward", _METHODS["reward"][eng], secs["reward"], group="rm"))
        out.append(Phase("old_log_prob", _METHODS["old_log_prob"][eng], secs["old_log_prob"]))
        if cfg.ref:
            out.append(Phase("ref", _METHODS["ref"][eng], secs["ref"]))
        if cfg.critic:
            out.append(Phase("values", _METHODS["values"][eng], secs["values"]))
        out.append(Phase("adv", None, secs["adv"], kind="driver"))
        if cfg.critic:
            out.append(Phase("update_critic", _METHODS["update_critic"][eng], secs["update_critic"]))
        out.append(Phase("update_actor", _METHODS["update_actor"][eng], secs["update_actor"]))
        if cfg.rollout_mode != "sync":
            out.append(Phase("update_weights", _METHODS["update_weights"][eng], secs["update_weights"]))
        return out

    def _build(self) -> None:
        cfg = self.config
        rng = random.Random(cfg.seed)

        def rhex(n: int) -> str:
            return format(rng.getrandbits(4 * n), f"0{n}x")

        self.namespace = f"{rhex(8)}-{rhex(4)}-4{rhex(3)}-a{rhex(3)}-{rhex(12)}"
        self.session = "session_2026-11-29_13-51-02_622971_1239"
        self.cluster_id = rhex(56)
        self.nodes: list[NodeInfo] = []
        used_ids: set[str] = set()

        def uid(n: int) -> str:
            while True:
                v = rhex(n)
                if v not in used_ids:
                    used_ids.add(v)
                    return v

        for i in range(cfg.nodes):
            ip = f"10.{1 + (i >> 14)}.{(i >> 6) & 255}.{(i & 63) + 2}" if i else "10.0.0.1"
            uuids = [f"GPU-{rhex(8)}-{rhex(4)}-{rhex(4)}-{rhex(4)}-{rhex(12)}" for _ in range(cfg.gpus_per_node)]
            n = NodeInfo(
                idx=i, node_id=uid(56), ip=ip, hostname=f"gpu-node-{i:04d}", is_head=(i == 0),
                start=self.job_start - 30.0 - rng.random() * 20.0, gpu_uuids=uuids,
            )
            n.boot = n.start - 3600.0 - rng.random() * 86400.0
            n.ports = {
                "nodeManagerPort": rng.randint(40000, 45000), "objectManagerPort": rng.randint(40000, 45000),
                "metricsExportPort": rng.randint(30000, 39999), "runtimeEnvAgentPort": rng.randint(40000, 45000),
                "metricsAgentPort": rng.randint(30000, 39999), "dashboardAgentListenPort": 52365,
            }
            self.nodes.append(n)
        # the State API and the dashboard order nodes by id; keep creation order here, sort when serving
        pid_next = [1900 + rng.randint(0, 200) for _ in self.nodes]

        def new_proc(node: NodeInfo, kind: str, created: float, **kw: Any) -> Proc:
            pid_next[node.idx] += rng.randint(1, 3)
            p = Proc(pid=pid_next[node.idx], node=node.idx, kind=kind, create_time=created, **kw)
            node.procs.append(p)
            node.by_pid[p.pid] = p
            return p

        for n in self.nodes:
            if n.is_head:
                n.gcs_pid = pid_next[0] - 600
            n.raylet_pid = pid_next[n.idx] - 300
            n.agent_pid = new_proc(n, "agent", n.start + 1.2).pid
            new_proc(n, "runtime_env_agent", n.start + 1.3)
        head = self.nodes[0]
        self.driver = new_proc(
            head, "driver", self.job_start, worker_id=JOB_ID + "f" * 48, port=rng.randint(10002, 19999),
            cmd=("python3", "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=gae",
                 f"trainer.nnodes={cfg.nodes}", f"trainer.n_gpus_per_node={cfg.gpus_per_node}",
                 "actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.rollout.mode={cfg.rollout_mode}"),
        )
        for n in self.nodes:
            for _ in range(cfg.idle_workers_per_node):
                new_proc(n, "idle", n.start + 3.0 + rng.random(), worker_id=uid(56), port=rng.randint(10002, 19999))

        self.actors: list[Actor] = []
        self.by_actor_id: dict[str, Actor] = {}

        def new_actor(node: NodeInfo, cls: str, class_name: str, name: str, role: str, created: float,
                      env: dict | None, resources: dict[str, float], **kw: Any) -> Actor:
            proc = new_proc(node, "actor", created - 1.5, worker_id=uid(56), port=rng.randint(10002, 19999))
            a = Actor(
                idx=len(self.actors), actor_id=uid(24) + JOB_ID, class_name=class_name, cls=cls, name=name,
                role=role, node=node.idx, proc=proc, created=created,
                runtime_env=json.dumps(env, sort_keys=True) if env else "{}",
                required_resources=resources, **kw,
            )
            proc.actor = a
            node.actors.append(a)
            self.actors.append(a)
            self.by_actor_id[a.actor_id] = a
            return a

        t = self.job_start + 2.0
        self.taskrunner = new_actor(
            head, "TaskRunner", "TaskRunner", cfg.taskrunner_name, "taskrunner", t, {"env_vars": JOB_ENV},
            {"CPU": 1.0},
        )
        G = cfg.gpus_per_node
        main_nodes = self.nodes[: cfg.nodes - cfg.rm_nodes]
        rm_nodes = self.nodes[cfg.nodes - cfg.rm_nodes:]
        self.groups: dict[str, list[Actor]] = {"main": [], "rm": []}
        self.group_prefix: dict[str, str] = {}
        master_port = rng.randint(20000, 65000)
        for gname, gnodes in (("main", main_nodes), ("rm", rm_nodes)):
            if not gnodes or not G:
                continue
            alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
            prefix = "".join(rng.choice(alnum) for _ in range(6))
            self.group_prefix[gname] = prefix
            world = len(gnodes) * G
            for pg_idx, n in enumerate(gnodes):
                pg = rhex(28) + JOB_ID
                n.pg_id, n.pg_group = pg, gname
                for lr in range(G):
                    rank = pg_idx * G + lr
                    env = {
                        **JOB_ENV, "WORLD_SIZE": str(world), "RANK": str(rank), "WG_PREFIX": prefix,
                        "WG_BACKEND": "ray", "RAY_LOCAL_WORLD_SIZE": str(G), "MASTER_ADDR": gnodes[0].ip,
                        "MASTER_PORT": str(master_port + (gname == "rm")),
                    }
                    res = {
                        f"CPU_group_{lr}_{pg}": 1.0, f"bundle_group_{pg}": 0.001, f"CPU_group_{pg}": 1.0,
                        f"bundle_group_{lr}_{pg}": 0.001, f"GPU_group_{pg}": 1.0, f"GPU_group_{lr}_{pg}": 1.0,
                    }
                    a = new_actor(
                        n, "WorkerDict", WORKER_DICT_CLASS, f"{prefix}WorkerDict_{pg_idx}:{lr}",
                        "worker" if gname == "main" else "rm_worker",
                        self.job_start + 5.0 + 0.002 * rank + rng.random() * 0.5, {"env_vars": env}, res,
                        pg_id=pg, rank=rank, local_rank=lr, pg_idx=pg_idx, group=gname,
                    )
                    a.proc.gpu = lr
                    self.groups[gname].append(a)

        async_mode = cfg.rollout_mode != "sync"
        n_servers = cfg.rollout_servers if cfg.rollout_servers is not None else (len(main_nodes) if async_mode else 0)
        self.servers: list[Actor] = []
        for s in range(n_servers):
            n = main_nodes[s % len(main_nodes)]
            env = {"env_vars": {**JOB_ENV, "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
                                "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in range(G))}}
            a = new_actor(n, "vLLMHttpServer", "vLLMHttpServer", f"vllm_server_{s}_0", "server",
                          self.job_start + 72.0 + 0.01 * s, env, {"CPU": 1.0})
            self.servers.append(a)
            if s < len(main_nodes):  # vLLM's own GPU processes (non-Ray children of the server)
                for g in range(G):
                    new_proc(n, "vllm_child", a.created + 5.0, gpu=g, actor=a,
                             cmd=(f"VLLM::Worker_TP{g}",))
        n_agents = cfg.agent_loop_workers if cfg.agent_loop_workers is not None else (8 if async_mode else 0)
        self.agent_loops: list[Actor] = []
        for i in range(n_agents):
            n = self.nodes[i % len(self.nodes)]
            a = new_actor(n, "AgentLoopWorker", "AgentLoopWorker", f"agent_loop_worker_{i}_{rhex(8)}",
                          "agent_loop", self.job_start + 80.0 + 0.01 * i, {"env_vars": JOB_ENV}, {"CPU": 1.0})
            self.agent_loops.append(a)
        extra_kinds = (("RewardLoopWorker", "reward_loop_worker_{i}"), ("ExecutionWorker", ""),
                       ("SimpleStorageUnit", ""), ("TokenBucketWorker", ""))
        self.extras: list[Actor] = []
        for i in range(cfg.extra_actors):
            cls, pat = extra_kinds[i % len(extra_kinds)]
            if cls == "TokenBucketWorker":
                pat = "rate-limiter" if i == 3 else ""
            n = self.nodes[i % len(self.nodes)]
            a = new_actor(n, cls, cls, pat.format(i=i), "extra", self.job_start + 82.0 + 0.0005 * i, None,
                          {"CPU": 0.01 if cls != "RewardLoopWorker" else 1.0})
            self.extras.append(a)
        for i in range(cfg.dead_actors):
            n = self.nodes[i % len(self.nodes)]
            a = new_actor(n, "RewardComputeWorker", "RewardComputeWorker", "", "dead",
                          self.job_start + 84.0 + 0.001 * i, None, {"CPU": 1.0})
            self._make_dead(a, self.job_start + 86.0 + i % 50, _DEATHS[i % len(_DEATHS)])
        self.workers = self.groups["main"]
        self.rm_workers = self.groups["rm"]

    # ------------------------------------------------------------------------------------------ time

    def now(self) -> float:
        return self.clock()

    def _pos(self, t: float) -> tuple[int, int]:
        """(step ≥ 1, phase index) on the unfrozen timeline."""
        rel = max(0.0, t - self.train_start)
        k = int(rel // self.step_len)
        r = rel - k * self.step_len
        p = min(len(self._durs) - 1, bisect.bisect_right(self._offs, r) - 1)
        return k + 1, p

    def _bounds(self, k: int, p: int) -> tuple[float, float]:
        s = self.train_start + (k - 1) * self.step_len + self._offs[p]
        return s, s + self._durs[p]

    def _prev(self, k: int, p: int) -> tuple[int, int] | None:
        if p > 0:
            return k, p - 1
        if k > 1:
            return k - 1, len(self._phases) - 1
        return None

    def _frozen(self, t: float) -> bool:
        h = self._hang
        return h is not None and t >= h.start

    def position(self, t: float | None = None) -> dict:
        """Where the job is: step, phase (name, method), phase start/end, hung or not."""
        with self._lock:
            t = self.now() if t is None else t
            if self._frozen(t):
                k, p = self._hang.k, self._hang.p
                s, _ = self._bounds(k, p)
                e = None
            else:
                k, p = self._pos(t)
                s, e = self._bounds(k, p)
            ph = self._phases[p]
            return {"step": k, "phase": ph.name, "method": ph.method, "kind": ph.kind, "start": s, "end": e,
                    "hung": self._frozen(t), "t": t}

    # ------------------------------------------------------------------------------------------ mutations

    def set_hang(self, rank: int = 0, at: float | None = None, dead: bool = False) -> None:
        """From ``at`` (default now) the next WorkerDict phase never ends: every rank stays RUNNING in its
        method; ``rank`` is the straggler (GPU 0 %, CPU ~0 %) or, with ``dead``, a killed actor."""
        with self._lock:
            at = self.now() if at is None else at
            grp = self.groups["main"]
            if not grp:
                raise ValueError("no WorkerDict group to hang")
            if not 0 <= rank < len(grp):
                raise ValueError(f"rank {rank} out of range 0..{len(grp) - 1}")
            k, p = self._pos(at)
            while not (self._phases[p].kind == "worker" and self._phases[p].group == "main"):
                k, p = (k, p + 1) if p + 1 < len(self._phases) else (k + 1, 0)
            s, _ = self._bounds(k, p)
            self._hang = _Hang(at=at, rank=rank, dead=dead, k=k, p=p, start=s)
            self.version += 1

    def clear_hang(self) -> None:
        with self._lock:
            self._hang = None
            self.version += 1

    def kill_rank(self, rank: int, at: float | None = None, group: str = "main") -> Actor:
        """Rank ``rank``'s WorkerDict dies (WORKER_DIED); its peers hang in their collective."""
        with self._lock:
            at = self.now() if at is None else at
            a = self.groups[group][rank]
            self._make_dead(a, at, _DEATHS[0])
            if group == "main":
                self.set_hang(rank=rank, at=at, dead=True)
            self.version += 1
            return a

    def kill_actor(self, actor_id: str, at: float | None = None, cause: int = 0) -> Actor:
        """Mark any actor DEAD (``cause`` indexes the canned death causes). Killing a main-group rank
        also hangs its peers, as :meth:`kill_rank` does."""
        with self._lock:
            a = self.by_actor_id[actor_id]
            if a.group == "main" and a.rank is not None:
                return self.kill_rank(a.rank, at)
            self._make_dead(a, self.now() if at is None else at, _DEATHS[cause % len(_DEATHS)])
            self.version += 1
            return a

    def _make_dead(self, a: Actor, at: float, cause: tuple[str, str]) -> None:
        kind, msg = cause
        a.state = "DEAD"
        a.died_at = at
        if kind == "oom_context":
            a.death_cause = {"oom_context": {"error_message": msg.format(pid=a.proc.pid, ip=self.nodes[a.node].ip),
                                             "fail_immediately": False}}
        elif kind == "creation_task_failure_context":
            a.death_cause = {"creation_task_failure_context": {
                "language": "PYTHON", "serialized_exception": "",
                "formatted_exception_string": msg.format(cls=a.cls, pid=a.proc.pid)}}
        else:
            reason = {"died": "WORKER_DIED", "kill": "RAY_KILL", "scope": "OUT_OF_SCOPE"}[kind]
            a.death_cause = {"actor_died_error_context": {
                "error_message": msg.format(cls=a.class_name, name=a.name, actor_id=a.actor_id, pid=a.proc.pid,
                                            ip=self.nodes[a.node].ip),
                "owner_id": self.taskrunner.proc.worker_id if a is not self.taskrunner else self.driver.worker_id,
                "owner_ip_address": self.nodes[0].ip,
                "node_ip_address": self.nodes[a.node].ip,
                "pid": a.proc.pid,
                "name": a.name,
                "ray_namespace": self.namespace,
                "class_name": a.class_name,
                "actor_id": a.actor_id,
                "never_started": False,
                "node_death_info": {"reason": "UNEXPECTED_TERMINATION" if reason == "WORKER_DIED"
                                    else "EXPECTED_TERMINATION", "reason_message": ""},
                "reason": reason,
            }}
        a.row = None

    # ------------------------------------------------------------------------------------------ actors

    def actor_row(self, a: Actor) -> dict:
        """The /api/v0/actors?detail=1 row (cached until the actor changes)."""
        if a.row is None:
            a.row = {
                "actor_id": a.actor_id,
                "class_name": a.class_name,
                "state": a.state,
                "job_id": JOB_ID,
                "name": a.name,
                "node_id": self.nodes[a.node].node_id,
                "pid": a.proc.pid,
                "ray_namespace": self.namespace,
                "serialized_runtime_env": a.runtime_env,
                "required_resources": dict(a.required_resources),
                "death_cause": a.death_cause,
                "is_detached": False,
                "placement_group_id": a.pg_id,
                "repr_name": "",
                "num_restarts": "0",
                "num_restarts_due_to_lineage_reconstruction": "0",
                "num_restarts_due_to_node_preemption": "0",
                "call_site": None,
                "label_selector": {},
                "fallback_strategy": None,
            }
        return a.row

    def actor_rows(self) -> list[dict]:
        with self._lock:
            return [self.actor_row(a) for a in self.actors]

    def alive(self, a: Actor, t: float) -> bool:
        return a.died_at is None or t < a.died_at

    # ------------------------------------------------------------------------------------------ tasks

    def _phase_insts(self, k: int, p: int, t: float) -> list[Inst]:
        """Task attempts of phase (k, p) that had started by ``t``."""
        s, e = self._bounds(k, p)
        if s > t:
            return []
        h = self._hang
        if e + 0.001 < t and (h is None or (k, p) < (h.k, h.p)):
            key = (k, p, self.version)
            got = self._inst_cache.get(key)
            if got is None:  # an ended phase never changes: cache its attempts
                if len(self._inst_cache) > 4 * len(self._phases) + 8:
                    self._inst_cache.clear()
                got = self._inst_cache[key] = self._phase_insts_uncached(k, p, s, e, e + 1.0)
            return got
        return self._phase_insts_uncached(k, p, s, e, t)

    def _phase_insts_uncached(self, k: int, p: int, s: float, e: float, t: float) -> list[Inst]:
        ph = self._phases[p]
        seed = self.config.seed
        h = self._hang
        frozen_here = h is not None and (h.k, h.p) == (k, p)
        tr_task = self._taskrunner_run_id()
        out: list[Inst] = []
        if ph.kind == "worker":
            name = f"WorkerDict.{ph.method}"
            dur = e - s
            for a in self.groups.get(ph.group, ()):
                st = s + 0.002 + 0.05 * _u(seed, 1, k, p, a.idx)
                if st > t:
                    continue
                if a.died_at is not None and a.died_at <= st:
                    out.append(Inst((k, p, a.idx, 0), a, name, st, st + 0.001, tr_task, "FAILED",
                                    self._actor_died_msg(a)))
                    continue
                en = None if frozen_here else e - 0.03 * dur * _u(seed, 2, k, p, a.idx)
                if a.died_at is not None and (en is None or a.died_at < en):
                    out.append(Inst((k, p, a.idx, 0), a, name, st, a.died_at, tr_task, "FAILED",
                                    self._actor_died_msg(a)))
                    continue
                out.append(Inst((k, p, a.idx, 0), a, name, st, en, tr_task))
        elif ph.kind == "gen_async":
            dur = e - s
            agent_ids = []
            for a in self.agent_loops:
                st = s + 0.01 + 0.05 * _u(seed, 3, k, p, a.idx)
                if (a.died_at is not None and a.died_at <= st) or st > t:
                    continue
                en = e - 0.02 * dur * _u(seed, 4, k, p, a.idx)
                inst = Inst((k, p, a.idx, 0), a, "AgentLoopWorker.generate_sequences", st, en, tr_task)
                out.append(inst)
                agent_ids.append(self._task_id(inst.key, a))
            for si, a in enumerate(self.servers):
                if a.died_at is not None:
                    continue
                parent = agent_ids[si % len(agent_ids)] if agent_ids else tr_task
                for j in range(self.config.server_concurrency):
                    cur = s + 0.05 + 0.2 * _u(seed, 5, k, p, a.idx, j)
                    n = 0
                    while cur < e - 0.05 and cur <= t:
                        d = dur * (0.05 + 0.2 * _u(seed, 6, k, p, a.idx, j, n))
                        en = min(cur + d, e - 0.02)
                        out.append(Inst((k, p, a.idx, 1 + j * 1000 + n), a, "vLLMHttpServer.generate", cur, en,
                                        parent))
                        cur = en + 0.001 + 0.01 * _u(seed, 7, k, p, a.idx, j, n)
                        n += 1
        return out

    def _actor_died_msg(self, a: Actor) -> str:
        dc = a.death_cause or {}
        ctx = dc.get("actor_died_error_context") or {}
        return ctx.get("error_message") or "The actor died unexpectedly before finishing this task."

    def _taskrunner_run_id(self) -> str:
        return _hex(_mix(self.config.seed, 99, self.taskrunner.idx), 16) + self.taskrunner.actor_id

    def _task_id(self, key: tuple, a: Actor) -> str:
        if key[0] == "run":
            return self._taskrunner_run_id()
        xs = [x if isinstance(x, int) else zlib.crc32(str(x).encode()) for x in key]
        return _hex(_mix(self.config.seed, 11, *xs), 16) + a.actor_id

    def _task_row(self, inst: Inst, t: float) -> dict:
        running = inst.end is None or inst.end > t
        state = "RUNNING" if running else inst.final
        ck = (inst.key, state)
        row = self._task_cache.get(ck)
        if row is not None:
            return row
        a = inst.actor
        node = self.nodes[a.node]
        tid = self._task_id(inst.key, a)
        c0 = math.floor(inst.start * 1000.0) - 1.0
        st = float(math.floor(inst.start * 1000.0))
        events = [
            {"state": "PENDING_ARGS_AVAIL", "created_ms": c0},
            {"state": "PENDING_NODE_ASSIGNMENT", "created_ms": c0},
            {"state": "SUBMITTED_TO_WORKER", "created_ms": c0},
            {"state": "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY", "created_ms": st},
            {"state": "RUNNING", "created_ms": st},
        ]
        prof = [{"start_time": inst.start * 1000.0 + 0.3, "end_time": inst.start * 1000.0 + 0.31,
                 "extra_data": {}, "event_name": "task:deserialize_arguments"}]
        end_ms = None
        if not running:
            end_ms = float(math.floor(inst.end * 1000.0))
            events.append({"state": state, "created_ms": end_ms})
            prof += [
                {"start_time": inst.start * 1000.0 + 0.32, "end_time": inst.end * 1000.0 - 1.2,
                 "extra_data": {}, "event_name": "task:execute"},
                {"start_time": inst.end * 1000.0 - 1.1, "end_time": inst.end * 1000.0 - 0.9,
                 "extra_data": {}, "event_name": "task:store_outputs"},
                {"start_time": inst.start * 1000.0 + 0.2, "end_time": inst.end * 1000.0 - 0.8,
                 "extra_data": {"name": inst.name.split(".", 1)[-1], "task_id": tid},
                 "event_name": f"task::{inst.name}"},
            ]
        failed = state == "FAILED"
        row = {
            "task_id": tid,
            "attempt_number": 0,
            "name": inst.name,
            "state": state,
            "job_id": JOB_ID,
            "actor_id": a.actor_id,
            "type": "ACTOR_TASK",
            "func_or_class_name": inst.name,
            "parent_task_id": inst.parent,
            "node_id": node.node_id,
            "worker_id": a.proc.worker_id,
            "worker_pid": a.proc.pid,
            "error_type": "ACTOR_DIED" if failed else None,
            "language": "PYTHON",
            "required_resources": {},
            "runtime_env_info": {"serialized_runtime_env": "{}", "runtime_env_config": RUNTIME_ENV_CONFIG},
            "placement_group_id": None,
            "events": events,
            "profiling_data": {"component_type": "worker", "component_id": a.proc.worker_id,
                               "node_ip_address": node.ip, "events": prof},
            "creation_time_ms": c0,
            "start_time_ms": st,
            "end_time_ms": end_ms,
            "task_log_info": None,
            "error_message": inst.error if failed else None,
            "is_debugger_paused": None,
            "call_site": None,
            "label_selector": {},
            "fallback_strategy": {"options": []},
        }
        self._task_cache[ck] = row
        return row

    def _static_task_rows(self) -> list[dict]:
        """ACTOR_CREATION_TASK rows, *_init_model, TaskRunner.run's creation: all FINISHED long ago."""
        if self._static_tasks is not None:
            return self._static_tasks
        rows: list[dict] = []
        tr_run = self._taskrunner_run_id()
        if self.config.creation_tasks:
            for a in self.actors:
                node = self.nodes[a.node]
                c0 = math.floor(a.created * 1000.0) - 6.0
                fin = math.floor(a.created * 1000.0) + 700.0
                label = f"{a.name}:{a.cls}.__init__" if a.name else f"{a.cls}.__init__"
                tid = "f" * 16 + a.actor_id
                rows.append({
                    "task_id": tid, "attempt_number": 0, "name": label, "state": "FINISHED", "job_id": JOB_ID,
                    "actor_id": a.actor_id, "type": "ACTOR_CREATION_TASK", "func_or_class_name": f"{a.cls}.__init__",
                    "parent_task_id": DRIVER_TASK_ID if a is self.taskrunner else tr_run,
                    "node_id": None, "worker_id": None, "worker_pid": a.proc.pid, "error_type": None,
                    "language": "PYTHON", "required_resources": dict(a.required_resources),
                    "runtime_env_info": {"serialized_runtime_env": a.runtime_env,
                                         "runtime_env_config": RUNTIME_ENV_CONFIG},
                    "placement_group_id": a.pg_id,
                    "events": [{"state": "PENDING_ARGS_AVAIL", "created_ms": c0},
                               {"state": "PENDING_NODE_ASSIGNMENT", "created_ms": c0 + 3.0},
                               {"state": "RUNNING", "created_ms": c0 + 6.0},
                               {"state": "FINISHED", "created_ms": fin}],
                    "profiling_data": {"component_type": "worker", "component_id": a.proc.worker_id,
                                       "node_ip_address": node.ip, "events": [
                                           {"start_time": c0 + 8.3, "end_time": fin - 1.6, "extra_data": {},
                                            "event_name": "task:deserialize_arguments"},
                                           {"start_time": fin - 1.5, "end_time": fin - 1.4, "extra_data": {},
                                            "event_name": "task:execute"},
                                           {"start_time": fin - 1.3, "end_time": fin - 1.2, "extra_data": {},
                                            "event_name": "task:store_outputs"},
                                           {"start_time": c0 + 8.2, "end_time": fin - 1.1,
                                            "extra_data": {"name": "__init__", "task_id": tid},
                                            "event_name": f"task::{label}"}]},
                    "creation_time_ms": c0, "start_time_ms": c0 + 6.0, "end_time_ms": fin, "task_log_info": None,
                    "error_message": None, "is_debugger_paused": None, "call_site": None, "label_selector": {},
                    "fallback_strategy": {"options": []},
                })
            inits = []
            if self.config.critic:
                inits.append("critic_init_model")
            if self.config.ref and self.config.engine == "legacy":
                inits.append("ref_init_model")
            inits.append("actor_rollout_init_model" if self.config.engine == "legacy" else "actor_rollout_ref_init_model")
            base = self.job_start + 10.0
            span = (self.config.startup_s - 25.0) / max(1, len(inits))
            for gi, meth in enumerate(inits):
                for a in self.groups["main"]:
                    inst = Inst(("init", gi, a.idx), a, f"WorkerDict.{meth}", base + gi * span + 0.01 * _u(1, a.idx),
                                base + (gi + 1) * span - 0.5 * _u(2, a.idx), tr_run)
                    rows.append(self._task_row(inst, math.inf))
            for a in self.groups["rm"]:
                inst = Inst(("init", 9, a.idx), a, "WorkerDict.rm_init_model", base, base + span, tr_run)
                rows.append(self._task_row(inst, math.inf))
        self._static_tasks = rows
        return rows

    def _taskrunner_row(self) -> dict:
        a = self.taskrunner
        inst = Inst(("run", a.idx), a, "TaskRunner.run", self.job_start + 2.5, None, DRIVER_TASK_ID)
        return self._task_row(inst, 0.0)

    def _driver_row(self) -> dict:
        node = self.nodes[0]
        c0 = float(math.floor(self.job_start * 1000.0))
        return {
            "task_id": DRIVER_TASK_ID, "attempt_number": 0, "name": "", "state": "RUNNING", "job_id": JOB_ID,
            "actor_id": None, "type": "DRIVER_TASK", "func_or_class_name": "", "parent_task_id": "f" * 48,
            "node_id": node.node_id, "worker_id": self.driver.worker_id, "worker_pid": self.driver.pid,
            "error_type": None, "language": "PYTHON", "required_resources": {},
            "runtime_env_info": {"serialized_runtime_env": json.dumps({"env_vars": JOB_ENV}, sort_keys=True),
                                 "runtime_env_config": RUNTIME_ENV_CONFIG},
            "placement_group_id": None, "events": [{"state": "RUNNING", "created_ms": c0}],
            "profiling_data": None, "creation_time_ms": None, "start_time_ms": c0, "end_time_ms": None,
            "task_log_info": None, "error_message": None, "is_debugger_paused": None, "call_site": None,
            "label_selector": {}, "fallback_strategy": None,
        }

    def tick(self, t: float | None = None) -> float:
        """The quantised time at which task state is computed (``tick_s`` granularity)."""
        t = self.now() if t is None else t
        q = self.config.tick_s
        return self.created_at + math.floor((t - self.created_at) / q) * q if q > 0 else t

    def task_snapshot(self, t: float | None = None) -> TaskSnapshot:
        """Every task attempt GCS would hold at ``t`` (quantised to a tick); cached per tick."""
        with self._lock:
            tq = self.tick(t)
            key = (tq, self.version)
            if self._task_snap is not None and self._task_snap[0] == key:
                return self._task_snap[1]
            old_cache = self._task_cache
            self._task_cache = {}
            # keep creation / init rows (and the TaskRunner row) alive in the new cache
            for ck, row in old_cache.items():
                if ck[0] and ck[0][0] in ("init", "run"):
                    self._task_cache[ck] = row
            prev_cache = old_cache
            running: list[dict] = [self._taskrunner_row()]
            finished: list[dict] = []
            frozen = self._frozen(tq)
            k, p = (self._hang.k, self._hang.p) if frozen else self._pos(tq)
            cur: tuple[int, int] | None = (k, p)
            cap = self.config.max_finished_tasks
            first = True
            scanned = 0
            while cur is not None and len(finished) < cap and scanned < 64 * len(self._phases):
                scanned += 1
                insts = self._phase_insts(cur[0], cur[1], tq)
                for inst in reversed(insts):
                    ended = inst.end is not None and inst.end <= tq
                    if not ended and not first:
                        continue
                    st = "RUNNING" if not ended else inst.final
                    ck = (inst.key, st)
                    row = prev_cache.get(ck)
                    if row is not None:
                        self._task_cache[ck] = row
                    else:
                        row = self._task_row(inst, tq)
                    if ended:
                        if len(finished) < cap:
                            finished.append(row)
                    else:
                        running.append(row)
                first = False
                cur = self._prev(*cur)
            snap = TaskSnapshot(
                t=tq, running=running, finished=finished,
                static=self._static_task_rows() if self.config.creation_tasks else [],
                driver=self._driver_row(), frozen=frozen, step=k, phase=self._phases[p].name,
            )
            self._task_snap = (key, snap)
            return snap

    # ------------------------------------------------------------------------------------------ activity

    def activity(self, a: Actor, t: float) -> tuple[str, str | None]:
        """What an actor's process is doing at ``t``: (mode, method). Modes: busy, idle, blocked (waiting
        in a hung collective), straggler (the hung rank, idle inside its task), dead, serving."""
        if not self.alive(a, t):
            return "dead", None
        h = self._hang
        if a.role in ("worker", "rm_worker"):
            if self._frozen(t) and a.group == "main":
                m = f"{a.cls}.{self._phases[h.p].method}"
                if a.rank == h.rank:
                    return ("dead" if h.dead else "straggler"), m
                return "blocked", m
            k, p = self._pos(t) if not self._frozen(t) else (h.k, h.p)
            ph = self._phases[p]
            if ph.kind == "worker" and ph.group == a.group:
                s, e = self._bounds(k, p)
                st = s + 0.002 + 0.05 * _u(self.config.seed, 1, k, p, a.idx)
                en = e - 0.03 * (e - s) * _u(self.config.seed, 2, k, p, a.idx)
                if st <= t < en:
                    return "busy", f"{a.cls}.{ph.method}"
            return "idle", None
        if a.role == "taskrunner":
            if not self._frozen(t) and self._phases[self._pos(t)[1]].kind == "driver":
                return "busy", "TaskRunner.run"
            return "waiting", "TaskRunner.run"
        if a.role in ("server", "agent_loop"):
            if self._frozen(t):
                return "idle", None
            k, p = self._pos(t)
            if self._phases[p].kind == "gen_async":
                return "serving", ("vLLMHttpServer.generate" if a.role == "server"
                                   else "AgentLoopWorker.generate_sequences")
            return "idle", None
        return "idle", None

    def completed_steps(self, t: float) -> int:
        if self._frozen(t):
            return self._hang.k - 1
        return self._pos(t)[0] - 1

    # ------------------------------------------------------------------------------------------ nodes

    def report_time(self, t: float | None = None) -> float:
        t = self.now() if t is None else t
        q = self.config.report_interval_s
        return self.created_at + math.floor((t - self.created_at) / q) * q if q > 0 else t

    def node_snapshot(self, t: float | None = None) -> NodeSnapshot:
        with self._lock:
            rt = self.report_time(t)
            key = (rt, self.version)
            if self._node_snap is not None and self._node_snap[0] == key:
                return self._node_snap[1]
            snap = NodeSnapshot(self, rt)
            self._node_snap = (key, snap)
            return snap

    def node_by_id(self, node_id: str) -> NodeInfo | None:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        return None

    def state_node_row(self, n: NodeInfo) -> dict:
        cfg = self.config
        res = {"GPU": float(cfg.gpus_per_node), f"node:{n.ip}": 1.0, "CPU": float(cfg.cpus_per_node),
               "memory": float(int(cfg.mem_per_node * 0.7)), "accelerator_type:H200": 1.0,
               "object_store_memory": float(int(cfg.mem_per_node * 0.09))}
        if n.is_head:
            res = {"node:__internal_head__": 1.0, **res}
        if not cfg.gpus_per_node:
            del res["GPU"], res["accelerator_type:H200"]
        labels = {"ray.io/node-id": n.node_id}
        if cfg.gpus_per_node:
            labels["ray.io/accelerator-type"] = "H200"
        return {
            "node_id": n.node_id, "node_ip": n.ip, "is_head_node": n.is_head, "state": "ALIVE",
            "state_message": None, "node_name": n.ip, "resources_total": res, "labels": labels,
            "start_time_ms": int(n.start * 1000), "end_time_ms": 0,
        }

    def worker_rows(self) -> list[dict]:
        """/api/v0/workers rows (detail)."""
        rows = []
        for n in self.nodes:
            for p in n.procs:
                if p.kind not in ("idle", "actor", "driver"):
                    continue
                dead = p.actor is not None and p.actor.state == "DEAD"
                launch = int(p.create_time * 1000) - 900
                rows.append({
                    "worker_id": p.worker_id, "is_alive": not dead,
                    "worker_type": "DRIVER" if p.kind == "driver" else "WORKER",
                    "exit_type": "SYSTEM_ERROR" if dead else None, "node_id": n.node_id, "ip": n.ip, "pid": p.pid,
                    "exit_detail": "Worker unexpectedly exits with a connection error code 2." if dead else None,
                    "worker_launch_time_ms": 18446744073709551615 if p.kind == "driver" else launch,
                    "worker_launched_time_ms": 18446744073709551615 if p.kind == "driver" else launch + 880,
                    "start_time_ms": launch + 950,
                    "end_time_ms": int(p.actor.died_at * 1000) if dead and p.actor.died_at else 0,
                    "debugger_port": None, "num_paused_threads": None,
                })
        return rows

    # ------------------------------------------------------------------------------------------ logs

    def find_proc(self, node_id: str | None, pid: int, ip: str | None = None) -> tuple[NodeInfo, Proc] | None:
        for n in self.nodes:
            if (node_id and n.node_id == node_id) or (ip and n.ip == ip):
                p = n.by_pid.get(pid)
                return (n, p) if p else (n, None)
        return None

    def log_text(self, a: Actor, suffix: str, lines: int, t: float | None = None) -> str:
        """Plausible worker log tail (``out`` or ``err``) of an actor at ``t``."""
        with self._lock:
            t = self.now() if t is None else t
            out = [f":job_id:{JOB_ID}", f":actor_name:{a.cls}"]
            steps = self.completed_steps(t)
            ts0 = a.created
            if suffix == "out":
                if a.role == "taskrunner":
                    out.append(f"TaskRunner hostname: {self.nodes[a.node].hostname}, PID: {a.proc.pid}")
                    out.append("Using dataset class: RLHFDataset")
                    out.append("Size of train dataloader: 3739, Size of val dataloader: 1")
                    out.append("Total training steps: 4485")
                    for k in range(max(1, steps - 200), steps + 1):
                        u = _u(self.config.seed, 21, k)
                        out.append(
                            f"step:{k} - global_seqlen/mean:{int(300000 + 40000 * u)} - actor/entropy:{0.6 - 0.0005 * k:.4f}"
                            f" - actor/pg_loss:{-0.01 + 0.02 * u:.5f} - actor/grad_norm:{0.4 + u:.4f}"
                            f" - critic/score/mean:{0.2 + 0.001 * k:.4f} - timing_s/gen:{self._durs[0]:.3f}"
                            f" - timing_s/step:{self.step_len:.3f} - perf/throughput:{1500 + 300 * u:.1f}")
                elif a.role in ("worker", "rm_worker"):
                    out.append(f"Model config after override: Qwen2Config {{ vocab_size: 152064, world_size: "
                               f"{len(self.groups[a.group])} }}")
                    out.append(f"NCCL version 2.28.9+cuda13.0 rank {a.rank}")
                    for k in range(max(1, steps - 200), steps + 1):
                        out.append(f"[rank{a.rank}] step {k}: update_actor mfu=0.{41 + int(9 * _u(a.idx, k))} "
                                   f"max_memory_allocated_gb={61 + 8 * _u(a.idx, k, 1):.2f}")
                elif a.role == "server":
                    out.append("INFO vLLM API server version 0.11.0")
                    n = int((t - a.created) // 10)
                    for i in range(max(0, n - 300), n):
                        u = _u(a.idx, i)
                        out.append(f"INFO {time.strftime('%m-%d %H:%M:%S', time.gmtime(a.created + 10 * i))} "
                                   f"[loggers.py:123] Engine 000: Avg prompt throughput: {2000 * u:.1f} tokens/s, "
                                   f"Avg generation throughput: {9000 * u:.1f} tokens/s, Running: {int(64 * u)} reqs, "
                                   f"Waiting: 0 reqs, GPU KV cache usage: {60 * u:.1f}%")
                else:
                    out.append(f"{a.cls} started on {self.nodes[a.node].hostname} pid={a.proc.pid}")
            else:
                stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(ts0 + 14))
                out.append(f"[W{stamp}.882076551 Utils.hpp:137] Warning: Environment variable "
                           "TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated; use TORCH_FR_BUFFER_SIZE instead "
                           "(function operator())")
                out.append("/usr/lib/python3.12/site-packages/torch/distributed/fsdp/_init_utils.py:444: "
                           "UserWarning: FSDP is switching to use `NO_SHARD` instead of ShardingStrategy.FULL_SHARD")
                h = self._hang
                if (h is not None and a.role == "worker" and a.rank is not None
                        and t >= h.start + self.config.nccl_timeout_s):
                    tw = h.start + self.config.nccl_timeout_s + 0.023
                    stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(tw))
                    seq = 5 + 7 * h.k
                    ms = int(self.config.nccl_timeout_s * 1000)
                    r = a.rank
                    if r == h.rank:
                        out.append(f"[rank{r}]:[E{stamp}.969311739 ProcessGroupNCCL.cpp:1849] [PG ID 0 PG GUID 0"
                                   f"(default_pg) Rank {r}] Observed flight recorder dump signal from another rank "
                                   "via TCPStore.")
                    else:
                        out.append(f"[rank{r}]:[E{stamp}.094115712 ProcessGroupNCCL.cpp:688] [Rank {r}] Watchdog "
                                   f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
                                   f"NumelIn=16777216, NumelOut=16777216, Timeout(ms)={ms}) ran for {ms + 23} "
                                   "milliseconds before timing out.")
                        out.append(f"[rank{r}]:[E{stamp}.094371029 ProcessGroupNCCL.cpp:2272] [PG ID 0 PG GUID 0"
                                   f"(default_pg) Rank {r}]  failure detected by watchdog at work sequence id: "
                                   f"{seq} PG status: last enqueued work: {seq}, last completed work: {seq - 1}")
                if a.state == "DEAD" and a.died_at is not None and t >= a.died_at:
                    out.append(f"*** SIGKILL received at time={int(a.died_at)} on cpu 17 (has been killed) ***")
            if lines is not None and lines >= 0:
                out = out[-lines:] if lines else []
            return "".join(line + "\n" for line in out)

    # ------------------------------------------------------------------------------------------ py-spy

    def traceback(self, node: NodeInfo, proc: Proc | None, pid: int, native: bool, t: float | None = None
                  ) -> tuple[bool, str]:
        """``py-spy dump`` text of a process, as the reporter agent returns it."""
        with self._lock:
            t = self.now() if t is None else t
            cmd = f"['py-spy', 'dump', '-p', '{pid}'" + (", '--native']" if native else "]")
            if proc is None or (proc.kind == "actor" and proc.actor is not None and not self.alive(proc.actor, t)):
                return False, (f"Failed to execute `{cmd}`.\n\n=== stderr ===\nError: Failed to open process "
                               f"{pid} - is it running?\n\n=== stdout ===\n\n")
            title = self.title(proc, t)
            lines = [f"Process {pid}: {title}", "Python v3.12.3 (/usr/bin/python3.12)", ""]
            a = proc.actor
            tail = [
                "_inject_tracing_into_class.<locals>.span_wrapper.<locals>._resume_span "
                "(ray/util/tracing/tracing_helper.py:487)",
                "FunctionActorManager._make_actor_method_executor.<locals>.actor_method_executor "
                "(ray/_private/function_manager.py:740)",
                "Worker.main_loop (ray/_private/worker.py:1069)",
                "<module> (ray/_private/workers/default_worker.py:323)",
            ]
            state = "idle"
            frames: list[str]
            if proc.kind == "actor" and a is not None:
                mode, method = self.activity(a, t)
                short = method.split(".", 1)[1] if method else None
                if a.role in ("worker", "rm_worker") and mode in ("busy", "blocked", "straggler"):
                    role_method = short.split("_", 2)[-1] if short else ""
                    inner = _INNER_FRAMES.get(role_method, _INNER_FRAMES["_default"])
                    if mode == "blocked":
                        frames = ["_sync_metrics (verl/workers/actor/dp_actor.py:431)", *inner[1:]]
                        state = "active"
                        if native:
                            frames = [*_NATIVE_CUDA, *frames]
                    elif mode == "straggler":
                        frames = ["wait (threading.py:359)", "get (queue.py:180)",
                                  "_next_micro_batch (verl/utils/seqlen_balancing.py:318)", *inner[1:]]
                        if native:
                            frames = ["clock_nanosleep (libc.so.6)", *frames]
                    else:
                        frames = list(inner)
                        state = "active"
                    frames += [f"create_colocated_worker_cls.<locals>.WorkerDict.{short} "
                               "(verl/single_controller/ray/base.py:713)", *tail]
                elif a.role == "taskrunner":
                    frames = ["Worker.get_objects (ray/_private/worker.py:1007)", "get (ray/_private/worker.py:3009)",
                              "client_mode_hook.<locals>.decorator.<locals>.wrapper (ray/_private/client_mode_hook.py:134)",
                              "wrap_auto_init.<locals>.auto_init_wrapper (ray/_private/auto_init_hook.py:22)",
                              "func (verl/single_controller/ray/base.py:49)",
                              "fit (verl/trainer/ppo/ray_trainer.py:1301)",
                              "run (verl/trainer/main_ppo.py:353)", "TaskRunner.run (verl/trainer/main_ppo.py:112)",
                              *tail]
                    if mode == "busy":
                        frames[:4] = ["compute_gae_advantage_return (verl/trainer/ppo/core_algos.py:213)",
                                      "compute_advantage (verl/trainer/ppo/ray_trainer.py:233)"]
                        state = "active"
                elif a.role in ("server", "agent_loop"):
                    frames = ["select (selectors.py:468)", "_run_once (asyncio/base_events.py:1949)",
                              "run_forever (asyncio/base_events.py:641)",
                              "AsyncioActorEventLoop.run (ray/_private/async_compat.py:88)", *tail[2:]]
                    state = "active" if mode == "serving" else "idle"
                else:
                    frames = tail[2:]
            elif proc.kind == "vllm_child":
                frames = ["execute_model (vllm/v1/worker/gpu_model_runner.py:1712)",
                          "worker_busy_loop (vllm/v1/executor/multiproc_executor.py:592)",
                          "worker_main (vllm/v1/executor/multiproc_executor.py:553)",
                          "run (multiprocessing/process.py:108)"]
                state = "active"
                lines[0] = f"Process {pid}: VLLM::Worker_TP{proc.gpu}"
            elif proc.kind == "driver":
                frames = ["Worker.get_objects (ray/_private/worker.py:1007)", "get (ray/_private/worker.py:3009)",
                          "run_ppo (verl/trainer/main_ppo.py:96)", "main (verl/trainer/main_ppo.py:42)",
                          "<module> (verl/trainer/main_ppo.py:392)"]
                lines[0] = f"Process {pid}: python3 -m verl.trainer.main_ppo"
            else:
                frames = ["Worker.main_loop (ray/_private/worker.py:1069)",
                          "<module> (ray/_private/workers/default_worker.py:323)"]
            lines.append(f'Thread {pid} ({state}): "MainThread"')
            lines += ["    " + f for f in frames]
            if proc.kind in ("actor", "idle"):
                lines.append(f'Thread {pid + 289} (idle): "PythonGCThread"')
                lines += ["    " + f for f in _GC_THREAD]
            return True, "\n".join(lines) + "\n"

    def title(self, proc: Proc, t: float) -> str:
        """The process title Ray sets (cmdline[0])."""
        if proc.kind == "agent":
            return "ray::DashboardAgent"
        if proc.kind == "runtime_env_agent":
            return "ray::RuntimeEnvAgent"
        if proc.kind == "idle":
            return "ray::IDLE"
        if proc.kind == "driver":
            return proc.cmd[0]
        if proc.kind == "vllm_child":
            return proc.cmd[0]
        a = proc.actor
        mode, method = self.activity(a, t)
        if a.role in ("worker", "rm_worker") and method and mode != "dead":
            return f"ray::{method}"
        if a.role == "taskrunner":
            return "ray::TaskRunner.run"
        return f"ray::{a.cls}"

    def prewarm(self) -> None:
        """Build the one-time caches (actor rows, creation-task rows, first snapshots) now."""
        self.actor_rows()
        self.task_snapshot()
        self.node_snapshot().summary()

    def summary(self) -> dict:
        """A compact description, for test messages and the CLI banner."""
        with self._lock:
            pos = self.position()
            return {
                "nodes": len(self.nodes), "gpus": len(self.nodes) * self.config.gpus_per_node,
                "actors": len(self.actors), "alive_actors": sum(a.state == "ALIVE" for a in self.actors),
                "world_size": len(self.groups["main"]), "step": pos["step"], "phase": pos["phase"],
                "hung": pos["hung"], "step_len_s": round(self.step_len, 3),
                "phases": [(p.name, p.method, round(d, 3)) for p, d in zip(self._phases, self._durs, strict=True)],
            }


_DEATHS: tuple[tuple[str, str], ...] = (
    ("died", "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
             "detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some "
             "potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. "
             "(2) ray stop --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other "
             "unexpected errors.\nThe actor never ran - it was cancelled before it started running."),
    ("oom_context", "Task was killed due to the node running low on memory.\nMemory on the node (IP: {ip}) where "
                    "the task was running was 1.98TB / 2.00TB (0.990001), which exceeds the memory usage threshold "
                    "of 0.95. Ray killed this worker (ID: {pid}) because it was the most recently scheduled task."),
    ("kill", "The actor is dead because it was killed by `ray.kill`."),
    ("scope", "The actor is dead because all references to the actor were removed including lineage ref count."),
    ("creation_task_failure_context",
     "Traceback (most recent call last):\n  File \"python/ray/_raylet.pyx\", line 1900, in "
     "ray._raylet.execute_task\n  File \"verl/experimental/reward_loop/reward_loop.py\", line 88, in __init__\n"
     "    self.tokenizer = hf_tokenizer(local_path)\nOSError: Can't load tokenizer for '/models/rm'. "
     "({cls} pid={pid})"),
)

_GC_THREAD = (
    "Condition.wait (threading.py:355)",
    "Event.wait (threading.py:655)",
    "PythonGCThread.run (ray/_private/gc_collect_manager.py:29)",
    "Thread._bootstrap_inner (threading.py:1073)",
    "Thread._bootstrap (threading.py:1030)",
)
_NATIVE_CUDA = (
    "0x7f059c51a960 (libcuda.so.580.159.04)",
    "0x7f059c6cc5c4 (libcuda.so.580.159.04)",
    "cuLaunchKernel (libcuda.so.580.159.04)",
    "cudaLaunchKernel (libcudart.so.13)",
    "at::native::structured_sum_out::impl (libtorch_cpu.so)",
    "at::_ops::sum::call (libtorch_cpu.so)",
    "torch::autograd::THPVariable_sum (libtorch_python.so)",
)
_INNER_FRAMES = {
    "update_actor": (
        "all_reduce (torch/distributed/distributed_c10d.py:3068)",
        "_optimizer_step (verl/workers/actor/dp_actor.py:266)",
        "update_policy (verl/workers/actor/dp_actor.py:512)",
        "update_actor (verl/workers/fsdp_workers.py:870)",
        "inner (verl/single_controller/base/decorator.py:451)",
    ),
    "update_critic": (
        "all_reduce (torch/distributed/distributed_c10d.py:3068)",
        "_optimizer_step (verl/workers/critic/dp_critic.py:171)",
        "update_critic (verl/workers/critic/dp_critic.py:240)",
        "update_critic (verl/workers/fsdp_workers.py:1620)",
        "inner (verl/single_controller/base/decorator.py:451)",
    ),
    "generate_sequences": (
        "step (vllm/v1/engine/core.py:284)",
        "generate (vllm/entrypoints/llm.py:443)",
        "generate_sequences (verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py:312)",
        "generate_sequences (verl/workers/fsdp_workers.py:935)",
        "inner (verl/single_controller/base/decorator.py:451)",
    ),
    "_default": (
        "_forward_micro_batch (verl/workers/actor/dp_actor.py:170)",
        "compute_log_prob (verl/workers/actor/dp_actor.py:352)",
        "compute_log_prob (verl/workers/fsdp_workers.py:985)",
        "inner (verl/single_controller/base/decorator.py:451)",
    ),
}


# ---------------------------------------------------------------------------------------------- snapshots


@dataclass
class TaskSnapshot:
    t: float
    running: list[dict]
    finished: list[dict]
    static: list[dict]
    driver: dict
    frozen: bool
    step: int
    phase: str

    _all = None  # plain class attributes, not dataclass fields: lazily built indexes
    _by_state = None

    def all_rows(self, exclude_driver: bool = True) -> list[dict]:
        """Newest first, the order GCS walks its task events in."""
        if self._all is None:
            self._all = self.running + self.finished + self.static[::-1]
        return self._all if exclude_driver else [self.driver, *self._all]

    def rows_in_state(self, state: str, exclude_driver: bool = True) -> list[dict]:
        """``all_rows`` restricted to one state (what GCS's state pushdown returns), same order."""
        if self._by_state is None:
            by: dict[str, list[dict]] = {}
            for r in self.all_rows():
                by.setdefault(r["state"], []).append(r)
            self._by_state = by
        rows = self._by_state.get(state.upper(), [])
        if not exclude_driver and state.upper() == "RUNNING":
            rows = [self.driver, *rows]
        return rows


class NodeSnapshot:
    """Per-node dashboard payloads (camelCase) at one reporter time; built lazily per node."""

    def __init__(self, cluster: FakeCluster, rt: float) -> None:
        self.c = cluster
        self.t = rt
        self._procs: dict[int, list[tuple[Proc, dict]]] = {}
        self._gpus: dict[int, list[dict]] = {}
        self._cws: dict[int, dict[int, dict]] = {}
        self._summary: dict[int, dict] = {}
        self._summary_all: list[dict] | None = None
        self._logical: dict[int, dict] = {}
        self.pad = [""] * cluster.config.cmdline_pad

    # per-process numbers --------------------------------------------------------------------------

    def _proc_stats(self, n: NodeInfo) -> list[tuple[Proc, dict]]:
        got = self._procs.get(n.idx)
        if got is not None:
            return got
        c, t, seed = self.c, self.t, self.c.config.seed
        ri = round(t * 10)
        steps = max(0, c.completed_steps(t))
        out = []
        gpu_use: dict[int, list[dict]] = {g: [] for g in range(c.config.gpus_per_node)}
        total = c.config.gpu_mem_mib
        for p in n.procs:
            if p.create_time > t:
                continue
            a = p.actor
            noise = _u(seed, 31, n.idx, p.pid, ri)
            gmem = 0
            gutil = 0
            if p.kind == "agent":
                cpu, rss, vms, fds = 1.0 + 2 * noise, 160 * MIB, 4359729152, 65
            elif p.kind == "runtime_env_agent":
                cpu, rss, vms, fds = 0.3 * noise, 87 * MIB, 2226257920, 29
            elif p.kind == "idle":
                cpu, rss, vms, fds = 0.2 + 0.6 * noise, 86 * MIB, 5824331776, 40
            elif p.kind == "driver":
                cpu, rss, vms, fds = 0.2 + 0.5 * noise, 145 * MIB, 7697047552, 32
            elif p.kind == "vllm_child":
                srv = p.actor
                if srv is None or not c.alive(srv, t):
                    continue
                mode, _ = c.activity(srv, t)
                if mode == "serving":
                    cpu, gutil, gmem = 95 + 10 * noise, int(85 + 14 * noise), int(total * (0.52 + 0.03 * noise))
                else:
                    cpu, gutil, gmem = 0.5 * noise, 0, int(total * 0.015)
                rss, vms, fds = 7 * GIB + int(noise * GIB), 95 * GIB, 210
                gpu_use[p.gpu].append({"pid": p.pid, "gpuMemoryUsage": gmem, "gpuUtilization": gutil})
            else:
                mode, method = c.activity(a, t)
                if mode == "dead":
                    continue
                role = a.role
                if role in ("worker", "rm_worker"):
                    short = method.split("_", 2)[-1] if method else ""
                    frac = {"generate_sequences": 0.85, "update_actor": 0.74, "update_critic": 0.7,
                            "update_weights": 0.3}.get(short, 0.45)
                    if mode == "busy":
                        cpu, gutil, gmem = 98 + 30 * noise, int(82 + 17 * noise), int(total * (frac + 0.04 * noise))
                    elif mode == "blocked":
                        cpu, gutil, gmem = 99.5 + noise, 100, int(total * (frac + 0.01 * noise))
                    elif mode == "straggler":
                        cpu, gutil, gmem = 0.4 * noise, 0, int(total * (frac - 0.1))
                    else:
                        cpu, gutil, gmem = 0.5 + 2 * noise, 0, int(total * (0.03 + 0.01 * noise))
                    rss = 9 * GIB + int(0.5 * GIB * noise) + steps * 4 * MIB
                    vms, fds = 82 * GIB, 180 + int(20 * noise)
                    if p.gpu is not None:
                        gpu_use[p.gpu].append({"pid": p.pid, "gpuMemoryUsage": gmem, "gpuUtilization": gutil})
                elif role == "taskrunner":
                    cpu = 97 + 5 * noise if mode == "busy" else 1.0 + 3 * noise
                    rss, vms, fds = 3 * GIB + steps * 20 * MIB, 12 * GIB, 95
                elif role == "server":
                    cpu = 35 + 20 * noise if mode == "serving" else 0.5 + noise
                    rss, vms, fds = 6 * GIB, 40 * GIB, 150
                elif role == "agent_loop":
                    cpu = 20 + 25 * noise if mode == "serving" else 0.3 + noise
                    rss, vms, fds = 1536 * MIB, 9 * GIB, 70
                else:
                    cpu, rss, vms, fds = 0.1 + 0.4 * noise, 300 * MIB, 6 * GIB, 44
            up = max(0.0, t - p.create_time)
            user = round(up * (0.05 + 0.5 * (cpu / 100.0 if cpu < 100 else 1.0)) * 0.3, 2)
            st = {
                "pid": p.pid,
                "createTime": round(p.create_time, 2),
                "cpuPercent": round(cpu, 1),
                "cpuTimes": {"user": user, "system": round(user * 0.12, 2), "childrenUser": 0.0,
                             "childrenSystem": 0.0},
                "cmdline": None,  # filled lazily (800 "" per process add up)
                "memoryInfo": {"rss": float(rss), "vms": float(vms), "pfaults": None, "pageins": None},
                "memoryFullInfo": None,
                "numFds": fds,
                "gpuMemoryUsage": gmem,
                "gpuUtilization": gutil,
            }
            out.append((p, st))
        self._procs[n.idx] = out
        gpus = []
        for g, uuid in enumerate(n.gpu_uuids):
            procs = gpu_use[g]
            util = min(100, max([pp["gpuUtilization"] for pp in procs], default=0))
            used = sum(pp["gpuMemoryUsage"] for pp in procs) + (623 if procs else 0)
            nz = _u(seed, 41, n.idx, g, ri)
            gpus.append({
                "index": g, "name": c.config.gpu_name, "uuid": uuid, "utilizationGpu": util,
                "memoryUsed": used, "memoryTotal": total, "processesPids": procs,
                "powerMw": int(105000 + util * 5800 + 4000 * nz), "temperatureC": int(33 + util * 0.35 + 3 * nz),
            })
        self._gpus[n.idx] = gpus
        return out

    def _cmdline(self, p: Proc) -> list[str]:
        if p.kind in ("driver", "vllm_child"):
            return list(p.cmd)
        return [self.c.title(p, self.t), *self.pad]

    def _core_worker_stats(self, n: NodeInfo) -> dict[int, dict]:
        got = self._cws.get(n.idx)
        if got is not None:
            return got
        c, t = self.c, self.t
        out: dict[int, dict] = {}
        steps = max(0, c.completed_steps(t))
        n_phases = sum(ph.kind == "worker" for ph in c._phases)
        for p in n.procs:
            if p.kind not in ("idle", "actor", "driver") or p.create_time > t:
                continue
            a = p.actor
            if a is not None and not c.alive(a, t):
                continue
            running, executed, pending, owned_actors = 0, 0, 0, 0
            used: dict = {}
            job, actor_id, wtype = "ffffffff", NIL_ACTOR_ID, "WORKER"
            if p.kind == "driver":
                job, wtype, pending, owned_actors = JOB_ID, "DRIVER", 1, 1
            elif a is not None:
                job, actor_id = JOB_ID, a.actor_id
                mode, _ = c.activity(a, t)
                if a.role in ("worker", "rm_worker"):
                    running = 1 if mode in ("busy", "blocked", "straggler") else 0
                    executed = 4 + steps * n_phases
                    if a.used_resources is None:
                        lr, pg = a.local_rank, a.pg_id
                        a.used_resources = {
                            to_camel_case(res): {"resourceSlots": [{"allocation": amount, "slot": slot}]}
                            for res, amount, slot in (
                                (f"CPU_group_{lr}_{pg}", 1.0, "0"), (f"GPU_group_{lr}_{pg}", 1.0, str(lr)),
                                (f"bundle_group_{lr}_{pg}", 0.001, "0"), (f"CPU_group_{pg}", 1.0, "0"),
                                (f"GPU_group_{pg}", 1.0, str(lr)), (f"bundle_group_{pg}", 0.001, "0"))}
                    used = a.used_resources
                elif a.role == "taskrunner":
                    running, executed = 1, 1
                    pending = len(c.groups["main"]) if mode == "waiting" else 0
                    owned_actors = len(c.actors) - 1
                    used = {"CPU": {"resourceSlots": [{"allocation": 1.0, "slot": "0"}]}}
                elif a.role == "server":
                    running = c.config.server_concurrency if mode == "serving" else 0
                    executed = 3 + steps * 400
                elif a.role == "agent_loop":
                    running = 1 if mode == "serving" else 0
                    executed = 1 + steps
                else:
                    executed = 1
            out[p.pid] = {
                "ipAddress": n.ip, "port": str(p.port), "actorId": actor_id, "usedResources": used,
                "numExecutedTasks": executed, "jobId": job, "workerId": p.worker_id, "pid": p.pid,
                "numRunningTasks": str(running), "numPendingTasks": pending, "numObjectRefsInScope": 2 * pending,
                "numInPlasma": 0, "numLocalObjects": 0, "usedObjectStoreMemory": "0", "taskQueueLength": 0,
                "objectRefs": [], "language": "PYTHON", "workerType": wtype, "objectsTotal": "0",
                "numOwnedObjects": str(pending), "numOwnedActors": str(owned_actors),
                "numInFlightArgPinningRequests": "0", "numOfFailedArgPinningRequests": "0",
            }
        self._cws[n.idx] = out
        return out

    # payloads ---------------------------------------------------------------------------------------

    def _raylet(self, n: NodeInfo, with_core_workers: bool) -> dict:
        c = self.c
        cfg = c.config
        cws = self._core_worker_stats(n)
        num_workers = sum(1 for s in cws.values() if s["workerType"] == "WORKER")
        store = int(cfg.mem_per_node * 0.09)
        res = {to_camel_case(k): v for k, v in c.state_node_row(n)["resources_total"].items()}
        sess = f"/tmp/ray/{c.session}"
        raylet: dict = {}
        if with_core_workers:
            raylet["coreWorkersStats"] = list(cws.values())
        raylet.update({
            "numWorkers": num_workers,
            "storeStats": {"objectStoreBytesAvail": str(store), "cumulativeCreatedObjects": str(9 + 40 * len(cws)),
                           "cumulativeCreatedBytes": str(72 + 4096 * len(cws))},
            "objectStoreUsedMemory": 0,
            "objectStoreAvailableMemory": store,
            "nodeId": n.node_id,
            "nodeManagerAddress": n.ip,
            "rayletSocketName": f"{sess}/sockets/raylet",
            "objectStoreSocketName": f"{sess}/sockets/plasma_store",
            "nodeManagerPort": n.ports["nodeManagerPort"],
            "objectManagerPort": n.ports["objectManagerPort"],
            "nodeManagerHostname": n.hostname,
            "metricsExportPort": n.ports["metricsExportPort"],
            "resourcesTotal": res,
            "nodeName": n.ip,
            "startTimeMs": str(int(n.start * 1000)),
            "isHeadNode": n.is_head,
            "labels": c.state_node_row(n)["labels"],
            "runtimeEnvAgentPort": n.ports["runtimeEnvAgentPort"],
            "stateSnapshot": {"state": "ACTIVE", "idleDurationMs": "0", "nodeActivity": []},
            "metricsAgentPort": n.ports["metricsAgentPort"],
            "dashboardAgentListenPort": n.ports["dashboardAgentListenPort"],
            "tempDir": "/tmp/ray",
            "sessionDir": sess,
            "state": "ALIVE",
            "instanceId": "",
            "nodeTypeName": "",
            "instanceTypeName": "",
            "endTimeMs": "0",
            "stateMessage": None,
        })
        return raylet

    def _physical(self, n: NodeInfo) -> dict:
        """The reporter agent's payload minus workers (keys in the real order)."""
        c, t, seed = self.c, self.t, self.c.config.seed
        cfg = c.config
        procs = self._proc_stats(n)
        gpus = self._gpus[n.idx]
        ri = round(t * 10)
        nz = _u(seed, 51, n.idx, ri)
        used = sum(int(st["memoryInfo"]["rss"]) for _, st in procs) + 40 * GIB
        total = cfg.mem_per_node
        cpu_sum = sum(st["cpuPercent"] for _, st in procs)
        node_cpu = round(min(100.0, cpu_sum / cfg.cpus_per_node + 1.0 + nz), 1)
        up = t - n.boot
        agent = next(({**st, "cmdline": self._cmdline(p), "gpuMemoryUsage": None, "gpuUtilization": None}
                      for p, st in procs if p.kind == "agent"), None)
        now = round(t - 0.7 * _u(seed, 52, n.idx), 6)
        d = {
            "now": now,
            "hostname": n.hostname,
            "ip": n.ip,
            "cpu": node_cpu,
            "cpus": [cfg.cpus_per_node, cfg.cpus_per_node // 2],
            "mem": [total, total - used, round(100.0 * used / total, 1), used],
            "hostMem": [used, total],
            "cgroupMem": None,
            "shm": 50032640 + 1024 * n.idx,
            "raylet": None,  # filled by the caller (keeps the key order)
            "agent": agent,
            "bootTime": float(int(n.boot)),
            "loadAvg": [[round(cpu_sum / 100.0 + nz, 2), round(cpu_sum / 100.0, 2), round(cpu_sum / 110.0, 2)],
                        [round(cpu_sum / 100.0 / cfg.cpus_per_node, 2)] * 3],
            "disk": {"/": {"total": 3840755982336, "used": 912345678912 + 1000 * int(up), "free": 2728410303424,
                           "percent": 25.1},
                     "/tmp/ray": {"total": 3840755982336, "used": 912345678912 + 1000 * int(up),
                                  "free": 2728410303424, "percent": 25.1}},
            "diskIo": [2389859328 + int(up) * 4096, 321302528 + int(up) * 8192, 11315 + int(up), 697 + int(up)],
            "diskIoSpeed": [4096.0 * (0.5 + nz), 8192.0 * (0.5 + nz), 1.0 + nz, 1.0 + nz],
            "gpus": gpus,
            "tpus": [],
            "network": [int(up) * 1_250_000 + 1705, int(up) * 1_310_000 + 817],
            "networkSpeed": [1_250_000.0 * (0.5 + nz), 1_310_000.0 * (0.5 + nz)],
            "cmdline": ["/usr/local/lib/python3.12/site-packages/ray/core/src/ray/raylet/raylet",
                        f"--raylet_socket_name=/tmp/ray/{c.session}/sockets/raylet",
                        f"--node_id={n.node_id}", f"--node_ip_address={n.ip}",
                        *(["--head"] if n.is_head else [])],
        }
        if n.is_head:
            d["gcs"] = {
                "pid": n.gcs_pid, "createTime": round(n.start - 5.0, 2), "cpuPercent": round(1.0 + nz, 1),
                "cpuTimes": {"user": round(0.01 * up, 2), "system": round(0.006 * up, 2), "childrenUser": 0.0,
                             "childrenSystem": 0.0},
                "cmdline": ["/usr/local/lib/python3.12/site-packages/ray/core/src/ray/gcs/gcs_server",
                            f"--log_dir=/tmp/ray/{c.session}/logs", "--gcs_server_port=6379",
                            f"--node-ip-address={n.ip}", f"--session-name={c.session}",
                            f"--node-id={n.node_id}"],
                "memoryInfo": {"rss": float(179027968 + 2048 * len(c.actors)), "vms": 1210056704.0,
                               "pfaults": None, "pageins": None},
                "memoryFullInfo": None, "numFds": 78 + len(c.nodes), "gpuMemoryUsage": None, "gpuUtilization": None,
            }
        return d

    def summary_entry(self, n: NodeInfo) -> dict:
        got = self._summary.get(n.idx)
        if got is None:
            got = self._physical(n)
            got["raylet"] = self._raylet(n, with_core_workers=True)
            self._summary[n.idx] = got
        return got

    def summary(self) -> list[dict]:
        with self.c._lock:  # builders run in executor threads; one at a time keeps the lazy caches sane
            if self._summary_all is None:
                self._summary_all = [self.summary_entry(n) for n in self.c.nodes]
            return self._summary_all

    def logical_resources(self) -> dict[str, str]:
        with self.c._lock:
            return self._logical_resources()

    def _logical_resources(self) -> dict[str, str]:
        cfg = self.c.config
        out = {}
        for n in self.c.nodes:
            pg = cfg.gpus_per_node if n.pg_id else 0
            cpu_used = pg + sum(a.required_resources.get("CPU", 0.0) for a in n.actors
                                if a.state == "ALIVE" and not a.pg_id)
            lines = [f"{cpu_used:.1f}/{float(cfg.cpus_per_node):.1f} CPU ({float(pg):.1f} used of {float(pg):.1f} "
                     "reserved in placement groups)"]
            if cfg.gpus_per_node:
                lines.append(f"{float(pg):.1f}/{float(cfg.gpus_per_node):.1f} GPU ({float(pg):.1f} used of "
                             f"{float(pg):.1f} reserved in placement groups)")
                lines.append("0.0/1.0 accelerator_type:H200")
            lines.append(f"0B/{cfg.mem_per_node * 0.7 / GIB:.2f}GiB memory")
            lines.append(f"0B/{cfg.mem_per_node * 0.09 / GIB:.2f}GiB object_store_memory")
            out[n.node_id] = "\n".join(lines)
        return out

    def detail(self, n: NodeInfo) -> dict:
        """/nodes/{id} data.detail: summary dict minus coreWorkersStats, plus workers[] and actors{}."""
        with self.c._lock:
            return self._detail(n)

    def _detail(self, n: NodeInfo) -> dict:
        phys = self._physical(n)
        procs = self._proc_stats(n)
        cws = self._core_worker_stats(n) if self.c.config.worker_core_stats else {}
        workers = []
        for p, st in procs:
            if p.kind == "vllm_child":
                continue  # not reported by the raylet
            cw = cws.get(p.pid)
            workers.append({**st, "cmdline": self._cmdline(p), "coreWorkerStats": [cw] if cw else [], "language": "PYTHON",
                            "jobId": cw["jobId"] if cw else "ffff"})
        out: dict = {}
        for k, v in phys.items():
            if k == "raylet":
                out["workers"] = workers
                out["raylet"] = self._raylet(n, with_core_workers=False)
            else:
                out[k] = v
        out["actors"] = {a.actor_id: self._logical_actor(a) for a in n.actors}
        return out

    def logical_actor(self, a: Actor) -> dict:
        with self.c._lock:
            return self._logical_actor(a)

    def _logical_actor(self, a: Actor) -> dict:
        got = self._logical.get(a.idx)
        if got is not None:
            return got
        c = self.c
        n = c.nodes[a.node]
        procs = self._proc_stats(n)
        d = {
            "actorId": a.actor_id, "jobId": JOB_ID,
            "address": {"nodeId": n.node_id, "ipAddress": n.ip, "port": a.proc.port, "workerId": a.proc.worker_id},
            "name": a.name, "className": a.class_name,
        }
        if a.pg_id:
            d["placementGroupId"] = a.pg_id
        start = int(a.created * 1000)
        d.update({
            "state": a.state, "numRestarts": "0", "timestamp": float(start), "pid": a.proc.pid,
            "startTime": start, "endTime": int(a.died_at * 1000) if a.died_at else 0, "reprName": "",
            "labelSelector": {}, "actorClass": a.class_name,
            "exitDetail": "-" if a.state == "ALIVE" else _first_line(c._actor_died_msg(a)),
            "requiredResources": ({"CPU": 1.0, "GPU": 1.0} if a.pg_id else dict(a.required_resources)),
            "gpus": [], "processStats": None,
        })
        if c.config.worker_core_stats:
            cw = self._core_worker_stats(n).get(a.proc.pid)
            if cw:
                d.update(cw)
                d["gpus"] = [g for g in self._gpus[n.idx]
                             if any(pp["pid"] == a.proc.pid for pp in g["processesPids"])]
                d["processStats"] = next(({**st, "cmdline": self._cmdline(p)} for p, st in procs if p is a.proc),
                                         None)
        d["mem"] = self._physical_mem(n)
        d["tpus"] = []
        self._logical[a.idx] = d
        return d

    def _physical_mem(self, n: NodeInfo) -> list:
        procs = self._proc_stats(n)
        used = sum(int(st["memoryInfo"]["rss"]) for _, st in procs) + 40 * GIB
        total = self.c.config.mem_per_node
        return [total, total - used, round(100.0 * used / total, 1), used]


def _first_line(s: str) -> str:
    return s.splitlines()[0] if s else ""



__all__ = [
    "ACTOR_BASE_COLUMNS", "ACTOR_COLUMNS", "ACTOR_FILTERABLE", "BOOL_COLUMNS", "INT_COLUMNS", "JOB_ID",
    "NODE_BASE_COLUMNS", "NODE_COLUMNS", "NODE_FILTERABLE", "PLANTED_SECRETS", "TASK_BASE_COLUMNS",
    "TASK_COLUMNS", "TASK_FILTERABLE", "WORKER_BASE_COLUMNS", "WORKER_COLUMNS", "WORKER_FILTERABLE",
    "ClusterConfig", "FakeClock", "FakeCluster", "NodeSnapshot", "Phase", "TaskSnapshot", "to_camel_case",
]

