"""Step metrics that look like a real verl GRPO run (Qwen2.5-0.5B on GSM8K, batch 256, n=5): the keys
``RayPPOTrainer.fit`` logs, with the noise real runs have — a reward that rises, a loss that wanders, a grad
norm that varies, an entropy that declines slowly. Pure Python (no Ray): the demo's controller logs them
through verl's ``Tracking``, and the tests use them as healthy noise."""

from __future__ import annotations

import math
import random

BATCH, N, MAX_RESPONSE = 256, 5, 1024


class RunMetrics:
    """One run's metrics, step by step. ``timing`` overrides the phases' seconds (the demo measures its own)."""

    def __init__(self, seed: int = 0, gpus: int = 8) -> None:
        self.rng = random.Random(seed)
        self.gpus = gpus
        self.loss = 0.0
        self.mem_gb = 48.0

    def step(self, step: int, timing: dict[str, float] | None = None, nan_grad: bool = False) -> dict[str, float]:
        r = self.rng
        g = r.gauss
        progress = 1 / (1 + math.exp(-(step - 60) / 25))  # the reward's S-curve
        score = min(1.0, max(0.0, 0.22 + 0.55 * progress + g(0, 0.025)))
        self.loss = 0.7 * self.loss + g(0, 0.012)  # wanders around 0
        resp = max(60.0, 230 - 40 * progress + g(0, 12))
        clip = max(0.0, min(1.0, 0.02 + 0.01 * g(0, 1)))
        t = timing or {"gen": r.lognormvariate(math.log(14), 0.08), "reward": r.uniform(0.3, 0.5),
                       "old_log_prob": r.lognormvariate(math.log(3.1), 0.05),
                       "ref": r.lognormvariate(math.log(2.9), 0.05), "adv": r.uniform(0.03, 0.06),
                       "update_actor": r.lognormvariate(math.log(9.5), 0.05),
                       "update_weights": r.lognormvariate(math.log(1.2), 0.1)}
        t = dict(t)
        step_s = t.pop("step", None) or sum(t.values()) + r.uniform(0.2, 0.4)
        tokens = BATCH * N * (105 + resp)
        self.mem_gb += r.uniform(-0.05, 0.06)
        m: dict[str, float] = {
            "actor/entropy": max(0.05, 0.55 - 0.18 * progress + g(0, 0.012)),
            "actor/pg_loss": self.loss,
            "actor/pg_clipfrac": abs(g(0.003, 0.001)),
            "actor/ppo_kl": g(0.0004, 0.0002),
            "actor/kl_loss": 0.001 + 0.02 * progress * r.uniform(0.9, 1.1),
            "actor/grad_norm": math.nan if nan_grad else r.lognormvariate(math.log(0.35), 0.25),
            "actor/lr": 1e-6,
            "critic/score/mean": score,
            "critic/score/max": 1.0,
            "critic/score/min": 0.0,
            "critic/rewards/mean": score,
            "critic/advantages/mean": g(0, 0.002),
            "critic/advantages/max": 1.79 + g(0, 0.02),
            "critic/advantages/min": -1.79 + g(0, 0.02),
            "response_length/mean": resp,
            "response_length/max": float(MAX_RESPONSE if r.random() < 0.6 else r.randint(700, 1023)),
            "response_length/min": float(r.randint(20, 60)),
            "response_length/clip_ratio": clip,
            "prompt_length/mean": 105 + g(0, 2),
            **{f"timing_s/{k}": v for k, v in t.items()},
            "timing_s/step": step_s,
            "perf/total_num_tokens": float(int(tokens)),
            "perf/time_per_step": step_s,
            "perf/throughput": tokens / step_s / self.gpus,
            "perf/max_memory_allocated_gb": 21.3 + g(0, 0.05),
            "perf/max_memory_reserved_gb": 24.1,
            "perf/cpu_memory_used_gb": self.mem_gb,
        }
        return m
