from __future__ import annotations

import pytest

from verltop.analysis import roles as R
from verltop.model import RawActor

WD = "create_colocated_worker_cls.<locals>.WorkerDict"


def actor(cls=WD, name="aB3xYzWorkerDict_1:3", env=()) -> RawActor:
    return RawActor("id", cls, "ALIVE", name, "n", 1, env=tuple(env))


def test_identity_from_runtime_env():
    a = actor(env=[("RANK", "11"), ("WORLD_SIZE", "16"), ("WG_PREFIX", "aB3xYz")])
    i = R.identity(a)
    assert (i.worker_group, i.rank, i.world_size, i.base_role) == ("aB3xYz", 11, 16, "colocated")


def test_identity_fallback_from_name_suffix():
    i = R.identity(actor(env=[("RAY_LOCAL_WORLD_SIZE", "8")]))
    assert (i.worker_group, i.rank, i.world_size) == ("aB3xYz", 11, None)
    # pg 0 needs no local world size
    assert R.identity(actor(name="abcdWorkerDict_0:1")).rank == 1


@pytest.mark.parametrize(
    ("cls", "name", "role"),
    [
        ("TaskRunner", None, "controller"),
        ("TaskRunnerV1", None, "controller"),
        ("OneStepTaskRunner", None, "controller"),
        ("vLLMHttpServer", "vllm_server_0_1", "rollout_server"),
        ("SGLangHttpServer", "sglang_server_reward_1_0", "rollout_server"),
        ("Foo", "async_llm_server_3", "rollout_server"),
        ("AgentLoopWorker", "agent_loop_worker_2_1a2b3c4d", "agent_loop"),
        ("RewardLoopWorker", None, "reward_loop"),
        ("ActorRolloutRefWorker", "xWorker_0:0", "actor_rollout_ref"),
        ("AsyncActorRolloutRefWorker", None, "actor_rollout"),
        ("CriticWorker", None, "critic"),
        ("RewardModelWorker", None, "rm"),
        ("ServerAdapter", "rollout_colocate_0ServerAdapter_0:1", "rollout"),
        ("SomethingElse", "x", "other"),
    ],
)
def test_base_roles(cls, name, role):
    assert R.base_role(cls, name) == role


def test_colocated_roles_longest_prefix_first():
    methods = ["actor_rollout_ref_update_actor", "critic_compute_values", "ref_compute_ref_log_prob",
               "actor_rollout_generate_sequences", "rm_compute_rm_score", "__init__"]
    assert R.roles_from_methods(methods) == ("actor_rollout_ref", "actor_rollout", "critic", "ref", "rm")
    assert R.split_role("actor_rollout_ref_update_actor") == ("actor_rollout_ref", "update_actor")
    assert R.active_role("colocated", ("actor_rollout", "critic"), "critic_update_critic", None) == "critic"
    assert R.active_role("colocated", (), None, "critic_compute_values") == "critic"
    assert R.active_role("colocated", ("actor_rollout", "critic"), None, None) == "actor_rollout"


@pytest.mark.parametrize(
    ("method", "phase"),
    [
        ("actor_rollout_generate_sequences", "gen"),
        ("rm_compute_rm_score", "reward"),
        ("actor_rollout_compute_log_prob", "old_log_prob"),
        ("ref_compute_ref_log_prob", "ref"),
        ("actor_rollout_ref_compute_ref_log_prob", "ref"),
        ("critic_compute_values", "values"),
        ("critic_update_critic", "update_critic"),
        ("actor_rollout_update_actor", "update_actor"),
        ("actor_rollout_update_weights", "weight_sync"),
        ("init_model", None),
    ],
)
def test_phase(method, phase):
    assert R.phase_of_method(method) == phase


def test_step_phase_prefers_workers_over_helpers():
    assert R.step_phase([("rollout_server", "generate"), ("critic", "critic_update_critic")]) == "update_critic"
    assert R.step_phase([("agent_loop", "generate_sequences")]) == "gen"
    assert R.step_phase([("controller", "run")]) is None
