"""The demo's single controller: a ``TaskRunner`` actor that builds verl worker groups and runs a PPO loop.

It mirrors ``verl/trainer/main_ppo.py`` (``TaskRunner.run``) and ``RayPPOTrainer.init_workers`` / ``fit``:

- ``global_pool`` (4 bundles): ``actor_rollout`` + ``critic`` fused in one WorkerDict group of 4 ranks;
- ``ref_pool`` (2 bundles): ``ref`` in its own WorkerDict group of 2 ranks;
- ``reward_pool`` (2 bundles): ``rm`` in its own WorkerDict group of 2 ranks;
- the agent-loop rollout of verl 0.9 (``rollout.py``): a ``vLLMHttpServer`` actor (``vllm_server_0_0``) whose
  engine runs in child processes (``VLLM::EngineCore_DP0`` → ``VLLM::Worker_TP0``/``TP1``), two
  ``AgentLoopWorker`` actors that generate on it, and a ``RewardLoopWorker`` that scores in a sandbox child.

Each group comes from ``create_colocated_worker_cls`` + ``RayWorkerGroup(...).spawn(prefix_set=...)``, so
actor names are ``{6 random chars}WorkerDict_0:{local_rank}`` and tasks ``WorkerDict.{role}_{method}``.

A step: generation through the agent loops (each prompt: ``vLLMHttpServer.generate`` → the engine's batch →
a gloo all-reduce among the TP workers per decode step; then ``RewardLoopWorker.compute_score`` → sandbox),
the reward model, log-probs, values, advantages, the critic and actor updates, and the weight sync (the
trainer's ranks, then the server's TP workers load the new weights).

Hang requests arrive as a flag file (``config["hang_file"]``, JSON ``{"target"}``), so the requester never
needs Ray. Targets: ``rank`` (rank ``hang_rank`` of the trainer stops before its gradient all-reduce in
``update_actor``), ``late`` (that rank stops after its last collective: its peers finish, it arrives
late), ``tp1`` (TP worker 1 of the rollout server stops inside ``_load_weights_bucket`` at the
weight sync), ``sandbox`` (one sandbox child of the reward loop never returns, during generation). The
controller looks for the file before each step and before the points where a target fires, and deletes it
when it takes it (one request = one hang).
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import ray

# One CPU like verl's TaskRunner; the worker pools reserve 8 more CPUs in placement groups.
TASK_RUNNER_CPUS = 1
PROGRESS_FILE = "progress.json"
PHASE_LOG = "phases.jsonl"  # one line per phase as it begins: the job's own timing, for comparisons
HANG_TARGETS = ("rank", "late", "tp1", "sandbox")
METRICS_FILE = "metrics.jsonl"  # verl's file logger writes every logged step here
NAN_REQUEST_FILE = "nan_request"  # present: the next step logs a NaN actor/grad_norm (the N key)
LEAK_REQUEST_FILE = "leak_request"  # JSON {"rank", "mib", "cap_mib"} or {"free": true}: taken before update_actor
AGENT_LOOP_WORKERS = 2
PROMPTS_PER_WORKER = 4


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)  # readers never see a half-written file


@ray.remote(num_cpus=TASK_RUNNER_CPUS)
class TaskRunner:
    """Controller actor; ``run`` is one long task, as in verl (``TaskRunner.run`` in the State API)."""

    def run(self, config: dict[str, Any]) -> int:
        """Build the worker groups and train until ``config["max_steps"]`` (None = forever).

        config keys: state_dir, hang_file, hang_after (int | None), hang_rank, hang_target, seed, scale,
        max_steps, leak (None or ``{"rank", "mib", "cap_mib"}``: that rank of actor_rollout keeps ``mib`` MiB
        more host memory after every update_actor, up to ``cap_mib``). Returns the number of completed steps.
        """
        from verl.single_controller.ray import (
            RayClassWithInitArgs,
            RayResourcePool,
            RayWorkerGroup,
            create_colocated_worker_cls,
        )

        from verltop.demo.rollout import SERVER_NAME, AgentLoopWorker, RewardLoopWorker, vLLMHttpServer
        from verltop.demo.workers import ActorRolloutWorker, CriticWorker, RefPolicyWorker, RewardModelWorker

        self.state_dir = Path(config["state_dir"])
        self.hang_file = Path(config["hang_file"])
        self.hang_after: int | None = config.get("hang_after")
        self.hang_target: str = config.get("hang_target", "rank")
        hang_rank: int = config.get("hang_rank", 2)
        seed = config.get("seed", 0)
        max_steps: int | None = config.get("max_steps")
        leak: dict[str, Any] | None = config.get("leak")
        role_kwargs = {"state_dir": str(self.state_dir), "seed": seed,
                       "scale": config.get("scale", 1.0)}
        self._progress(0, "init")
        self._record_pid()

        # The rollout first: its engine and TP workers start while the worker groups do.
        state = str(self.state_dir)
        reward_loop = ray.remote(RewardLoopWorker).options(name="reward_loop_worker_0", num_cpus=0).remote(state, seed)
        server = ray.remote(vLLMHttpServer).options(name=SERVER_NAME, num_cpus=0).remote(state, seed)
        server_ready = server.launch_server.remote()
        agent_loops = [ray.remote(AgentLoopWorker).options(name=f"agent_loop_worker_{i}", num_cpus=0).remote(
            i, server, reward_loop, state, seed) for i in range(AGENT_LOOP_WORKERS)]

        def build(pool: RayResourcePool, roles: dict[str, type]) -> dict[str, RayWorkerGroup]:
            class_dict = {key: RayClassWithInitArgs(cls=ray.remote(cls), **role_kwargs) for key, cls in roles.items()}
            worker_dict_cls = create_colocated_worker_cls(class_dict=class_dict)
            wg_dict = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=worker_dict_cls)
            return wg_dict.spawn(prefix_set=class_dict.keys())

        # max_colocate_count=1: bundles of 1 CPU, so the 3 pools + TaskRunner need 9 logical CPUs.
        all_wg: dict[str, RayWorkerGroup] = {}
        self._progress(0, "init", detail="worker groups spawn")
        all_wg |= build(RayResourcePool([4], use_gpu=False, name_prefix="global_pool", max_colocate_count=1),
                        {"actor_rollout": ActorRolloutWorker, "critic": CriticWorker})
        all_wg |= build(RayResourcePool([2], use_gpu=False, name_prefix="ref_pool", max_colocate_count=1),
                        {"ref": RefPolicyWorker})
        all_wg |= build(RayResourcePool([2], use_gpu=False, name_prefix="reward_pool", max_colocate_count=1),
                        {"rm": RewardModelWorker})
        actor, critic, ref, rm = all_wg["actor_rollout"], all_wg["critic"], all_wg["ref"], all_wg["rm"]
        if not 0 <= hang_rank < actor.world_size:
            raise ValueError(f"hang_rank {hang_rank} is outside the actor_rollout group (size {actor.world_size})")

        # verl's order: critic, ref, rm, then actor_rollout last.
        for name, wg in (("critic", critic), ("ref", ref), ("rm", rm), ("actor_rollout", actor)):
            self._progress(0, "init", detail=f"{name}.init_model")
            wg.init_model()
        self._progress(0, "init", detail="rollout server launch")
        ray.get(server_ready)

        # verl's trainer logs each step through Tracking; its console backend prints to this actor's stdout
        from verl.utils.tracking import Tracking

        from verltop.demo.metrics import RunMetrics

        # the file backend too: what was logged, for comparisons (it prints "Creating file logger at …")
        os.environ["VERL_FILE_LOGGER_PATH"] = str(self.state_dir / METRICS_FILE)
        tracking = Tracking(project_name="verltop_demo", experiment_name="demo", default_backend=["console", "file"])
        run_metrics = RunMetrics(seed, gpus=8)
        step = 0
        pending: str | None = None  # a hang target taken, waiting for its point in the step
        while max_steps is None or step < max_steps:
            step += 1
            timer = _Timer()
            pending = pending or self._take_hang_request(step)
            hang_sandbox = pending == "sandbox"
            self._progress(step, "gen", hanging=hang_sandbox)
            timer.mark("gen")
            pending = None if hang_sandbox else pending
            # verl's AgentLoopManager.generate_sequences: the batch split over the agent-loop workers
            ray.get([w.generate_sequences.remote(step, PROMPTS_PER_WORKER, hang_sandbox and i == 0)
                     for i, w in enumerate(agent_loops)])
            self._progress(step, "reward")
            timer.mark("reward")
            rm.compute_rm_score(step=step)
            self._progress(step, "old_log_prob")
            timer.mark("old_log_prob")
            actor.compute_log_prob(step=step)
            self._progress(step, "ref")
            timer.mark("ref")
            ref.compute_ref_log_prob(step=step)
            self._progress(step, "values")
            timer.mark("values")
            critic.compute_values(step=step)
            self._progress(step, "adv")
            timer.mark("adv")
            self._compute_advantage(step)
            self._progress(step, "update_critic")
            timer.mark("update_critic")
            critic.update_critic(step=step)
            pending = pending or self._take_hang_request(step)
            hang_now = pending in ("rank", "late")
            self._progress(step, "update_actor", hanging=hang_now)
            timer.mark("update_actor")
            late = pending == "late"
            pending = None if hang_now else pending
            leak = self._take_leak_request(leak)
            # While hanging, this ray.get (inside verl's func_generator) never returns.
            actor.update_actor(step=step, hang_rank=hang_rank if hang_now else -1, hang_late=late, leak=leak)
            leak = None if leak is not None and leak.get("free") else leak
            self._progress(step, "update_weights")
            timer.mark("update_weights")
            actor.update_weights(step=step)
            pending = pending or self._take_hang_request(step)
            hang_now = pending == "tp1"
            self._progress(step, "update_weights", hanging=hang_now)
            pending = None if hang_now else pending
            # the rollout server's TP workers load the new weights (TP worker 1 hangs there on request)
            ray.get(server.update_weights.remote(step, 1 if hang_now else -1))
            self._progress(step, "done")
            nan = (self.state_dir / NAN_REQUEST_FILE).exists()
            (self.state_dir / NAN_REQUEST_FILE).unlink(missing_ok=True)
            tracking.log(data=run_metrics.step(step, timer.done(), nan_grad=nan), step=step)
        return step

    # -- helpers -----------------------------------------------------------------------------------------

    def _take_hang_request(self, step: int) -> str | None:
        """The hang target due now, if any: a request file (consumed), or the automatic hang after
        ``hang_after`` steps (once: a released job trains on)."""
        if self.hang_file.exists():
            try:
                target = json.loads(self.hang_file.read_text()).get("target", "rank")
            except (OSError, ValueError, AttributeError):
                target = "rank"  # an older request: a bare timestamp
            self.hang_file.unlink(missing_ok=True)
            return target if target in HANG_TARGETS else "rank"
        if self.hang_after is not None and step > self.hang_after:
            self.hang_after = None
            return self.hang_target
        return None

    def _take_leak_request(self, leak: dict[str, Any] | None) -> dict[str, Any] | None:
        """A leak asked for while the job runs (``DemoHandle.request_leak`` / ``stop_leak``), else ``leak``."""
        f = self.state_dir / LEAK_REQUEST_FILE
        if not f.exists():
            return leak
        try:
            req = json.loads(f.read_text())
        except (OSError, ValueError):
            req = None
        f.unlink(missing_ok=True)
        return req if isinstance(req, dict) else leak

    def _compute_advantage(self, step: int) -> None:
        # GAE runs in the controller in verl; a little torch work and no worker task.
        import torch

        torch.set_num_threads(1)
        rewards = torch.randn(64, 128)
        values = torch.randn(64, 128)
        adv = torch.zeros_like(rewards)
        last = torch.zeros(64)
        for t in reversed(range(rewards.shape[1])):
            last = rewards[:, t] - values[:, t] + 0.99 * 0.95 * last
            adv[:, t] = last
        time.sleep(random.Random(f"adv:{step}").uniform(0.1, 0.3))

    def _progress(self, step: int, phase: str, hanging: bool = False, detail: str | None = None) -> None:
        now = time.time()
        doc = {"step": step, "phase": phase, "hanging": hanging, "time": now}
        if detail:  # where the start is, should it never get to step 1
            doc["detail"] = detail
        _write_json(self.state_dir / PROGRESS_FILE, doc)
        if detail:  # the phase log keeps one line per phase
            return
        with open(self.state_dir / PHASE_LOG, "a") as f:
            f.write(json.dumps({"step": step, "phase": phase, "time": now}) + "\n")

    def _record_pid(self) -> None:
        from verltop.demo.workers import PIDS_DIR

        d = self.state_dir / PIDS_DIR
        d.mkdir(parents=True, exist_ok=True)
        (d / str(os.getpid())).write_text(json.dumps({"role": "task_runner", "rank": 0}))


class _Timer:
    """Seconds per section of a step, as verl's ``marked_timer`` gives ``timing_s/<name>``."""

    def __init__(self) -> None:
        self.start = self.at = time.perf_counter()
        self.name: str | None = None
        self.times: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        if self.name is not None:
            self.times[self.name] = self.times.get(self.name, 0.0) + now - self.at
        self.name, self.at = name, now

    def done(self) -> dict[str, float]:
        self.mark("")
        return {**{k: v for k, v in self.times.items() if k}, "step": time.perf_counter() - self.start}
