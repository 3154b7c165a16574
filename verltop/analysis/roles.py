"""verl's naming rules: worker group, rank, role and step phase from what Ray shows.

Facts (verl 0.5–0.9, single_controller/ray/base.py): workers get ``RANK``, ``WORLD_SIZE``, ``WG_PREFIX`` and
``RAY_LOCAL_WORLD_SIZE`` in their runtime env and are named ``{prefix}{Class}_{pg_idx}:{local_rank}``; a
colocated ``WorkerDict`` exposes each hosted role's methods as ``{role}_{method}``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from verltop.convert import to_int
from verltop.model import PHASES, RawActor

# Longest first, so "actor_rollout_ref_update_actor" is actor_rollout_ref, not actor_rollout.
ROLE_PREFIXES = ("actor_rollout_ref", "actor_rollout", "critic", "teacher", "actor", "rollout", "ref", "rm")

# When a colocated worker is idle, show the role that names it best.
_ROLE_PREFERENCE = ("actor_rollout_ref", "actor_rollout", "actor", "rollout", "critic", "ref", "rm", "teacher")

_PLAIN_CLASSES = {
    "ActorRolloutRefWorker": "actor_rollout_ref",
    "ActorRolloutWorker": "actor_rollout",
    "AsyncActorRolloutRefWorker": "actor_rollout",
    "DetachActorWorker": "actor",
    "DetachAsyncRolloutWorker": "rollout",
    "CriticWorker": "critic",
    "RefWorker": "ref",
    "RewardModelWorker": "rm",
    "TaskRunner": "controller",
    "TaskRunnerV1": "controller",
    "vLLMHttpServer": "rollout_server",
    "SGLangHttpServer": "rollout_server",
    "TRTLLMHttpServer": "rollout_server",
    "AsyncvLLMServer": "rollout_server",
    "AsyncSGLangServer": "rollout_server",
    "AgentLoopWorker": "agent_loop",
    "AgentLoopWorkerTQ": "agent_loop",
    "FullyAsyncAgentLoopWorker": "agent_loop",
    "RewardLoopWorker": "reward_loop",
}

_NAME_RULES = (
    (re.compile(r"^(vllm|sglang|trtllm)_server_"), "rollout_server"),
    (re.compile(r"^async_llm_server_\d+"), "rollout_server"),
    (re.compile(r"^agent_loop_worker_"), "agent_loop"),
    (re.compile(r"^reward_loop_worker_"), "reward_loop"),
    (re.compile(r"^rollout_teacher_(standalone|colocate)_"), "teacher"),
    (re.compile(r"^rollout_reward_(standalone|colocate)_"), "rm"),
    (re.compile(r"^rollout_(standalone|colocate)_"), "rollout"),
)

_RANK_SUFFIX = re.compile(r"_(\d+):(\d+)$")

# method (role prefix stripped) → phase
_PHASE_OF_METHOD = {
    "generate_sequences": "gen",
    "generate": "gen",
    "compute_rm_score": "reward",
    "compute_score_batch": "reward",
    "compute_log_prob": "old_log_prob",
    "compute_ref_log_prob": "ref",
    "compute_values": "values",
    "infer_batch": "values",
    "update_critic": "update_critic",
    "train_mini_batch": "update_critic",
    "update_actor": "update_actor",
    "update_weights": "weight_sync",
    "sync_weights": "weight_sync",
    "sync": "weight_sync",
    "save_checkpoint": "save",
}



@dataclass(frozen=True, slots=True)
class Identity:
    worker_group: str | None
    rank: int | None
    world_size: int | None
    base_role: str  # role from the class or name alone ("colocated" for WorkerDict)
    fr_dump_prefix: str | None = None
    fr_pipe_prefix: str | None = None
    ras_addr: str | None = None


def short_class(class_name: str) -> str:
    """``create_colocated_worker_cls.<locals>.WorkerDict`` → ``WorkerDict``."""
    return class_name.rsplit(".", 1)[-1]


def is_colocated(class_name: str) -> bool:
    c = short_class(class_name)
    return c.endswith("WorkerDict") or c.startswith("FusedWorker_")


def method_of(task_name: str | None) -> str | None:
    """``WorkerDict.actor_rollout_update_actor`` → ``actor_rollout_update_actor``."""
    if not task_name:
        return None
    return task_name.rsplit(".", 1)[-1]


@lru_cache(maxsize=4096)
def split_role(method: str | None) -> tuple[str | None, str | None]:
    """``critic_compute_values`` → (``critic``, ``compute_values``); unprefixed → (None, method)."""
    if not method:
        return None, method
    for p in ROLE_PREFIXES:
        if method.startswith(p + "_") and len(method) > len(p) + 1:
            return p, method[len(p) + 1 :]
    return None, method


@lru_cache(maxsize=65536)
def identity(a: RawActor) -> Identity:
    """Worker group, rank and world size from the runtime env, falling back to the actor name."""
    cls = short_class(a.class_name)
    rank = to_int(a.env_get("RANK"))
    world = to_int(a.env_get("WORLD_SIZE"))
    group = a.env_get("WG_PREFIX") or None
    name = a.name or ""
    m = _RANK_SUFFIX.search(name)
    if m and (rank is None or group is None):
        pg_idx, local_rank = int(m.group(1)), int(m.group(2))
        lws = to_int(a.env_get("RAY_LOCAL_WORLD_SIZE"))
        if rank is None and (lws is not None or pg_idx == 0):
            rank = pg_idx * (lws or 0) + local_rank
        if group is None:
            stem = name[: m.start()]
            i = stem.rfind(cls)
            group = (stem[:i] if i > 0 else stem) or None
    return Identity(
        worker_group=group, rank=rank, world_size=world, base_role=base_role(a.class_name, a.name),
        fr_dump_prefix=a.env_get("TORCH_FR_DUMP_TEMP_FILE") or a.env_get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
        fr_pipe_prefix=a.env_get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"),
        ras_addr=a.env_get("NCCL_RAS_ADDR"),
    )


@lru_cache(maxsize=65536)
def base_role(class_name: str, name: str | None) -> str:
    """Role from class and name alone; ``colocated`` means "ask the method names"."""
    cls = short_class(class_name)
    if is_colocated(class_name):
        return "colocated"
    if cls in _PLAIN_CLASSES:
        return _PLAIN_CLASSES[cls]
    if cls.endswith("TaskRunner") or cls.startswith("TaskRunner"):
        return "controller"
    for rx, role in _NAME_RULES:
        if name and rx.search(name):
            return role
    return "other"


def roles_from_methods(methods: Iterable[str]) -> tuple[str, ...]:
    """Roles hosted by a colocated worker, from the ``{role}_{method}`` names it has run."""
    found = {r for r, _ in (split_role(m) for m in methods) if r}
    return tuple(r for r in _ROLE_PREFERENCE if r in found)


def active_role(base: str, roles: tuple[str, ...], running_method: str | None, last_method: str | None) -> str:
    """The role of the running task, else the worker's main role (the last task's role when its roles are
    not known yet). An idle worker keeps one stable role, so rows do not flicker between roles."""
    if base != "colocated":
        return base
    r, _ = split_role(running_method)
    if r:
        return r
    if roles:
        return roles[0]
    r, _ = split_role(last_method)
    return r or "other"


@lru_cache(maxsize=4096)
def phase_of_method(method: str | None) -> str | None:
    _, bare = split_role(method)
    if not bare:
        return None
    if bare in _PHASE_OF_METHOD:
        return _PHASE_OF_METHOD[bare]
    if "update_weights" in bare or bare.startswith("sync"):
        return "weight_sync"
    return None


def step_phase(running: Iterable[tuple[str, str | None]]) -> str | None:
    """The verl step phase from ``(role, method)`` of running tasks.

    Worker-group methods win over helper actors; among several phases the latest in step order wins
    (async trainers overlap generation with training).
    """
    worker, helper = set(), set()
    for role, method in running:
        ph = phase_of_method(method)
        if ph is None:
            continue
        (helper if role in ("rollout_server", "agent_loop", "reward_loop", "controller") else worker).add(ph)
    found = worker or helper
    if not found:
        return None
    return max(found, key=PHASES.index)
