"""Worker classes of the demo job: four verl roles that do small real torch work and real gloo collectives.

The classes are plain verl ``Worker`` subclasses; ``job.py`` fuses them into ``WorkerDict`` actors with
``create_colocated_worker_cls``, exactly as verl's ``RayPPOTrainer.init_workers`` does, so Ray shows
``create_colocated_worker_cls.<locals>.WorkerDict`` actors running ``WorkerDict.<role>_<method>`` tasks.

Each phase lasts a random 0.3–3 s per rank (generation the longest). Most of that time is spent sleeping
between short bursts of compute, so eight of these processes fit on two cores. Ranks finish their local
work at different times and then wait for each other inside gloo collectives, as real ranks do.

The hang: in ``update_actor`` the chosen rank calls ``_stuck_rollout`` instead of entering the gradient
``all_reduce``, so its peers block inside ``torch.distributed.all_reduce`` and the controller blocks
inside ``ray.get``. The stuck rank polls for a release file so that tests can un-hang the job.
"""

from __future__ import annotations

import json
import os
import random
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register

from verltop.demo.rendezvous import join_gloo

# Long enough that a demo hang never times out by itself; verl's default nccl_timeout is 600 s.
PG_TIMEOUT = timedelta(hours=2)

# Seconds (low, high) per phase before jitter; the controller passes a scale factor.
PHASE_SECONDS: dict[str, tuple[float, float]] = {
    "generate_sequences": (1.6, 3.0),
    "compute_rm_score": (0.3, 0.7),
    "compute_log_prob": (0.5, 1.1),
    "compute_ref_log_prob": (0.5, 1.1),
    "compute_values": (0.4, 1.0),
    "update_critic": (0.9, 1.8),
    "update_actor": (1.2, 2.4),
    "update_weights": (0.3, 0.6),
}

# File names inside the demo's state directory (shared with cluster.py).
HUNG_FILE = "hung"
RELEASE_FILE = "release"
PIDS_DIR = "pids"
RENDEZVOUS_DIR = "rendezvous"  # each group's store port, from its rank 0

LEAK_STRETCH = 3.0  # update_actor lasts this many times longer while a leak is asked for
LEAK_CAPPED_FILE = "leak_capped"  # written once when the leaking rank stops growing (its cap)
HIDDEN = 128
MICRO_BATCHES = 4
HANG_MICRO_BATCH = 1  # the stuck rank skips the all_reduce of this micro-batch


def init_process_group_once(worker: _DemoRole) -> None:
    """Join the worker group's gloo process group, once per process.

    Colocated roles (actor_rollout + critic) live in one WorkerDict process and must share one default
    process group, so the second role's ``init_model`` finds it already initialised.
    """
    if dist.is_initialized():
        return
    addr, port = worker.get_master_addr_port()
    # verl's master port names the group; the store's own port comes from rank 0 (see rendezvous.py)
    note = worker.state_dir / RENDEZVOUS_DIR / f"{os.environ.get('WG_PREFIX', 'wg')}-{addr}-{port}"
    join_gloo(worker.rank, worker.world_size, addr, note, PG_TIMEOUT)


class _DemoRole(Worker):
    """Shared plumbing: a tiny model, phase timing and the collectives every role uses."""

    role = "demo"

    def __init__(self, state_dir: str, seed: int = 0, scale: float = 1.0) -> None:
        super().__init__()
        self.state_dir = Path(state_dir)
        self.seed = seed
        self.scale = scale
        self.model: nn.Module | None = None
        self.optim: torch.optim.Optimizer | None = None

    # -- setup -------------------------------------------------------------------------------------------

    def _init_model(self) -> dict[str, Any]:
        # 2 cores for 9+ processes: one intra-op thread each (interop threads can only be set once).
        torch.set_num_threads(1)
        init_process_group_once(self)
        torch.manual_seed(self.seed)  # same init on every rank, as after a broadcast from rank 0
        self.model = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN))
        self.optim = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self._record_pid()
        dist.barrier()
        return {"role": self.role, "rank": self.rank, "pid": os.getpid()}

    def _record_pid(self) -> None:
        # cluster.stop() kills leftovers by these pids; tests read them for RSS figures.
        d = self.state_dir / PIDS_DIR
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{os.getpid()}").write_text(json.dumps({"role": self.role, "rank": self.rank}))

    # -- timing ------------------------------------------------------------------------------------------

    def _duration(self, phase: str, step: int) -> float:
        lo, hi = PHASE_SECONDS[phase]
        rng = random.Random(f"{self.seed}:{step}:{phase}:{self.rank}")
        return rng.uniform(lo, hi) * self.scale

    def _compute(self, seconds: float, duty: float = 0.12) -> torch.Tensor:
        """Forward/backward passes in short bursts for ``seconds``, sleeping between bursts."""
        assert self.model is not None
        deadline = time.monotonic() + seconds
        loss = torch.zeros(())
        while True:
            t0 = time.monotonic()
            x = torch.randn(32, HIDDEN)
            loss = self.model(x).pow(2).mean()
            loss.backward()
            busy = time.monotonic() - t0
            left = deadline - time.monotonic()
            if left <= 0:
                return loss.detach()
            time.sleep(min(left, busy * (1 - duty) / duty + 0.01))

    def _flat_grads(self) -> torch.Tensor:
        assert self.model is not None
        return torch.cat([
            (p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in self.model.parameters()
        ])

    def _metric_all_reduce(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float32)
        dist.all_reduce(t)
        return float(t.item()) / self.world_size


class ActorRolloutWorker(_DemoRole):
    """The ``actor_rollout`` role: rollout generation, old log-probs, the policy update, weight sync."""

    role = "actor_rollout"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict[str, Any]:
        return self._init_model()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def generate_sequences(self, step: int) -> dict[str, Any]:
        # rank 0 owns the prompt batch, as the dataloader shard would.
        prompts = torch.randint(0, 32000, (8, 64)) if self.rank == 0 else torch.zeros(8, 64, dtype=torch.int64)
        dist.broadcast(prompts, src=0)
        self._compute(self._duration("generate_sequences", step), duty=0.15)
        length = torch.tensor([random.Random(f"len:{step}:{self.rank}").randint(64, 512)])
        lengths = [torch.zeros_like(length) for _ in range(self.world_size)]
        dist.all_gather(lengths, length)
        return {"rank": self.rank, "response_lengths": [int(t.item()) for t in lengths]}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def compute_log_prob(self, step: int) -> dict[str, Any]:
        loss = self._compute(self._duration("compute_log_prob", step))
        return {"rank": self.rank, "entropy": self._metric_all_reduce(float(loss))}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def update_actor(self, step: int, hang_rank: int = -1, hang_late: bool = False,
                     leak: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.optim is not None
        # a leaking job's update is longer (every rank is told), so that the phase outlasts the monitor's
        # sampling (a call is seen running a poll or two after it began): its few seconds have samples of their own
        stretch = LEAK_STRETCH if leak and not leak.get("free") else 1.0
        per_mb = self._duration("update_actor", step) * stretch / MICRO_BATCHES
        for mb in range(MICRO_BATCHES):
            self.optim.zero_grad()
            if mb == MICRO_BATCHES - 1 and leak is not None:
                self._leak(leak, step)  # in the last micro-batch, as verl#6696's grew per micro-batch
            self._compute(per_mb, duty=0.15)
            if self.rank == hang_rank and mb == HANG_MICRO_BATCH and not hang_late:
                _stuck_rollout(self.state_dir, step=step, rank=self.rank)
            grads = self._flat_grads()
            dist.all_reduce(grads)  # the data-parallel gradient sync the peers wait in
            self.optim.step()
        loss = self._metric_all_reduce(0.1)
        if self.rank == hang_rank and hang_late:  # after the last collective: its peers finish, it is late
            _stuck_rollout(self.state_dir, step=step, rank=self.rank)
        return {"rank": self.rank, "pg_loss": loss}

    def _leak(self, leak: dict[str, Any], step: int) -> None:
        """The demo's leak (``verltop demo --leak``): the chosen rank keeps ``mib`` MiB more host memory after
        every update_actor, written so that it is resident, until ``cap_mib`` (then it says so once and stops
        growing); ``{"free": true}`` lets go of it all."""
        kept: list[bytearray] = self.__dict__.setdefault("_kept", [])
        if leak.get("free"):
            kept.clear()
            return
        if self.rank != leak.get("rank"):
            return
        mib, cap = int(leak.get("mib", 64)), int(leak.get("cap_mib", 1024))
        if len(kept) * mib + mib > cap:
            capped = self.state_dir / LEAK_CAPPED_FILE
            if not capped.exists():
                capped.write_text(json.dumps({"rank": self.rank, "step": step, "kept_mib": len(kept) * mib}))
                print(f"verltop demo: rank {self.rank} stopped leaking at {len(kept) * mib} MiB (the cap)", flush=True)
            return
        kept.append(bytearray(b"\x5a") * (mib << 20))  # filled: resident, not just reserved

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def update_weights(self, step: int) -> dict[str, Any]:
        assert self.model is not None
        self._compute(self._duration("update_weights", step), duty=0.05)
        for p in self.model.parameters():
            dist.broadcast(p.data, src=0)  # push the trained weights to the rollout engine of every rank
        return {"rank": self.rank}


class CriticWorker(_DemoRole):
    """The ``critic`` role, colocated with ``actor_rollout`` in the same WorkerDict processes."""

    role = "critic"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict[str, Any]:
        return self._init_model()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def compute_values(self, step: int) -> dict[str, Any]:
        loss = self._compute(self._duration("compute_values", step))
        return {"rank": self.rank, "values_mean": self._metric_all_reduce(float(loss))}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def update_critic(self, step: int) -> dict[str, Any]:
        assert self.optim is not None
        per_mb = self._duration("update_critic", step) / 2
        for _ in range(2):
            self.optim.zero_grad()
            self._compute(per_mb)
            dist.all_reduce(self._flat_grads())
            self.optim.step()
        return {"rank": self.rank, "vf_loss": self._metric_all_reduce(0.2)}


class RefPolicyWorker(_DemoRole):
    """The ``ref`` role: reference-policy log-probs in its own WorkerDict group."""

    role = "ref"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict[str, Any]:
        return self._init_model()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def compute_ref_log_prob(self, step: int) -> dict[str, Any]:
        loss = self._compute(self._duration("compute_ref_log_prob", step))
        out = [torch.zeros(1) for _ in range(self.world_size)]
        dist.all_gather(out, loss.reshape(1))
        return {"rank": self.rank, "ref_kl": float(sum(t.item() for t in out))}


class RewardModelWorker(_DemoRole):
    """The ``rm`` role: a reward model in its own WorkerDict group (verl's ``reward_pool``)."""

    role = "rm"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> dict[str, Any]:
        return self._init_model()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def compute_rm_score(self, step: int) -> dict[str, Any]:
        loss = self._compute(self._duration("compute_rm_score", step))
        score = self._metric_all_reduce(float(loss))
        dist.barrier()
        return {"rank": self.rank, "score": score}


def _stuck_rollout(state_dir: Path, step: int, rank: int) -> None:
    """Where the hung rank sits instead of joining the collective: sleeps until a release file appears.

    Writes the ``hung`` marker on entry (``DemoHandle.hung()`` reads it) and removes it on release.
    """
    hung = state_dir / HUNG_FILE
    release = state_dir / RELEASE_FILE
    hung.write_text(json.dumps({"step": step, "rank": rank, "pid": os.getpid(), "since": time.time()}))
    while not release.exists():
        time.sleep(0.5)
    release.unlink(missing_ok=True)
    hung.unlink(missing_ok=True)
