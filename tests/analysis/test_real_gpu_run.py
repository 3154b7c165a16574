"""Replays of the one-GPU device runs (tests/fixtures/real-gpu-run/, H200, Ray 2.60, torch 2.11, NCCL 2.28.9).

Rank 0 of worker group ``gpu1`` waits on its busy GPU at ``y.sum().item()`` after NCCL all_reduces (Flight
Recorder on); rank 1 (CPU only) sleeps in ``generate_sequences``; the controller waits in ``ray.get``.
``run1`` ran the code before the fixes below, ``run2`` after them.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.analysis.helpers import row
from verltop.analysis.collectives import blocked_on, collective_pending, task_thread
from verltop.analysis.dump import analyse
from verltop.analysis.flight_recorder import collective_info
from verltop.analysis.view import _gpu_map
from verltop.engine.dumps import fr_findings, fr_infos
from verltop.model import Frame, ProcessDump, ThreadStack
from verltop.sources.flight_recorder import load_dump, rank_state, read_local
from verltop.sources.local import LocalSampler
from verltop.sources.pyspy import parse_json, parse_text
from verltop.text import dump_text

RUN = Path(__file__).parents[1] / "fixtures" / "real-gpu-run"
RUNS = ("run1", "run2")


def text(run: str, rel: str) -> str:
    return (RUN / run / rel).read_text()


def js(run: str, rel: str):
    return json.loads(text(run, rel))


def by_name(doc: dict, key: str = "ranks") -> dict:
    return {r["actor_name"]: r for r in doc[key]}


R0, R1 = "gpu1WorkerDict_0:0", "gpu1WorkerDict_0:1"


# ---------------------------------------------------------------- what verltop said on the GPU


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("dump", ["verltop_dump.json", "verltop_dump_native.json"])
def test_dump_names_gpu_wait_and_the_cpu_straggler(run, dump):
    d = js(run, dump)
    ranks = by_name(d)
    r0, r1 = ranks[R0], ranks[R1]
    assert r0["blocked_on"]["op"] == "cuda_sync"
    assert r0["blocked_on"]["frame"] == "device_gpu_job.py:126 WorkerDict.actor_rollout_update_actor"
    assert r0["stuck"] is True and r0["collective"] is None and r0["error"] is None
    assert r1["blocked_on"] is None and r1["stuck"] is True
    assert ranks["TaskRunner"]["blocked_on"]["op"] == "ray.get"
    assert [(s["worker_group"], s["rank"]) for s in d["suspects"]] == [("gpu1", 1)]
    reason = d["suspects"][0]["reason"]
    assert reason.startswith("not in cuda_sync with rank 0 of gpu1")
    assert "did not move" in reason and "ray.get at device_gpu_job.py:153 TaskRunner.run" in reason
    if (run, dump) != ("run1", "verltop_dump_native.json"):  # that one named libc (fixed, see below)
        assert "at device_gpu_job.py:101 WorkerDict.generate_sequences" in reason


def test_native_dump_stack_has_the_launch_that_blocks():
    r0 = by_name(js("run1", "verltop_dump_native.json"))[R0]
    funcs = [f["func"] for f in r0["stack"]]
    assert "cuLaunchKernel" in funcs and "cudaLaunchKernel" in funcs and "torch::autograd::THPVariable_sum" in funcs
    frames = tuple(Frame(f["func"], f["file"], f["line"]) for f in r0["stack"])
    b = blocked_on(ThreadStack(1, "MainThread", True, False, frames), None)
    assert b.op == "cuda_sync" and b.gpu_wait
    assert {"cuLaunchKernel", "cudaLaunchKernel"} <= set(b.evidence)


@pytest.mark.parametrize("run", RUNS)
def test_raw_pyspy_native_of_rank0_is_cuda_sync_without_gpu_numbers(run):
    threads, err = parse_text(text(run, "pyspy_rank0.native.txt"))
    assert err is None
    t = task_thread(threads)
    assert t.name == "MainThread" and t.active
    b = blocked_on(t, None)
    assert b.op == "cuda_sync" and "cuLaunchKernel" in b.evidence
    assert b.frame == "device_gpu_job.py:126 WorkerDict.actor_rollout_update_actor"


@pytest.mark.parametrize("run", RUNS)
def test_python_only_stack_needs_the_gpu_number(run):
    threads, _ = parse_json(text(run, "pyspy_rank0.json"))
    util = by_name(js(run, "verltop_snapshot.json"), "actors")[R0]["gpu_util_percent"]
    assert util == 100.0
    assert blocked_on(task_thread(threads), util).op == "cuda_sync"
    assert blocked_on(task_thread(threads), None) is None
    threads1, _ = parse_json(text(run, "pyspy_rank1.json"))
    t1 = task_thread(threads1)
    assert not t1.active and blocked_on(t1, None) is None


# ---------------------------------------------------------------- GPU per actor: NVML vs verltop vs dashboard


@pytest.mark.parametrize("run", RUNS)
def test_snapshot_maps_the_gpu_actor_to_gpu0_with_nvml_process_memory(run):
    snap = js(run, "verltop_snapshot.json")
    meta = js(run, "capture_meta.json")
    pid0 = meta["pids"]["rank0"]
    nv = meta["nvml_first"][-1]["gpus"][0]
    assert nv["compute_procs"] == [{"pid": pid0, "usedGpuMemory": nv["compute_procs"][0]["usedGpuMemory"]}]
    actors = by_name(snap, "actors")
    a0, a1 = actors[R0], actors[R1]
    assert a0["pid"] == pid0 and a0["gpu_index"] == 0 and a0["gpu_util_percent"] == 100.0
    assert a0["gpu_mem_bytes"] == nv["compute_procs"][0]["usedGpuMemory"] == 4536139776  # 4326 MiB
    assert (a0["rank"], a0["world_size"], a0["role"]) == (0, 2, "actor_rollout")
    assert a1["gpu_index"] is None and a1["gpu_mem_bytes"] is None  # the CPU-only peer
    assert actors["TaskRunner"]["role"] == "controller" and actors["TaskRunner"]["gpu_index"] is None
    g = snap["nodes"][0]["gpus"][0]
    assert g["index"] == 0 and g["name"] == "NVIDIA H200" and g["util_percent"] == 100.0
    # the device total (NVML memory info) is more than the process's own: context and NCCL buffers
    assert g["mem_used_bytes"] == nv["mem_used"] > a0["gpu_mem_bytes"]


def _fake_nvml(nv: dict):
    """pynvml as it answered on the H200, from the captured NVML sample."""
    mem = SimpleNamespace(used=nv["mem_used"], total=nv["mem_total"])
    procs = [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["usedGpuMemory"]) for p in nv["compute_procs"]]
    util = [SimpleNamespace(pid=p["pid"], smUtil=p["smUtil"], memUtil=p["memUtil"], timeStamp=p["timeStamp"])
            for p in nv["proc_util"]]
    return SimpleNamespace(
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: "NVIDIA H200", nvmlDeviceGetMemoryInfo=lambda h: mem,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=nv["util_gpu"], memory=nv["util_mem"]),
        nvmlDeviceGetComputeRunningProcesses=lambda h: procs, nvmlDeviceGetGraphicsRunningProcesses=lambda h: [],
        nvmlDeviceGetProcessUtilization=lambda h, ts: util, nvmlDeviceGetUUID=lambda h: "GPU-x",
    )


def test_local_sampler_replays_the_captured_nvml_answers():
    meta = js("run1", "capture_meta.json")
    pid0 = meta["pids"]["rank0"]
    s = LocalSampler()
    s._nvml, s._nvml_tried = _fake_nvml(meta["nvml_first"][0]["gpus"][0]), True
    gpus, err = s.sample_gpus({pid0, meta["pids"]["rank1"]})
    assert err is None and len(gpus) == 1
    g = gpus[0]
    assert g.util_percent == 100.0 and g.processes == ((pid0, 4536139776, 100.0),)
    gpu, mem = _gpu_map(gpus)[pid0]
    assert gpu.index == 0 and mem == 4536139776


@pytest.mark.parametrize("run", RUNS)
def test_dashboard_gpu_view_agrees_with_nvml_and_was_seconds_old(run):
    meta = js(run, "capture_meta.json")
    pid0 = meta["pids"]["rank0"]
    views = meta["dashboard_gpu_views"] + meta.get("dashboard_gpu_series", [])
    assert len(views) >= 3
    for v in views:
        g = v["gpus"][0]
        assert g["utilizationGpu"] == 100
        (p,) = g["processesPids"]
        assert p["pid"] == pid0 and p["gpuMemoryUsage"] == 4536139776 >> 20  # MiB
        assert 0 <= v["age_s"] < 10  # the agent's `now` lagged 1.4-8 s (not the 55 s seen in a 2-GPU hang)
    # its per-process util lags: 49-50 % on the first sample of each run while NVML said 100
    utils = [v["gpus"][0]["processesPids"][0]["gpuUtilization"] for v in views]
    assert utils[0] in (49, 50) and set(utils[1:]) == {99}


def test_stall_rules_name_the_pegged_gpu():
    actors = by_name(js("run2", "verltop_snapshot_stall20.json"), "actors")
    assert actors[R0]["stalled"] and "GPU 100 % without progress" in actors[R0]["stall_reason"]
    assert actors[R1]["stalled"] and "GPU" not in actors[R1]["stall_reason"]
    assert not actors["TaskRunner"]["stalled"]
    assert not by_name(js("run2", "verltop_snapshot.json"), "actors")[R0]["stalled"]  # default 300 s


# ---------------------------------------------------------------- Flight Recorder


@pytest.mark.parametrize("run", RUNS)
def test_pipe_trigger_wrote_a_fresh_dump_that_parses(run):
    meta = js(run, "capture_meta.json")
    fr = meta["fr_trigger"]
    assert fr["before"][R0] is None  # no dump before the trigger
    after = fr["after"][R0]
    assert after["path"] == "/tmp/fr_rank_0" and after["mtime"] >= fr["started"]
    assert after["mtime"] - fr["started"] < 0.5 and fr["seconds"] < 2.0
    assert list(fr["fresh"].values()) == [True]
    (info,) = fr["infos"].values()
    assert info == {"source": "flight_recorder", "op": "all_reduce", "seq": 5, "last_enqueued": 5,
                    "last_completed": 5, "numel": 16777216}
    # rank 1 has the variable (from the job's runtime env) but no NCCL group, so no pipe
    assert fr["ranks"][1]["fr_pipe_prefix"] == "/tmp/fr_pipe_" and any("fr_pipe_1.pipe" in n for n in fr["notes"])
    assert "fr_rank_0" not in text(run, "fr/ls.before_trigger.txt")
    assert "fr_pipe_0.pipe" in text(run, "fr/ls.before_trigger.txt")


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("tag", ["after_trigger", "after_tui_f"])
def test_flight_recorder_dump_from_the_pipe(run, tag):
    doc, err = load_dump((RUN / run / "fr" / f"fr_rank_0.{tag}").read_bytes())
    assert err is None
    assert doc["pg_status"]["0"]["last_enqueued_collective"] == 5
    assert doc["pg_status"]["0"]["last_completed_collective"] == 5
    assert doc["comm_lib_version"] == "2.28.9"
    st = rank_state(doc, 0)
    assert [e.seq for e in st.entries] == [1, 2, 3, 4, 5]
    assert {e.profiling_name for e in st.entries} == {"nccl:all_reduce"} and {e.state for e in st.entries} == {"completed"}
    c = collective_info(st)
    assert (c.op, c.seq, c.last_enqueued, c.last_completed, c.numel) == ("all_reduce", 5, 5, 5, 16777216)
    assert not collective_pending(c)  # the rank's last collective finished: it is not what it waits in


def test_in_process_dump_before_the_hang_has_the_four_warmup_collectives():
    doc, err = load_dump((RUN / "run1" / "fr" / "fr_inproc_rank_0.after_trigger").read_bytes())
    assert err is None
    st = rank_state(doc, 0)
    assert [e.seq for e in st.entries] == [1, 2, 3, 4] and st.last_completed == 4


def test_read_local_finds_the_dump_by_the_runtime_env_prefix(tmp_path):
    shutil.copy(RUN / "run1" / "fr" / "fr_rank_0.after_trigger", tmp_path / "fr_rank_0")
    a0 = replace(row("a0", group="gpu1", rank=0), fr_dump_prefix=str(tmp_path / "fr_rank_"))
    a1 = replace(row("a1", group="gpu1", rank=1), fr_dump_prefix=str(tmp_path / "fr_rank_"))
    states, notes, mtimes = read_local([a0, a1])
    infos, findings = fr_infos(states), fr_findings([a0, a1], states)
    assert set(infos) == {"a0"} and findings == [] and notes == [] and set(mtimes) == {"a0"}
    assert infos["a0"].op == "all_reduce" and not collective_pending(infos["a0"])


# ---------------------------------------------------------------- the fixes this run led to


def _replayed_report(native: bool = False):
    """analyse() over the run's own py-spy captures, with the Flight Recorder facts of the pipe dump."""
    rank0 = replace(row("a0", group="gpu1", rank=0, gpu=100.0), world_size=2)
    rank1 = replace(row("a1", group="gpu1", rank=1), world_size=2)
    ctl = row("ctl", None, None, "controller", task="run")
    if native:
        p0 = ProcessDump(1, threads=parse_text(text("run1", "pyspy_rank0.native.txt"))[0], native=True)
        p1 = ProcessDump(2, threads=parse_text(text("run1", "pyspy_rank1.native.txt"))[0], native=True)
    else:
        p0 = ProcessDump(1, threads=parse_json(text("run1", "pyspy_rank0.json"))[0])
        p1 = ProcessDump(2, threads=parse_json(text("run1", "pyspy_rank1.json"))[0])
    doc, _ = load_dump((RUN / "run1" / "fr" / "fr_rank_0.after_trigger").read_bytes())
    fr = collective_info(rank_state(doc, 0))
    return analyse([ctl, rank0, rank1], {"a0": [p0, p0], "a1": [p1, p1], "ctl": []}, 0.0, {"a0": fr},
                   native=native)


def test_completed_fr_collective_does_not_rename_the_gpu_wait():
    # run 1 (before the fix) said "not in all_reduce" once the pipe dump was read, though Flight Recorder
    # said all_reduce #5 had completed: the rank waited on its own GPU work, not in a collective.
    old = js("run1", "verltop_dump_after_fr.json")
    assert old["suspects"][0]["reason"].startswith("not in all_reduce")
    new = js("run2", "verltop_dump_after_fr.json")
    assert new["suspects"][0]["reason"].startswith("not in cuda_sync")
    assert by_name(new)[R0]["collective"]["last_completed"] == 5
    r = _replayed_report()
    assert [s.actor_id for s in r.suspects] == ["a1"]
    assert r.suspects[0].reason.startswith("not in cuda_sync with rank 0 of gpu1")
    assert "[all_reduce seq 5, completed]" in dump_text(r)


def test_pending_collective_still_names_the_wait():
    r = _replayed_report()
    a0 = next(x for x in r.ranks if x.actor.actor_id == "a0")
    pending = replace(a0.collective, last_completed=4)
    r2 = analyse([x.actor for x in r.ranks], {x.actor.actor_id: list(x.samples) for x in r.ranks}, 0.0,
                 {"a0": pending})
    assert r2.suspects[0].reason.startswith("not in all_reduce with rank 0 of gpu1")
    assert "[all_reduce seq 5]" in dump_text(r2)


def test_native_straggler_reason_names_its_python_frame():
    # run 1's --native dump said "at libc.so.6 clock_nanosleep": versioned .so files are native frames too
    old = js("run1", "verltop_dump_native.json")["suspects"][0]["reason"]
    assert "libc.so.6 clock_nanosleep" in old
    assert "libc" not in js("run2", "verltop_dump_native.json")["suspects"][0]["reason"]
    reason = _replayed_report(native=True).suspects[0].reason
    assert "at device_gpu_job.py:101 WorkerDict.generate_sequences" in reason and "libc" not in reason


# ---------------------------------------------------------------- the screens


@pytest.mark.parametrize("run", RUNS)
def test_screens_captured_on_the_gpu(run):
    for name in ("tui_main.txt", "tmux_main.txt"):
        line = next(ln for ln in text(run, name).splitlines() if ln.strip().startswith("actor_rollout      0"))
        cells = line.split()
        assert cells[4] == "0" and "MAX" in line and "4.2G" in line  # GPU index, util bar, NVML process memory
    for name in ("tui_stacks.txt", "tmux_stacks.txt", "tui_stacks_fr.txt", "tmux_stacks_fr.txt"):
        t = text(run, name)
        assert "▶ gpu1:1" in t and "cuda_sync (GPU)" in t and "3/3 ranks dumped" in t
    meta = js(run, "tui_meta.json")
    assert meta["ops"] == {"TaskRunner": "ray.get", R0: "cuda_sync", R1: None}
    assert meta["fr_collectives"][R0]["seq"] == 5 and meta["fr_s"] < 5
    assert "GPU 100% no progress" in text("run2", "tui_main.txt")  # run 2 ran the TUI with a 20 s stall limit


def test_stack_screen_marks_a_completed_collective_done():
    from verltop.ui.screens.stacks import rank_cells

    r = _replayed_report()
    a0 = next(x for x in r.ranks if x.actor.actor_id == "a0")
    op = rank_cells(a0, False)[4].plain
    assert op == "cuda_sync (GPU) all_reduce#5 done"
    pending = replace(a0, collective=replace(a0.collective, last_completed=4))
    assert rank_cells(pending, False)[4].plain == "cuda_sync (GPU) all_reduce#5"
