"""The OOM verdict (``analysis.oom``): each way a rank is found to have run out of memory, Ray's memory monitor's
message parsed, the verdict placed in its step and phase with its lead-up, and the suspect it makes (its peers
waiting for it are waiters)."""

from __future__ import annotations

from dataclasses import replace

from tests.analysis.helpers import in_collective, row, stack
from verltop.analysis.dump import analyse
from verltop.analysis.oom import (
    FailedCall,
    failed_ooms,
    from_call,
    from_death,
    oom_kind,
    oom_message,
    parse_memory_monitor,
    place,
    verdicts,
    with_lead_up,
)
from verltop.model import Death, PhaseRun, RawTask, Step
from verltop.model.memory import Headroom, MemoryGrowth, MemoryView, PhaseMemory
from verltop.text.contract import memory_json
from verltop.text.oom import lead_up_text, verdict_line, verdict_reason, verdict_tag
from verltop.text.suspects import suspect_reason

GIB = 1 << 30
MIB = 1 << 20
# what Ray's State API gives as a failed actor call's error (RayTaskError around torch's exception)
TORCH_OOM = (
    "ray::WorkerDict.actor_rollout_update_actor() (pid=4242, ip=10.0.0.1, actor_id=ab, repr=<WorkerDict>)\n"
    '  File "/app/verl/workers/fsdp_workers.py", line 712, in update_actor\n'
    "    metrics = self.actor.update_policy(data=data)\n"
    '  File "/x/torch/utils/_device.py", line 104, in __torch_function__\n'
    "    return func(*args, **kwargs)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 "
    "GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.87 GiB memory in use. Of the "
    "allocated memory 75.12 GiB is allocated by PyTorch, and 1.98 GiB is reserved by PyTorch but unallocated.")
# Ray's memory monitor, as Ray 2.2-2.5x words it (ray-project/ray PR #30312, the "Top 10 memory users" table)
MONITOR_OLD = (
    "Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 10.0.0.36, ID: 2ae7f1) where the task (actor ID: 1a0b, name=WorkerDict.__init__, "
    "pid=4243, memory used=28.21GB) was running was 119.73GB / 125.88GB (0.951146), which exceeds the memory "
    "usage threshold of 0.95. Ray killed this worker (ID: 0f76) because it was the most recently scheduled task; "
    "to see more information about memory usage on this node, use `ray logs raylet.out -ip 10.0.0.36`. To see "
    "the logs of the worker, use `ray logs worker-0f76*out -ip 10.0.0.36. Top 10 memory users:\n"
    "PID\tMEM(GB)\tCOMMAND\n"
    "4243\t28.21\tray::WorkerDict.actor_rollout_generate_sequences\n"
    "5120\t3.45\tray::TaskRunner.run\n"
    "88\t31.90\t/usr/bin/python vllm_engine_core.py\n"
    "Refer to the documentation on how to address the out of memory issue: "
    "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.")
# Ray 2.60 (src/ray/raylet: "Memory on the node (IP: %s, ID: %s) was %sGB used / %sGB limit (%f)",
# "%spid=%d, actual memory used=%sGB", "Top 10 memory users: %s")
MONITOR_260 = (
    "1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 10.0.0.7, ID: 9c1d) "
    "was 29.80GB used / 31.35GB limit (0.950533)\n"
    "(job ID=01000000, lease ID=77, task name=WorkerDict.actor_rollout_update_actor, required resources={CPU: 1}, "
    "pid=777, actual memory used=21.50GB, worker ID=aa11)\n"
    "Top 10 memory users:\nPID\tMEM(GB)\tCOMMAND\n777\t21.50\tray::WorkerDict.actor_rollout_update_actor\n"
    "778\t4.02\tray::WorkerDict\n")


def step(i: int, t0: float, *runs: tuple[str, str, float, float | None]) -> Step:
    return Step(i, t0, None if any(r[3] is None for r in runs) else 10.0,
                tuple(PhaseRun(ph, "wg", m, s, e, 2) for ph, m, s, e in runs), ())


STEPS = (step(6, 100.0, ("gen", "actor_rollout_generate_sequences", 100, 103),
              ("update_actor", "actor_rollout_update_actor", 104, 109)),
         step(7, 110.0, ("gen", "actor_rollout_generate_sequences", 110, 113),
              ("update_actor", "actor_rollout_update_actor", 114, None)))


def pm(aid: str, st: int, phase: str, rss: int | None, rank: int = 1, samples: int = 4) -> PhaseMemory:
    return PhaseMemory("wg", "actor_rollout", rank, f"wgWorkerDict_0:{rank}", aid, st, phase, None, rss, samples)


def test_what_says_it_ran_out_and_its_line():
    assert oom_kind(TORCH_OOM) == "gpu" and oom_kind(MONITOR_OLD) == "host" and oom_kind(MONITOR_260) == "host"
    assert oom_kind("RuntimeError: Timed out waiting 3000ms for recv") is None and oom_kind(None) is None
    assert oom_message(TORCH_OOM).startswith("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total")
    assert oom_message("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8 MiB") == \
        "CUDA out of memory. Tried to allocate 8 MiB"
    assert oom_message(MONITOR_OLD) == ("killed by Ray's memory monitor (the node ran low on memory): the node used "
                                        "119.7 GB of 125.9 GB (threshold 0.95)")


def test_ray_memory_monitor_messages_are_parsed_with_their_top_processes():
    k = parse_memory_monitor(MONITOR_OLD)
    assert (k.node_ip, k.used_bytes, k.limit_bytes, k.fraction, k.threshold) == (
        "10.0.0.36", 119_730_000_000, 125_880_000_000, 0.951146, 0.95)
    assert (k.pid, k.pid_bytes) == (4243, 28_210_000_000)
    assert k.top_processes == ((88, "/usr/bin/python vllm_engine_core.py", 31_900_000_000),
                               (4243, "ray::WorkerDict.actor_rollout_generate_sequences", 28_210_000_000),
                               (5120, "ray::TaskRunner.run", 3_450_000_000))
    k = parse_memory_monitor(MONITOR_260)
    assert (k.node_ip, k.used_bytes, k.limit_bytes, k.threshold, k.pid, k.pid_bytes) == (
        "10.0.0.7", 29_800_000_000, 31_350_000_000, None, 777, 21_500_000_000)
    assert [p for p, _, _ in k.top_processes] == [777, 778]
    assert parse_memory_monitor("Worker exits with an exit code 1") is None


def test_a_call_that_raised_an_oom_is_placed_in_its_step_and_phase():
    a1 = row("a1", rank=1, task=None)
    call = FailedCall("t9", "a1", "actor_rollout_update_actor", 114.5, 116.0, TORCH_OOM)
    v = from_call(call, a1, 120.0)
    assert (v.how, v.kind, v.rank, v.worker_group, v.phase, v.step, v.at) == (
        "task_error", "gpu", 1, "wg", "update_actor", None, 116.0)
    v = place(v, STEPS, call.start_s)
    assert v.step == 7 and v.phase == "update_actor"
    assert verdict_reason(v).startswith("ran out of GPU memory in update_actor at step 7 (CUDA out of memory. Tried "
                                        "to allocate 2.00 GiB")
    assert verdict_tag(v) == "OOM (GPU) update_actor s7"
    # Ray's memory monitor killing the worker that ran the call: its call fails with Ray's OutOfMemoryError
    m = from_call(replace(call, error="ray.exceptions.OutOfMemoryError: " + MONITOR_OLD), a1, 120.0)
    assert (m.how, m.kind, m.pid) == ("memory_monitor", "host", 4243) and len(m.top_processes) == 3
    assert from_call(replace(call, error="ValueError: bad reward"), a1, 120.0) is None
    tasks = [RawTask(task_id="t9", name="WorkerDict.actor_rollout_update_actor", func_name="x", state="FAILED",
                     actor_id="a1", node_id="n1", worker_pid=1, start_time_ms=114_500, end_time_ms=116_000,
                     error=TORCH_OOM),
             RawTask(task_id="t8", name="WorkerDict.actor_rollout_act", func_name="x", state="FAILED",
                     actor_id="a0", node_id="n1", worker_pid=1, start_time_ms=None, end_time_ms=115_000,
                     error="ValueError: x")]
    assert [c.task_id for c in failed_ooms(tasks)] == ["t9"]


def test_deaths_of_each_kind():
    dead = replace(row("a1", rank=1, task=None, state="DEAD"), death_text="worker died (SYSTEM_ERROR)")
    v = from_death(dead, Death("cuda_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4 GiB"),
                   method="actor_rollout_update_actor", at=50.0)
    assert (v.how, v.kind, v.phase, v.message) == ("worker_log", "gpu", "update_actor",
                                                   "CUDA out of memory. Tried to allocate 4 GiB")
    v = from_death(replace(dead, death_text=MONITOR_OLD), at=50.0)
    assert (v.how, v.kind, v.pid) == ("memory_monitor", "host", 4243) and v.top_processes[0][0] == 88
    sig = replace(dead, death_text="The actor died unexpectedly: Worker unexpectedly exits with a connection error "
                                   "code 2. End of file.")
    v = from_death(sig, headroom_free={"a1": 0.03}, headroom_kind={"a1": "host"}, at=50.0)
    assert (v.how, v.kind) == ("sigkill_near_limit", "host") and v.message.startswith("SIGKILL with 3 % of its host")
    assert from_death(sig, headroom_free={"a1": 0.5}) is None  # far from its limit: no reason to call it an OOM
    assert from_death(sig, Death("signal", "SIGKILL"), {"a1": 0.02}, {"a1": "gpu"}).kind == "gpu"
    assert from_death(row("a0")) is None  # alive


def test_the_lead_up_comes_from_the_memory_book():
    book = MemoryView(
        by_phase=tuple(pm("a1", s, "update_actor", (1000 + 150 * s) * MIB) for s in (3, 4, 5, 6, 7))
        + tuple(pm("a0", s, "update_actor", 1100 * MIB, rank=0) for s in (6, 7))
        + (pm("a1", 7, "gen", 900 * MIB),),
        growth=(MemoryGrowth("wg", "actor_rollout", 1, "wgWorkerDict_0:1", "a1", "update_actor", "host",
                             150.0 * MIB, 5, 0.0),),
        headroom=(Headroom("wg", "actor_rollout", 1, "x", "a1", "host", 2 * GIB, 4 * GIB, "ray_memory_threshold",
                           13.6),))
    fresh = [FailedCall("t9", "a1", "actor_rollout_update_actor", 114.5, 116.0, TORCH_OOM)]
    rows = [row("a0", rank=0), row("a1", rank=1, task=None)]
    (v,) = verdicts(fresh, rows, STEPS, book, now=120.0)
    assert [p.step for p in v.lead_up] == [3, 4, 5, 6, 7] and v.growth.bytes_per_step == 150 * MIB
    assert v.peers_peak_bytes == ((0, 1100 * MIB),)
    text = lead_up_text(replace(v, kind="host"))
    assert "its peak RSS in update_actor: s3 1.4G, s4 1.6G" in text, text
    assert "it kept +150.0M per step in update_actor over 5 steps (peers +0B per step)" in text, text
    assert "peers' peaks there: rank 0 1.1G" in text, text
    assert verdict_line(v).startswith("OOM: rank 1 of wg (pid 100) ran out of GPU memory in update_actor at step 7 "
                                      "(CUDA out of memory.")
    assert with_lead_up(v, None) is v
    doc = memory_json(replace(book, oom=(v,)))
    o = doc["oom"][0]
    assert (o["rank"], o["phase"], o["step"], o["how"], o["kind"]) == (1, "update_actor", 7, "task_error", "gpu")
    assert [p["step"] for p in o["lead_up"]] == [3, 4, 5, 6, 7] and o["growth"]["bytes_per_step"] == 150 * MIB
    assert doc["headroom"][0]["steps_to_limit"] == 13.6 and doc["growth"][0]["peers_bytes_per_step"] == 0
    # no memory book: the verdict all the same, saying it has no lead-up
    (bare,) = verdicts(fresh, rows, STEPS, None, now=120.0)
    assert bare.step == 7 and lead_up_text(bare) == "lead-up: no memory samples of it in that phase"
    # a failed call and then the death of the same rank are one OOM
    dead = [row("a0", rank=0), replace(row("a1", rank=1, task=None, state="DEAD"), death_text=MONITOR_OLD)]
    assert [x.how for x in verdicts(fresh, dead, STEPS, None, now=120.0)] == ["task_error"]


def test_the_rank_that_ran_out_is_the_suspect_and_its_waiting_peer_is_not():
    ranks = [row("a0", rank=0), replace(row("a1", rank=1, task=None), task_start_s=None)]
    idle = stack(("Worker.main_loop", "/x/ray/_private/worker.py", 1069), active=False)
    samples = {"a0": [in_collective("all_reduce")] * 2, "a1": [idle] * 2}
    failed = [RawTask(task_id="t9", name="WorkerDict.actor_rollout_update_actor", func_name="x", state="FAILED",
                      actor_id="a1", node_id="n1", worker_pid=100, start_time_ms=114_500, end_time_ms=116_000,
                      error=TORCH_OOM)]
    rep = analyse(ranks, samples, 120.0, failed=failed)
    (s,) = rep.suspects
    assert (s.actor_id, s.why[0].kind) == ("a1", "oom")
    assert suspect_reason(s).startswith("ran out of GPU memory in update_actor (CUDA out of memory. Tried to "
                                        "allocate 2.00 GiB"), suspect_reason(s)
    assert suspect_reason(s).endswith("; rank 0 of wg waits for it in all_reduce"), suspect_reason(s)
    # the snapshot's verdict (placed in its step) wins over the one made from the failed call
    (v,) = verdicts(failed_ooms(failed), ranks, STEPS, None, now=120.0)
    rep = analyse(ranks, samples, 120.0, failed=failed, ooms=(v,))
    assert "in update_actor at step 7 (" in suspect_reason(rep.suspects[0])
    # a rank that started another call since its OOM is no longer the one its peers wait for
    moved = [ranks[0], replace(ranks[1], task="actor_rollout_generate_sequences", task_start_s=130.0)]
    rep = analyse(moved, {"a0": [in_collective("all_reduce")] * 2, "a1": [in_collective("all_gather")] * 2},
                  140.0, failed=failed)
    assert all(x.why[0].kind != "oom" for x in rep.suspects)

