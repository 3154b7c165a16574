"""The two-GPU run (tests/fixtures/real-gpu-run/x2-*: 2x H200, Ray 2.60, torch 2.11, NCCL 2.28.9), replayed
through today's code from what the machine answered.

One verl-shaped Ray job per shape: ``TaskRunner`` and two ``WorkerDict`` actors (``num_gpus=1`` each) in an
NCCL group of world size 2 with a 45 s timeout, Flight Recorder on, collective #5 hung:

- ``x2-straggler``: rank 1 sleeps in ``generate_sequences``; rank 0 entered ``all_reduce`` and blocks at the
  ``.item()`` after it;
- ``x2-mismatch``: rank 0 ``all_reduce`` (16777216 floats), rank 1 ``all_gather`` (1024 floats each).

Before the NCCL timeout only the stacks (and the debug-info pipe's Flight Recorder dumps) say anything; after
it, the watchdog's lines in the workers' stderr (read through the dashboard's log API) and the dump-on-timeout
files name the collective. The capture's py-spy stacks were taken before the timeout; the README records that
nothing moved after it (the dump-on-timeout files are byte-identical to the pipe's), so they stand for both.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from dataclasses import replace

import pytest

from tests.analysis.helpers import row
from tests.analysis.test_real_gpu_run import nvml_gpus
from tests.captures import GPU_RUN, Capture, Replay, pyspy_json, taken_at
from verltop.analysis.collectives import blocked_on, collective_pending, task_thread
from verltop.analysis.dump import analyse
from verltop.analysis.flight_recorder import collective_info, match
from verltop.analysis.snapshot_build import build_snapshot
from verltop.analysis.stalls import StallSettings
from verltop.engine.dumps import DumpJob, fr_findings, fr_infos
from verltop.sources.flight_recorder import load_dump, rank_state, read_local, trigger_and_read
from verltop.sources.local import LocalSample
from verltop.sources.pyspy import DumpOptions, parse_json
from verltop.sources.watchdog import parse_watchdog
from verltop.text.contract import collective_json, dump_json
from verltop.text.dump import dump_text
from verltop.text.stalls import stall_tag
from verltop.text.suspects import suspect_reason
from verltop.ui.screens.rank_stack import rank_stack_text
from verltop.ui.screens.stacks import rank_cells
from verltop.ui.widgets.actor_table import Shown, actor_cell

S, M = "x2-straggler", "x2-mismatch"
SHAPES = (S, M)
PREFIX = {S: "x2s", M: "x2m"}
JOB = "device_gpu_job.py"
RANK0_WAIT = f"{JOB}:172 WorkerDict._update_x2"  # return float(y.sum().item()) after all_reduce #5
STRAGGLER_AT = f"{JOB}:153 WorkerDict.generate_sequences"
MISMATCH1_WAIT = f"{JOB}:169 <genexpr>"  # sum(o.sum() for o in out).item() after all_gather #5
NOTE = {S: "x2s: collective #5 (nccl:all_reduce): ranks [1] never joined (ranks [0] wait)",
        M: "x2m: collective #5 mismatch: rank 0 nccl:all_reduce [[16777216]], rank 1 nccl:all_gather [[1024]]"}


def inits(shape: str) -> list[dict]:
    return [json.loads((GPU_RUN / shape / f"init_rank{r}.json").read_text()) for r in (0, 1)]


def capture(shape: str, when: str = "before") -> Capture:
    """``before``: hang + 3 s (state API, GPU view); ``after``: hang + 47 s, past the 45 s NCCL timeout. Log
    tails as the dashboard's log API gave them at each moment; py-spy ``--native`` texts as tracebacks."""
    root = GPU_RUN / shape
    ii = inits(shape)
    kw: dict = dict(summary="nodes_view_summary.t03.json", node_detail=None,
                    logs={i["actor_id"]: f"log_tail_rank{i['rank']}.{when}.err.txt" for i in ii},
                    tracebacks={i["pid"]: (f"pyspy_rank{i['rank']}.native.txt",) for i in ii})
    if when == "after":
        kw.update(actors="api_v0_actors.after_timeout.json", tasks="api_v0_tasks.after_timeout.json",
                  summary="nodes_view_summary.end.json")
    return Capture(root, taken_at(root, kw.get("actors", "api_v0_actors.json")), **kw)


def names(shape: str) -> tuple[str, str]:
    return f"{PREFIX[shape]}WorkerDict_0:0", f"{PREFIX[shape]}WorkerDict_0:1"


def meta(shape: str) -> dict:
    return json.loads((GPU_RUN / shape / "capture_meta.json").read_text())


def fr_files(shape: str, tag: str) -> dict[int, object]:
    return {r: GPU_RUN / shape / "fr" / f"fr_rank_{r}.{tag}" for r in (0, 1)}


def rank(report, name: str):
    return next(x for x in report.ranks if x.actor.actor_name == name)


def _log(shape: str, r: int, when: str) -> str:
    return (GPU_RUN / shape / f"log_tail_rank{r}.{when}.err.txt").read_text()


# ---------------------------------------------------------------- GPUs: the right GPU per actor


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("when", ["before", "after"])
async def test_each_rank_on_its_own_gpu(shape, when):
    """Ray gave rank r GPU r; the dashboard's GPU view, through Monitor, puts each rank's row on it with the
    memory NVML gave its pid. Ray still says ALIVE and RUNNING after the NCCL timeout."""
    nv = meta(shape)["nvml_first" if when == "before" else "nvml_after"][-1]
    async with Replay(capture(shape, when)) as r:
        rows = [r.row(n) for n in names(shape)]
        ctl, snap = r.row("TaskRunner"), r.snap
    for i, a in zip(inits(shape), rows, strict=True):
        rk = i["rank"]
        assert i["gpu_ids"] == [rk] and i["CUDA_VISIBLE_DEVICES"] == str(rk)
        (proc,) = nv["gpus"][rk]["compute_procs"]  # NVML lists the rank's pid on its GPU, and nothing else there
        assert a.pid == i["pid"] == proc["pid"] and a.gpu_index == rk and a.gpu_mem_bytes == proc["usedGpuMemory"]
        assert (a.rank, a.world_size, a.worker_group, a.state, a.task) == (
            rk, 2, PREFIX[shape], "ALIVE", "actor_rollout_update_actor")
    a0, a1 = rows
    # (2 + rank) GiB of ballast, plus context and NCCL buffers: 3584 MiB on GPU 0, ~4606 MiB on GPU 1
    assert a0.gpu_mem_bytes == 3758096384 and a1.gpu_mem_bytes in (4829741056, 4831838208)
    assert a0.gpu_util_percent == 100.0 and a1.gpu_util_percent == (0.0 if shape == S else 100.0)
    assert ctl.role == "controller" and ctl.gpu_index is None
    gpus = {g.index: g for g in snap.nodes[0].gpus}
    assert set(gpus) == {0, 1} and {g.name for g in gpus.values()} == {"NVIDIA H200"}
    assert gpus[1].util_percent == (0.0 if shape == S else 100.0)
    for i, a in enumerate(rows):  # the device total holds more than the process: context and NCCL buffers
        assert gpus[i].mem_used_bytes > a.gpu_mem_bytes
    if when == "after":
        assert a0.task_running_s == pytest.approx(53.5, abs=0.5)  # the state API read at hang + 53.5 s


@pytest.mark.parametrize("shape", SHAPES)
async def test_nvml_reads_name_the_idle_gpu_of_the_straggler(shape):
    """The five NVML reads (hang + 4-6 s, + 54-56 s) through the local sampler and the engine's GPU history:
    each pid on its own GPU; over 50 s the straggler's GPU never worked ("GPU idle") while rank 0's was
    pegged ("GPU 100% no progress"). In the mismatch both GPUs are pegged."""
    m = meta(shape)
    samples = m["nvml_first"] + m["nvml_after"]
    stall = StallSettings(stall_after_s=30, gpu_idle_after_s=50)
    async with Replay(capture(shape, "after"), stall=stall, now=samples[-1]["t"]) as r:
        pids = {a.pid for a in r.snap.actors if a.pid}
        node = r.snap.nodes[0].node_id
        for s in samples:
            gpus = nvml_gpus(s, pids)
            assert [(g.index, [p[0] for p in g.processes]) for g in gpus] == [(0, [m["pids"]["rank0"]]),
                                                                            (1, [m["pids"]["rank1"]])]
            assert [g.util_percent for g in gpus] == [100.0, 0.0 if shape == S else 100.0]
            r.mon._note_gpu_use(LocalSample(s["t"], {}, gpus, None))
        data = replace(r.mon.data(r.now), local_node_ids=frozenset({node}), local_gpus=gpus)
        snap = build_snapshot(data, r.mon.hist, r.now, stall)
    a0, a1 = (next(a for a in snap.actors if a.actor_name == n) for n in names(shape))
    assert [stall_tag(s) for s in a0.stalls] == ["> 30s", "GPU 100% no progress"]
    assert [stall_tag(s) for s in a1.stalls] == (["> 30s", "GPU idle"] if shape == S else ["> 30s", "GPU 100% no progress"])

    def cell(a, key):
        c = actor_cell(a, Shown(key, key, 12, True), r.now)
        return c if isinstance(c, str) else c.plain

    assert [cell(a0, k) for k in ("gpu", "gpu_util", "gpu_mem")] == ["0", "MAX", "3.5G"]
    assert [cell(a1, k) for k in ("gpu", "gpu_util", "gpu_mem")] == ["1", "0%" if shape == S else "MAX", "4.5G"]


# ---------------------------------------------------------------- before the NCCL timeout: stacks only


@pytest.mark.parametrize("route", ["dashboard --native", "local --json"])
async def test_straggler_stacks_name_rank1_and_rank0_waits_on_its_gpu(route):
    cap = capture(S)
    n0, n1 = names(S)
    async with Replay(cap) as r:
        if route == "local --json":
            samples = {r.row(n0).actor_id: pyspy_json(cap, "pyspy_rank0.json"),
                       r.row(n1).actor_id: pyspy_json(cap, "pyspy_rank1.json")}
            report = await r.analyse_samples(samples)
        else:
            report = await r.dump()
    r0, r1 = rank(report, n0), rank(report, n1)
    assert (r0.blocked_on.op, r0.blocked_on.frame) == ("cuda_sync", RANK0_WAIT)
    assert r1.blocked_on is None and r0.stuck is True and r1.stuck is True
    assert all(x.collective is None for x in report.ranks) and report.notes == ()  # no watchdog line, no dump file
    assert [(s.worker_group, s.rank) for s in report.suspects] == [("x2s", 1)]
    reason = suspect_reason(report.suspects[0])
    assert reason == f"not in cuda_sync with rank 0 of x2s: it is in actor_rollout_update_actor at {STRAGGLER_AT}; " \
                     "its stack did not move"
    if route == "dashboard --native":  # natively rank 0 blocks in the launch of the sum kernel
        funcs = [f.func for f in r0.stack]
        assert "cuLaunchKernel" in funcs and "cudaLaunchKernel" in funcs
        assert any("gpu_reduce_kernel" in f and "sum_functor" in f for f in funcs)


@pytest.mark.parametrize("route", ["dashboard --native", "local --json"])
async def test_mismatch_stacks_alone_cannot_tell(route):
    """NCCL returns at once: both ranks sit at their .item(), on a pegged GPU, at different lines. Without
    the watchdog or Flight Recorder nothing says which collective each is in, so nobody stands apart."""
    cap = capture(M)
    n0, n1 = names(M)
    async with Replay(cap) as r:
        if route == "local --json":
            samples = {r.row(n0).actor_id: pyspy_json(cap, "pyspy_rank0.json"),
                       r.row(n1).actor_id: pyspy_json(cap, "pyspy_rank1.json")}
            report = await r.analyse_samples(samples)
        else:
            report = await r.dump()
    assert (rank(report, n0).blocked_on.op, rank(report, n0).blocked_on.frame) == ("cuda_sync", RANK0_WAIT)
    assert (rank(report, n1).blocked_on.op, rank(report, n1).blocked_on.frame) == ("cuda_sync", MISMATCH1_WAIT)
    assert report.suspects == ()


@pytest.mark.parametrize("shape", SHAPES)
async def test_python_only_stacks_need_the_gpu_numbers(shape):
    async with Replay(capture(shape)) as r:
        util = [r.row(n).gpu_util_percent for n in names(shape)]
    t0 = task_thread(parse_json((GPU_RUN / shape / "pyspy_rank0.json").read_text())[0])
    t1 = task_thread(parse_json((GPU_RUN / shape / "pyspy_rank1.json").read_text())[0])
    assert t0.active and blocked_on(t0, util[0]).op == "cuda_sync"
    assert blocked_on(t0, None) is None  # a Python-only stack needs the GPU number
    if shape == S:
        assert not t1.active and util[1] == 0.0 and blocked_on(t1, util[1]) is None
    else:
        assert t1.active and blocked_on(t1, util[1]).frame == MISMATCH1_WAIT


# ---------------------------------------------------------------- the collective: Flight Recorder, watchdog log

EVIDENCE = {
    # the debug-info pipe's dumps before the timeout; the watchdog's lines after it (dump files moved aside,
    # as the capture did for that dump); the dump-on-timeout files and the lines together (files win)
    "pipe before the timeout": ("before", "after_trigger", "flight_recorder"),
    "watchdog log": ("after", None, "watchdog_log"),
    "dump on timeout": ("after", "after_timeout", "flight_recorder"),
}


async def _report(shape: str, evidence: str, tmp_path):
    when, fr, _ = EVIDENCE[evidence]
    cap = capture(shape, when)
    n0, n1 = names(shape)
    async with Replay(cap) as r:
        samples = {r.row(n0).actor_id: pyspy_json(cap, "pyspy_rank0.json"),
                   r.row(n1).actor_id: pyspy_json(cap, "pyspy_rank1.json")}
        return await r.analyse_samples(samples, fr=fr_files(shape, fr) if fr else None, tmp=tmp_path)


@pytest.mark.parametrize("evidence", EVIDENCE)
async def test_straggler_with_the_collective_named(evidence, tmp_path):
    """Rank 0 in all_reduce #5 (its stack still says cuda_sync); rank 1 never enqueued #5: the only suspect,
    "never reached collective #5"."""
    report = await _report(S, evidence, tmp_path)
    source = EVIDENCE[evidence][2]
    n0, n1 = names(S)
    r0, r1 = rank(report, n0), rank(report, n1)
    assert collective_json(r0.collective) == {"source": source, "op": "all_reduce", "seq": 5, "last_enqueued": 5,
                                       "last_completed": 4, "numel": 16777216}
    assert (r0.collective.timeout_ms, r0.collective.pg) == ((45000, "default_pg") if source == "watchdog_log"
                                                            else (None, None))
    c1 = r1.collective
    assert (c1.source, c1.last_enqueued, c1.last_completed) == (source, 4, 4)
    if source == "watchdog_log":  # rank 1 logged only "Received a dump signal ... from rank 0 ... work: 4, 4"
        assert (c1.op, c1.seq, c1.numel) == (None, None, None)
    else:
        assert (c1.op, c1.seq) == ("all_reduce", 4)
    assert r0.blocked_on.op == "cuda_sync"  # the stack still says GPU; the collective names it
    (s,) = report.suspects
    assert (s.worker_group, s.rank) == ("x2s", 1)
    assert suspect_reason(s) == (f"not in all_reduce with rank 0 of x2s: it is in actor_rollout_update_actor at {STRAGGLER_AT}"
                        "; its stack did not move; NCCL: it never reached collective #5 (its last enqueued work is #4)")
    t = dump_text(report)
    assert "cuda_sync [all_reduce seq 5]" in t
    assert report.notes == ((NOTE[S],) if source == "flight_recorder" else ())
    assert (f"note: {NOTE[S]}" in t.splitlines()) == (source == "flight_recorder")
    assert dump_json(report)["notes"] == list(report.notes)
    # the stack screen: the suspect marked, rank 0's pending #5, rank 1's last (done) collective
    assert rank_cells(r1, True)[0].plain == "▶ x2s" and rank_cells(r0, False)[0].plain == "x2s"
    assert rank_cells(r0, False)[4].plain == "cuda_sync (GPU) all_reduce#5"
    assert rank_cells(r1, True)[4].plain == ("- all_reduce#4 done" if source == "flight_recorder" else "-")
    # a rank's full stack: what the evidence says, unknowns left out
    nccl = next(ln for ln in rank_stack_text(r1).plain.splitlines() if ln.startswith("NCCL"))
    assert nccl == (f"NCCL ({source}): last enqueued 4  last completed 4" if source == "watchdog_log" else
                    f"NCCL ({source}): op all_reduce  seq 4  last enqueued 4  last completed 4  numel 1048576")


@pytest.mark.parametrize("evidence", EVIDENCE)
async def test_mismatch_with_the_collectives_named(evidence, tmp_path):
    """Both ranks in collective #5, different ones: both are suspects, each naming the other's op."""
    report = await _report(M, evidence, tmp_path)
    source = EVIDENCE[evidence][2]
    n0, n1 = names(M)
    c0, c1 = rank(report, n0).collective, rank(report, n1).collective
    assert (c0.source, c0.op, c0.seq, c0.last_enqueued, c0.last_completed, c0.numel) == (
        source, "all_reduce", 5, 5, 4, 16777216)
    assert (c1.source, c1.op, c1.seq, c1.last_enqueued, c1.last_completed, c1.numel) == (
        source, "all_gather", 5, 5, 4, 1024)
    sus = {s.rank: suspect_reason(s) for s in report.suspects}
    assert sus == {0: "collective mismatch: waits in all_reduce while rank 1 of x2m waits in all_gather; "
                      "its stack did not move",
                   1: "collective mismatch: waits in all_gather while rank 0 of x2m waits in all_reduce; "
                      "its stack did not move"}
    assert report.notes == ((NOTE[M],) if source == "flight_recorder" else ())
    assert rank_cells(rank(report, n1), True)[4].plain == "cuda_sync (GPU) all_gather#5"


async def test_dump_job_end_to_end_after_the_timeout(tmp_path):
    """``D`` after the timeout, the whole pipeline: stacks through ``/worker/traceback``, the watchdog's lines
    through the log API, the dump-on-timeout files on the ranks' node."""
    async with Replay(capture(S, "after")) as r:
        job = r.job(fr=fr_files(S, "after_timeout"), tmp=tmp_path)
        report = await job.run()
    assert job.stage == "done" and report is not None
    assert [(s.worker_group, s.rank) for s in report.suspects] == [("x2s", 1)]
    assert "never reached collective #5" in suspect_reason(report.suspects[0]) and report.notes == (NOTE[S],)
    assert {x.actor.actor_name: x.collective.source for x in report.ranks if x.collective} == {
        n: "flight_recorder" for n in names(S)}


# ---------------------------------------------------------------- the raw evidence


def test_watchdog_lines_from_the_dashboard_log_api():
    # straggler: rank 0 timed out in all_reduce #5; rank 1 never enqueued it and only heard of the timeout
    c0 = parse_watchdog(_log(S, 0, "after"))
    assert (c0.source, c0.op, c0.seq, c0.numel, c0.timeout_ms, c0.last_enqueued, c0.last_completed) == (
        "watchdog_log", "all_reduce", 5, 16777216, 45000, 5, 4)
    c1 = parse_watchdog(_log(S, 1, "after"))
    assert (c1.op, c1.seq, c1.last_enqueued, c1.last_completed) == (None, None, 4, 4)
    assert "Received a dump signal due to a collective timeout from  rank 0" in _log(S, 1, "after")
    # mismatch: both timed out in #5, in different collectives
    m0, m1 = parse_watchdog(_log(M, 0, "after")), parse_watchdog(_log(M, 1, "after"))
    assert (m0.op, m0.seq, m0.numel) == ("all_reduce", 5, 16777216)
    assert (m1.op, m1.seq, m1.numel, m1.timeout_ms) == ("all_gather", 5, 1024, 45000)
    assert "OpType=ALLGATHER, NumelIn=1024, NumelOut=2048" in _log(M, 1, "after")
    for shape in SHAPES:  # before the timeout: no watchdog facts
        for r in (0, 1):
            assert parse_watchdog(_log(shape, r, "before")) is None


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tag", ["after_trigger", "after_timeout"])
def test_flight_recorder_cross_rank_match(shape, tag):
    states = []
    for r in (0, 1):
        doc, err = load_dump((GPU_RUN / shape / "fr" / f"fr_rank_{r}.{tag}").read_bytes())
        assert err is None and doc["comm_lib_version"] == "2.28.9"
        assert doc["pg_config"]["0"]["ranks"] == "[0, 1]"
        states.append(rank_state(doc, r))
    s0, s1 = states
    assert [e.seq for e in s0.entries] == [1, 2, 3, 4, 5] and s0.entries[-1].state == "scheduled"
    assert (s0.last_enqueued, s0.last_completed) == (5, 4)
    assert all(e.state == "completed" and e.profiling_name == "nccl:all_reduce" for e in s0.entries[:4])
    c0, c1 = collective_info(s0), collective_info(s1)
    assert collective_pending(c0) and (c0.op, c0.seq, c0.numel) == ("all_reduce", 5, 16777216)
    if shape == S:
        assert [e.seq for e in s1.entries] == [1, 2, 3, 4] and (s1.last_enqueued, s1.last_completed) == (4, 4)
        assert not collective_pending(c1)
        assert match(states) == ["collective #5 (nccl:all_reduce): ranks [1] never joined (ranks [0] wait)"]
    else:
        assert s1.entries[-1].profiling_name == "nccl:all_gather" and s1.entries[-1].state == "scheduled"
        assert collective_pending(c1) and (c1.op, c1.seq, c1.numel) == ("all_gather", 5, 1024)
        assert match(states) == ["collective #5 mismatch: rank 0 nccl:all_reduce [[16777216]], "
                                 "rank 1 nccl:all_gather [[1024]]"]


@pytest.mark.parametrize("shape", SHAPES)
async def test_read_local_finds_both_dumps(shape, tmp_path):
    """The replayed rows' runtime env says where the dumps are (``TORCH_FR_DUMP_TEMP_FILE``)."""
    async with Replay(capture(shape, "after")) as r:
        rows = [r.row(n) for n in names(shape)]
    assert {a.fr_dump_prefix for a in rows} == {"/tmp/fr_rank_"}
    for rk, src in fr_files(shape, "after_timeout").items():
        shutil.copy(src, tmp_path / f"fr_rank_{rk}")
    rows = [replace(a, fr_dump_prefix=str(tmp_path / "fr_rank_")) for a in rows]
    states, notes, mtimes = read_local(rows)
    assert set(fr_infos(states)) == set(mtimes) == {a.actor_id for a in rows} and notes == []
    assert fr_findings(rows, states) == [NOTE[shape]]


async def test_trigger_and_read_says_when_no_fresh_dump_came(tmp_path):
    # past the timeout the ranks' pipes are read (by us here), but nobody writes a new dump: the old files
    # are what there is (the machine's `f` waited its full 15 s and showed them without a word)
    for r in (0, 1):
        shutil.copy(GPU_RUN / S / "fr" / f"fr_rank_{r}.after_timeout", tmp_path / f"fr_rank_{r}")
        os.utime(tmp_path / f"fr_rank_{r}", (1795968785.18, 1795968785.18))
        os.mkfifo(tmp_path / f"fr_pipe_{r}.pipe")
    readers = [os.open(tmp_path / f"fr_pipe_{r}.pipe", os.O_RDONLY | os.O_NONBLOCK) for r in (0, 1)]
    try:
        rows = [replace(row(f"a{r}", group="x2s", rank=r), fr_dump_prefix=str(tmp_path / "fr_rank_"),
                        fr_pipe_prefix=str(tmp_path / "fr_pipe_"), node_id="here") for r in (0, 1)]
        states, notes = await trigger_and_read(rows, wait_s=1.0)
        # the same through a finished dump's `f`: the cross-rank finding it already had is shown once
        job = DumpJob(None, frozenset({"here"}), rows, DumpOptions())
        job.notes = (NOTE[S],)
        job.report = analyse(rows, {}, 0.0, notes=job.notes)
        report, _ = await job.refresh_flight_recorder(wait_s=1.0)
    finally:
        for fd in readers:
            os.close(fd)
    assert set(states) == {"a0", "a1"}  # the old dumps are still read
    stale = [n for n in notes if "no fresh dump" in n]
    assert len(stale) == 1 and stale[0].startswith("2 of 2 ranks wrote no fresh dump within 1 s")
    assert "the dumps shown are older (written " in stale[0]
    assert fr_findings(rows, states) == [NOTE[S]]
    assert report is not None and report.notes.count(NOTE[S]) == 1
    assert set(job.collectives) == {"a0", "a1"}


async def test_a_dump_written_at_once_counts_as_fresh_though_its_file_time_is_coarse(tmp_path):
    # a file's time comes from a coarse clock (a jiffy; a whole second on some filesystems): a dump written
    # within milliseconds of the trigger can carry a time before it, and it is fresh all the same
    os.mkfifo(tmp_path / "fr_pipe_0.pipe")
    reader = os.open(tmp_path / "fr_pipe_0.pipe", os.O_RDONLY | os.O_NONBLOCK)
    rows = [replace(row("a0", group="x2s", rank=0), fr_dump_prefix=str(tmp_path / "fr_rank_"),
                    fr_pipe_prefix=str(tmp_path / "fr_pipe_"), node_id="here")]

    async def rank0() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # (no writer yet reads as b"", a writer with nothing as EAGAIN)
            try:
                if os.read(reader, 1):
                    break
            except BlockingIOError:
                pass
            await asyncio.sleep(0.01)
        dump = tmp_path / "fr_rank_0"
        shutil.copy(GPU_RUN / S / "fr" / "fr_rank_0.after_timeout", dump)
        back = time.time() - 0.3  # as the filesystem's clock may say
        os.utime(dump, (back, back))

    try:
        monitor = asyncio.ensure_future(rank0())
        states, notes = await trigger_and_read(rows, wait_s=2.0)
        await monitor
    finally:
        os.close(reader)
    assert set(states) == {"a0"} and not [n for n in notes if "no fresh dump" in n], notes
