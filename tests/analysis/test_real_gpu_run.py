"""The one-GPU runs (tests/fixtures/real-gpu-run/run1, run2: H200, Ray 2.60, torch 2.11, NCCL 2.28.9), replayed
through today's code from what the machine answered: the dashboard's answers over HTTP into the engine's
``Monitor``, py-spy's texts as the dashboard's ``/worker/traceback`` into a ``DumpJob``, py-spy's JSON, the
Flight Recorder files of the debug-info pipe, and NVML's reads.

Rank 0 of worker group ``gpu1`` waits on its busy GPU at ``y.sum().item()`` after NCCL all_reduces (Flight
Recorder on); rank 1 (CPU only) sleeps in ``generate_sequences``; the controller waits in ``ray.get``. What
the verltop of that day printed there is in the folder's README.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from tests.captures import GPU_RUN, Capture, Replay, pyspy_json, taken_at
from verltop.analysis.collectives import blocked_on, collective_pending, task_thread
from verltop.analysis.dump import analyse
from verltop.analysis.flight_recorder import collective_info
from verltop.analysis.snapshot_build import _gpu_map, build_snapshot
from verltop.analysis.stalls import StallSettings
from verltop.model import CollectiveInfo
from verltop.sources import parse
from verltop.sources.flight_recorder import load_dump, rank_state, trigger_and_read
from verltop.sources.local import LocalSampler
from verltop.sources.pyspy import parse_json, parse_text
from verltop.text.contract import snapshot_json
from verltop.text.dump import dump_text
from verltop.text.stalls import stall_reasons, stall_tag
from verltop.text.suspects import suspect_reason
from verltop.ui.screens.stacks import rank_cells
from verltop.ui.widgets.actor_table import Shown, actor_cell

RUNS = ("run1", "run2")
R0, R1 = "gpu1WorkerDict_0:0", "gpu1WorkerDict_0:1"
RANK0_WAIT = "device_gpu_job.py:126 WorkerDict.actor_rollout_update_actor"  # return y.sum().item()
STRAGGLER_AT = "device_gpu_job.py:101 WorkerDict.generate_sequences"
RANK0_MEM = 4536139776  # NVML's usedGpuMemory of rank 0 = the dashboard's 4326 MiB


def capture(run: str) -> Capture:
    """The state API as read 8 s into the hang; the dashboard's py-spy answer for rank 0 (native), then the
    harness's own ``py-spy dump --native`` of it a moment later: two real samples. Rank 1: one."""
    root = GPU_RUN / run
    pid = {r: json.loads((root / f"init_rank{r}.json").read_text())["pid"] for r in (0, 1)}
    return Capture(root, taken_at(root, "api_v0_actors.json"), summary="nodes_view_summary.t08.json",
                   tracebacks={pid[0]: ("worker_traceback_rank0_native1.txt", "pyspy_rank0.native.txt"),
                               pid[1]: ("pyspy_rank1.native.txt",)})


def meta(run: str) -> dict:
    return json.loads((GPU_RUN / run / "capture_meta.json").read_text())


def rank(report, actor_name: str):
    return next(x for x in report.ranks if x.actor.actor_name == actor_name)


# ---------------------------------------------------------------- GPU per actor


@pytest.mark.parametrize("run", RUNS)
async def test_snapshot_puts_rank0_on_gpu0_with_its_process_memory(run):
    """The dashboard's answers through Monitor: rank 0 on GPU 0 (its pid in ``processesPids``), the memory
    NVML gave its pid, the CPU-only peer and the controller without a GPU; CPU % from ``/nodes/{id}``."""
    cap = capture(run)
    nv = meta(run)["nvml_first"][-1]["gpus"][0]
    async with Replay(cap) as r:
        a0, a1, ctl = r.row(R0), r.row(R1), r.row("TaskRunner")
        snap = r.snap
    init0 = cap.json("init_rank0.json")
    assert a0.pid == init0["pid"] and a0.gpu_index == init0["gpu_ids"][0] == 0
    assert nv["compute_procs"] == [{"pid": a0.pid, "usedGpuMemory": RANK0_MEM}]  # NVML: that pid on GPU 0
    assert a0.gpu_mem_bytes == RANK0_MEM and a0.gpu_util_percent == 100.0
    assert (a0.worker_group, a0.rank, a0.world_size, a0.role) == ("gpu1", 0, 2, "actor_rollout")
    assert a0.task == "actor_rollout_update_actor" and a0.task_running_s == pytest.approx(8.0, abs=1.0)
    assert a0.cpu_percent > 90 and a1.cpu_percent < 5  # the GPU waiter spins in the driver, the peer sleeps
    assert (a1.rank, a1.gpu_index, a1.gpu_mem_bytes, a1.gpu_util_percent) == (1, None, None, None)
    assert ctl.role == "controller" and ctl.gpu_index is None and ctl.task == "run"
    (g,) = snap.nodes[0].gpus
    assert (g.index, g.name, g.util_percent) == (0, "NVIDIA H200", 100.0)
    assert g.mem_used_bytes > a0.gpu_mem_bytes  # the device total holds context and NCCL buffers too
    assert snap.phase == "update_actor"
    js = next(a for a in snapshot_json(snap)["actors"] if a["actor_name"] == R0)
    assert (js["gpu_index"], js["gpu_mem_bytes"], js["gpu_util_percent"]) == (0, RANK0_MEM, 100.0)


def _fake_nvml(sample: dict):
    """pynvml as it answered on the machine: one captured NVML read (``capture_meta.json``)."""
    gpus = sample["gpus"]

    def procs(h):
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["usedGpuMemory"]) for p in gpus[h]["compute_procs"]]

    def util(h, ts):
        return [SimpleNamespace(pid=p["pid"], smUtil=p["smUtil"], memUtil=p["memUtil"], timeStamp=p["timeStamp"])
                for p in gpus[h]["proc_util"]]

    return SimpleNamespace(
        nvmlDeviceGetCount=lambda: len(gpus), nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=gpus[h]["mem_used"], total=gpus[h]["mem_total"]),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=gpus[h]["util_gpu"], memory=gpus[h]["util_mem"]),
        nvmlDeviceGetComputeRunningProcesses=procs, nvmlDeviceGetGraphicsRunningProcesses=lambda h: [],
        nvmlDeviceGetProcessUtilization=util, nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
    )


def nvml_gpus(sample: dict, pids: set[int]):
    s = LocalSampler()
    s._nvml, s._nvml_tried = _fake_nvml(sample), True
    gpus, err = s.sample_gpus(pids)
    assert err is None
    return gpus


@pytest.mark.parametrize("run", RUNS)
async def test_local_nvml_reads_map_the_same_gpu(run):
    """On the ranks' own node the NVML reads win over the dashboard's: same GPU and process memory, and the
    device's own memory figure."""
    m = meta(run)
    async with Replay(capture(run)) as r:
        node = r.snap.nodes[0].node_id
        pids = {a.pid for a in r.snap.actors if a.pid}
        for sample in m["nvml_first"]:
            gpus = nvml_gpus(sample, pids)
            (g,) = gpus
            assert g.util_percent == 100.0 and g.processes == ((m["pids"]["rank0"], RANK0_MEM, 100.0),)
            assert _gpu_map(gpus)[m["pids"]["rank0"]] == (g, RANK0_MEM)
            data = replace(r.mon.data(r.now), local_node_ids=frozenset({node}), local_gpus=gpus)
            snap = build_snapshot(data, r.mon.hist, r.now, r.mon.stall)
            a0 = next(a for a in snap.actors if a.actor_name == R0)
            assert (a0.gpu_index, a0.gpu_mem_bytes, a0.gpu_util_percent) == (0, RANK0_MEM, 100.0)
            assert snap.nodes[0].gpus[0].mem_used_bytes == sample["gpus"][0]["mem_used"]  # NVML's, not the agent's


@pytest.mark.parametrize("run", RUNS)
def test_dashboard_gpu_view_parses_with_its_age(run):
    """Every ``/nodes?view=summary`` of the run: the agent's GPU view (process memory in MiB) and how old
    its figures were when asked (``now`` in the payload vs the request)."""
    m = meta(run)
    pid0 = m["pids"]["rank0"]
    views = {v["tag"]: v for v in m["dashboard_gpu_views"]}
    seen = 0
    for tag, v in views.items():
        f = GPU_RUN / run / f"nodes_view_summary.{tag}.json"
        if not f.exists():
            continue
        (node,) = parse.nodes_summary(json.loads(f.read_text()), now=v["asked_at"])
        assert node.stats_age_s == pytest.approx(v["asked_at"] - v["payload_now"], abs=1e-3)
        (g,) = node.gpus
        (p,) = g.processes
        assert g.util_percent == 100.0 and p[:2] == (pid0, RANK0_MEM) and p[2] in (49.0, 50.0, 99.0)
        seen += 1
    assert seen == 3


# ---------------------------------------------------------------- stacks


@pytest.mark.parametrize("run", RUNS)
def test_raw_pyspy_native_of_rank0_is_cuda_sync(run):
    threads, err = parse_text((GPU_RUN / run / "pyspy_rank0.native.txt").read_text())
    assert err is None
    t = task_thread(threads)
    assert t.name == "MainThread" and t.active
    b = blocked_on(t, None)
    assert b.op == "cuda_sync" and b.gpu_wait and "cuLaunchKernel" in b.evidence and b.frame == RANK0_WAIT


@pytest.mark.parametrize("run", RUNS)
async def test_python_only_stack_needs_the_gpu_number(run):
    """py-spy without --native shows only ``.item()``'s line: the GPU at 100 % (from the replayed snapshot)
    is what says it waits on the GPU; the sleeping peer's thread is idle."""
    async with Replay(capture(run)) as r:
        util = r.row(R0).gpu_util_percent
    threads, _ = parse_json((GPU_RUN / run / "pyspy_rank0.json").read_text())
    t0 = task_thread(threads)
    assert util == 100.0 and blocked_on(t0, util).op == "cuda_sync" and blocked_on(t0, None) is None
    t1 = task_thread(parse_json((GPU_RUN / run / "pyspy_rank1.json").read_text())[0])
    assert not t1.active and blocked_on(t1, None) is None


@pytest.mark.parametrize("run", RUNS)
async def test_native_dump_through_the_dashboard_names_the_cpu_straggler(run):
    """``D`` with --native, through ``/worker/traceback``: rank 0 in cuda_sync, its native stack the launch
    of the ``sum`` kernel; rank 1 the only suspect, named at its Python frame (not libc's), stuck."""
    async with Replay(capture(run)) as r:
        report = await r.dump()
    r0, r1 = rank(report, R0), rank(report, R1)
    assert r0.blocked_on.op == "cuda_sync" and r0.blocked_on.frame == RANK0_WAIT and r0.blocked_on.gpu_wait
    assert {"cuLaunchKernel", "cudaLaunchKernel"} <= set(r0.blocked_on.evidence)
    assert {"cuLaunchKernel", "cudaLaunchKernel", "torch::autograd::THPVariable_sum"} <= {f.func for f in r0.stack}
    assert r0.stuck is True and r0.error is None and r0.collective is None  # two samples, same Python frames
    assert r1.blocked_on is None and r1.stuck is True and r1.error is None
    assert rank(report, "TaskRunner").error is not None  # no py-spy of the controller was captured
    assert [(s.worker_group, s.rank) for s in report.suspects] == [("gpu1", 1)]
    reason = suspect_reason(report.suspects[0])
    assert reason == (f"not in cuda_sync with rank 0 of gpu1: it is in actor_rollout_update_actor at {STRAGGLER_AT}; "
                      "its stack did not move")
    assert report.native and report.samples == 2
    text = dump_text(report)
    assert text.startswith("verltop dump: 2/2 ranks dumped, 0/1 other process, 2 sample(s), native")
    # where rank 1 is: its Python frame, in the text dump and on the stack screen (not libc's clock_nanosleep)
    line = next(ln for ln in text.splitlines() if f"  {r1.actor.pid}  " in ln)
    assert STRAGGLER_AT in line and "libc" not in line
    assert rank_cells(r1, True)[5] == STRAGGLER_AT and rank_cells(r0, False)[5] == RANK0_WAIT


# ---------------------------------------------------------------- Flight Recorder


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("tag", ["after_trigger", "after_tui_f"])
def test_flight_recorder_dump_from_the_pipe(run, tag):
    doc, err = load_dump((GPU_RUN / run / "fr" / f"fr_rank_0.{tag}").read_bytes())
    assert err is None
    assert doc["comm_lib_version"] == "2.28.9"
    st = rank_state(doc, 0)
    assert (st.last_enqueued, st.last_completed) == (5, 5)
    assert [e.seq for e in st.entries] == [1, 2, 3, 4, 5]
    assert {e.profiling_name for e in st.entries} == {"nccl:all_reduce"} and {e.state for e in st.entries} == {"completed"}
    c = collective_info(st)
    assert (c.op, c.seq, c.last_enqueued, c.last_completed, c.numel) == ("all_reduce", 5, 5, 5, 16777216)
    assert not collective_pending(c)  # the rank's last collective finished: it is not what it waits in


def test_in_process_dump_before_the_hang_has_the_four_warmup_collectives():
    doc, err = load_dump((GPU_RUN / "run1" / "fr" / "fr_inproc_rank_0.after_trigger").read_bytes())
    assert err is None
    st = rank_state(doc, 0)
    assert [e.seq for e in st.entries] == [1, 2, 3, 4] and st.last_completed == 4


@pytest.mark.parametrize("run", RUNS)
async def test_completed_collective_does_not_rename_the_gpu_wait(run, tmp_path):
    """py-spy's JSON stacks plus the pipe's Flight Recorder file, found where the ranks' runtime env says:
    all_reduce #5 completed, so rank 0 still waits on its own GPU work (run 1's verltop said "not in
    all_reduce"); shown as history. Had #5 been pending, it would name the wait."""
    cap = capture(run)
    async with Replay(cap) as r:
        a0, a1 = r.row(R0), r.row(R1)
        # the job-level runtime env reaches every rank, rank 1 too
        assert (a0.fr_dump_prefix, a1.fr_dump_prefix, a1.fr_pipe_prefix) == ("/tmp/fr_rank_",) * 2 + ("/tmp/fr_pipe_",)
        samples = {a0.actor_id: pyspy_json(cap, "pyspy_rank0.json"), a1.actor_id: pyspy_json(cap, "pyspy_rank1.json")}
        report = await r.analyse_samples(samples, fr={0: cap.path("fr/fr_rank_0.after_trigger")}, tmp=tmp_path)
    r0 = rank(report, R0)
    assert r0.collective == CollectiveInfo("flight_recorder", "all_reduce", 5, 5, 5, 16777216)
    assert r0.blocked_on.op == "cuda_sync" and r0.blocked_on.frame == RANK0_WAIT
    assert rank(report, R1).collective is None and report.notes == ()  # no pipe, no file: no NCCL group
    assert [(s.worker_group, s.rank) for s in report.suspects] == [("gpu1", 1)]
    assert suspect_reason(report.suspects[0]).startswith(f"not in cuda_sync with rank 0 of gpu1: it is in "
                                                f"actor_rollout_update_actor at {STRAGGLER_AT}")
    assert "cuda_sync [all_reduce seq 5, completed]" in dump_text(report)
    assert rank_cells(r0, False)[4].plain == "cuda_sync (GPU) all_reduce#5 done"

    pending = {r0.actor.actor_id: replace(r0.collective, last_completed=4)}
    again = analyse([x.actor for x in report.ranks], {x.actor.actor_id: list(x.samples) for x in report.ranks},
                    report.taken_at, pending)
    assert suspect_reason(again.suspects[0]).startswith("not in all_reduce with rank 0 of gpu1")
    assert "cuda_sync [all_reduce seq 5]" in dump_text(again)
    assert rank_cells(rank(again, R0), False)[4].plain == "cuda_sync (GPU) all_reduce#5"


@pytest.mark.parametrize("run", RUNS)
async def test_trigger_and_read_gets_the_fresh_dump(run, tmp_path):
    """``f`` on the replayed ranks: rank 0's debug-info pipe is read (here by a thread standing in for the
    rank's NCCL monitor, which writes the dump captured on the machine); rank 1 has no NCCL group, no pipe."""
    cap = capture(run)
    async with Replay(cap) as r:
        rows = [replace(r.row(n), fr_dump_prefix=str(tmp_path / "fr_rank_"), fr_pipe_prefix=str(tmp_path / "fr_pipe_"))
                for n in (R0, R1)]
    os.mkfifo(tmp_path / "fr_pipe_0.pipe")
    fd = os.open(tmp_path / "fr_pipe_0.pipe", os.O_RDONLY | os.O_NONBLOCK)

    def rank0_monitor() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if os.read(fd, 1):
                    shutil.copy(cap.path("fr/fr_rank_0.after_trigger"), tmp_path / "fr_rank_0")
                    return
            except BlockingIOError:
                pass
            time.sleep(0.05)

    t = threading.Thread(target=rank0_monitor)
    t.start()
    try:
        states, notes = await trigger_and_read(rows, wait_s=5.0)
    finally:
        t.join()
        os.close(fd)
    assert set(states) == {rows[0].actor_id}
    c = collective_info(states[rows[0].actor_id])
    assert (c.op, c.seq, c.last_completed) == ("all_reduce", 5, 5)
    assert len(notes) == 1 and notes[0].startswith(f"{tmp_path}/fr_pipe_1.pipe: no such pipe")


# ---------------------------------------------------------------- stalls and the table


async def test_stall_rules_name_the_pegged_gpu():
    """run 2 with ``--stall-after 20``, 40 s into update_actor: rank 0 is over the limit on a pegged GPU (the
    likely NCCL wait), rank 1 over the limit without a GPU, the controller never stalls; at the default 300 s
    nobody is."""
    cap = capture("run2")
    start = next(t["start_time_ms"] for t in cap.json("api_v0_tasks.json")["data"]["result"]["result"]
                 if t["name"] == "WorkerDict.actor_rollout_update_actor") / 1000
    async with Replay(cap, stall=StallSettings(stall_after_s=20), now=start + 40) as r:
        a0, a1, ctl = r.row(R0), r.row(R1), r.row("TaskRunner")
        r.mon.stall = StallSettings()
        default = r.mon.snapshot()
    assert not any(a.stalled for a in default.actors)
    assert [s.rule for s in a0.stalls] == ["age", "gpu_spin"]
    assert stall_reasons(a0) == "running 40s (> 20s); GPU 100 % without progress: likely waiting in an NCCL collective"
    assert [stall_tag(s) for s in a0.stalls] == ["> 20s", "GPU 100% no progress"]
    assert stall_reasons(a1) == "running 40s (> 20s)" and not ctl.stalled


@pytest.mark.parametrize("run", RUNS)
async def test_table_cells_show_the_gpu_rank(run):
    async with Replay(capture(run)) as r:
        a0, a1 = r.row(R0), r.row(R1)

    def cell(a, key, compact=False):
        c = actor_cell(a, Shown(key, key, 12, compact), r.now)
        return c if isinstance(c, str) else c.plain

    assert (cell(a0, "gpu"), cell(a0, "gpu_util", True), cell(a0, "gpu_mem", True)) == ("0", "MAX", "4.2G")
    assert (cell(a1, "gpu"), cell(a1, "gpu_util", True), cell(a1, "gpu_mem", True)) == ("-", "N/A", "-")
