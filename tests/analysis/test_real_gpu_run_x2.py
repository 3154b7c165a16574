"""Replays of the two-GPU device run (tests/fixtures/real-gpu-run/x2-*, 2x H200, Ray 2.60, torch 2.11, NCCL 2.28.9).

One verl-shaped Ray job per shape (``scripts/device_gpu_job.py --world 2``): ``TaskRunner`` and two
``WorkerDict`` actors (``num_gpus=1`` each) in an NCCL group of world size 2 with a 45 s timeout, Flight
Recorder on, collective #5 hung:

- ``x2-straggler``: rank 1 sleeps in ``generate_sequences``; rank 0 entered ``all_reduce`` and blocks at the
  ``.item()`` after it;
- ``x2-mismatch``: rank 0 ``all_reduce`` (16777216 floats), rank 1 ``all_gather`` (1024 floats each).

verltop ran there before the NCCL timeout (stacks; then the Flight Recorder through the debug-info pipe) and
after it (the watchdog's lines read through the dashboard's log API; the dump-on-timeout files).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.analysis.helpers import row
from verltop.analysis.collectives import blocked_on, collective_pending, task_thread
from verltop.analysis.dump import analyse
from verltop.analysis.flight_recorder import collective_info, match
from verltop.engine.dumps import DumpJob, fr_findings, fr_infos
from verltop.model import ProcessDump
from verltop.sources.flight_recorder import load_dump, rank_state, read_local, trigger_and_read
from verltop.sources.pyspy import DumpOptions, parse_json
from verltop.sources.watchdog import parse_watchdog
from verltop.text import dump_text

RUN = Path(__file__).parents[1] / "fixtures" / "real-gpu-run"
S, M = "x2-straggler", "x2-mismatch"
SHAPES = (S, M)
PREFIX = {S: "x2s", M: "x2m"}
JOB = "device_gpu_job.py"
RANK0_WAIT = f"{JOB}:172 WorkerDict._update_x2"  # return float(y.sum().item()) after all_reduce #5
STRAGGLER_AT = f"{JOB}:153 WorkerDict.generate_sequences"
MISMATCH1_WAIT = f"{JOB}:169 <genexpr>"  # sum(o.sum() for o in out).item() after all_gather #5
CONTROLLER_AT = f"{JOB}:247 TaskRunner.run_x2"
BEFORE = ("verltop_dump.json", "verltop_dump_native.json")
WITH_COLLECTIVE = ("verltop_dump_after_fr.json", "verltop_dump_after_timeout.json",
                   "verltop_dump_after_timeout_logs.json")


def text(shape: str, rel: str) -> str:
    return (RUN / shape / rel).read_text()


def js(shape: str, rel: str):
    return json.loads(text(shape, rel))


def names(shape: str) -> tuple[str, str]:
    return f"{PREFIX[shape]}WorkerDict_0:0", f"{PREFIX[shape]}WorkerDict_0:1"


def by_name(doc: dict, key: str = "ranks") -> dict:
    return {r["actor_name"]: r for r in doc[key]}


# ---------------------------------------------------------------- GPUs: the right GPU per actor


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("snap", ["verltop_snapshot.json", "verltop_snapshot_after_timeout.json"])
def test_each_rank_on_its_own_gpu_with_nvml_memory_and_util(shape, snap):
    doc = js(shape, snap)
    meta = js(shape, "capture_meta.json")
    nv = {g["index"]: g for g in meta["nvml_first"][-1]["gpus"]}
    actors = by_name(doc, "actors")
    for r, name in enumerate(names(shape)):
        init = js(shape, f"init_rank{r}.json")
        a = actors[name]
        assert init["gpu_ids"] == [r] and init["CUDA_VISIBLE_DEVICES"] == str(r)  # Ray gave rank r GPU r
        assert a["pid"] == init["pid"] == meta["pids"][f"rank{r}"]
        assert a["gpu_index"] == r
        (proc,) = nv[r]["compute_procs"]  # NVML lists the rank's pid on its GPU, and nothing else there
        assert proc["pid"] == a["pid"] and a["gpu_mem_bytes"] == proc["usedGpuMemory"]
        assert (a["rank"], a["world_size"], a["worker_group"], a["state"]) == (r, 2, PREFIX[shape], "ALIVE")
    a0, a1 = (actors[n] for n in names(shape))
    # (2 + rank) GiB of ballast, plus context and NCCL buffers: 3584 MiB on GPU 0, ~4606 MiB on GPU 1
    assert a0["gpu_mem_bytes"] == 3758096384 and a1["gpu_mem_bytes"] in (4829741056, 4831838208)
    assert a0["gpu_util_percent"] == 100.0
    assert a1["gpu_util_percent"] == (0.0 if shape == S else 100.0)  # the straggler's GPU idles
    assert actors["TaskRunner"]["gpu_index"] is None and actors["TaskRunner"]["role"] == "controller"
    gpus = {g["index"]: g for g in doc["nodes"][0]["gpus"]}
    assert set(gpus) == {0, 1} and {g["name"] for g in gpus.values()} == {"NVIDIA H200"}
    assert gpus[0]["util_percent"] == 100.0 and gpus[1]["util_percent"] == (0.0 if shape == S else 100.0)
    for i in (0, 1):  # the device total holds more than the process: context and NCCL buffers
        assert gpus[i]["mem_used_bytes"] > actors[names(shape)[i]]["gpu_mem_bytes"]


@pytest.mark.parametrize("shape", SHAPES)
def test_nvml_per_process_util_and_host_cpu(shape):
    for sample in js(shape, "capture_meta.json")["nvml_first"]:
        util = {g["index"]: (g["util_gpu"], [p["smUtil"] for p in g["proc_util"]]) for g in sample["gpus"]}
        assert util[0] == (100, [100])
        assert util[1] == ((0, [0]) if shape == S else (100, [100]))
        cpu = sample["cpu_percent"]
        assert cpu["rank0"] > 95 and sample["proc_status"]["rank0"] == "running"  # spinning in the driver
        if shape == S:
            assert cpu["rank1"] <= 2 and sample["proc_status"]["rank1"] == "sleeping"
        else:
            assert cpu["rank1"] > 95


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("screen", ["tui_after_main.txt", "tmux_main.txt"])
def test_main_screen_gpu_bars(shape, screen):
    lines = text(shape, screen).splitlines()
    r0 = next(ln for ln in lines if ln.strip().startswith("actor_rollout      0"))
    r1 = next(ln for ln in lines if ln.strip().startswith("actor_rollout      1"))
    assert r0.split()[4] == "0" and "MAX" in r0 and "3.5G" in r0
    assert r1.split()[4] == "1" and "4.5G" in r1
    if shape == S:
        assert "MAX" not in r1 and " 0%" in r1 and "GPU idle" in r1
    else:
        assert "MAX" in r1
    assert "GPUs 2" in lines[0]


# ---------------------------------------------------------------- before the NCCL timeout: stacks only


@pytest.mark.parametrize("dump", BEFORE)
def test_straggler_stacks_name_rank1_and_rank0_waits_on_its_gpu(dump):
    d = js(S, dump)
    r = by_name(d)
    n0, n1 = names(S)
    assert r[n0]["blocked_on"] == {"op": "cuda_sync", "frame": RANK0_WAIT}
    assert r[n1]["blocked_on"] is None and r[n0]["stuck"] is True and r[n1]["stuck"] is True
    assert r["TaskRunner"]["blocked_on"] == {"op": "ray.get", "frame": CONTROLLER_AT}
    assert all(x["collective"] is None for x in d["ranks"])  # no watchdog line yet, no dump file
    assert [(s["worker_group"], s["rank"]) for s in d["suspects"]] == [("x2s", 1)]
    reason = d["suspects"][0]["reason"]
    assert reason.startswith("not in cuda_sync with rank 0 of x2s: it is in actor_rollout_update_actor at "
                             + STRAGGLER_AT)
    assert "did not move" in reason and "never reached" not in reason


def test_straggler_native_stack_of_rank0_blocks_in_the_sum_kernel_launch():
    r0 = by_name(js(S, "verltop_dump_native.json"))[names(S)[0]]
    funcs = [f["func"] for f in r0["stack"]]
    assert "cuLaunchKernel" in funcs and "cudaLaunchKernel" in funcs
    assert any("gpu_reduce_kernel" in f and "sum_functor" in f for f in funcs)


@pytest.mark.parametrize("dump", BEFORE)
def test_mismatch_stacks_alone_cannot_tell(dump):
    # NCCL returns at once: both ranks sit at their .item(), on a pegged GPU, at different lines. Without
    # the watchdog or Flight Recorder nothing says which collective each is in, so nobody stands apart.
    d = js(M, dump)
    r = by_name(d)
    n0, n1 = names(M)
    assert r[n0]["blocked_on"] == {"op": "cuda_sync", "frame": RANK0_WAIT}
    assert r[n1]["blocked_on"] == {"op": "cuda_sync", "frame": MISMATCH1_WAIT}
    assert d["suspects"] == []


@pytest.mark.parametrize("shape", SHAPES)
def test_raw_pyspy_replays_to_the_same_ops(shape):
    util = {n: a["gpu_util_percent"] for n, a in by_name(js(shape, "verltop_snapshot.json"), "actors").items()}
    n0, n1 = names(shape)
    t0 = task_thread(parse_json(text(shape, "pyspy_rank0.json"))[0])
    t1 = task_thread(parse_json(text(shape, "pyspy_rank1.json"))[0])
    assert t0.active and blocked_on(t0, util[n0]).op == "cuda_sync"
    assert blocked_on(t0, None) is None  # a Python-only stack needs the GPU number
    if shape == S:
        assert not t1.active and blocked_on(t1, util[n1]) is None
    else:
        assert t1.active and blocked_on(t1, util[n1]).frame == MISMATCH1_WAIT


# ---------------------------------------------------------------- the collective: Flight Recorder, watchdog log


@pytest.mark.parametrize("dump", WITH_COLLECTIVE)
def test_straggler_with_the_collective_named(dump):
    d = js(S, dump)
    r = by_name(d)
    n0, n1 = names(S)
    source = "watchdog_log" if dump.endswith("_logs.json") else "flight_recorder"
    assert r[n0]["collective"] == {"source": source, "op": "all_reduce", "seq": 5, "last_enqueued": 5,
                                   "last_completed": 4, "numel": 16777216}
    c1 = r[n1]["collective"]
    assert (c1["source"], c1["last_enqueued"], c1["last_completed"]) == (source, 4, 4)
    if source == "watchdog_log":  # rank 1 logged only "Received a dump signal ... from rank 0 ... work: 4, 4"
        assert (c1["op"], c1["seq"], c1["numel"]) == (None, None, None)
    else:
        assert (c1["op"], c1["seq"]) == ("all_reduce", 4)
    assert r[n0]["blocked_on"]["op"] == "cuda_sync"  # the stack still says GPU; the collective names it
    (s,) = d["suspects"]
    assert (s["worker_group"], s["rank"]) == ("x2s", 1)
    assert s["reason"].startswith("not in all_reduce with rank 0 of x2s: it is in actor_rollout_update_actor at "
                                  + STRAGGLER_AT)
    assert "NCCL: it never reached collective #5 (its last enqueued work is #4)" in s["reason"]


@pytest.mark.parametrize("dump", WITH_COLLECTIVE)
def test_mismatch_with_the_collectives_named(dump):
    d = js(M, dump)
    r = by_name(d)
    n0, n1 = names(M)
    source = "watchdog_log" if dump.endswith("_logs.json") else "flight_recorder"
    assert r[n0]["collective"] == {"source": source, "op": "all_reduce", "seq": 5, "last_enqueued": 5,
                                   "last_completed": 4, "numel": 16777216}
    assert r[n1]["collective"] == {"source": source, "op": "all_gather", "seq": 5, "last_enqueued": 5,
                                   "last_completed": 4, "numel": 1024}
    sus = {s["rank"]: s["reason"] for s in d["suspects"]}
    assert set(sus) == {0, 1}
    assert sus[0].startswith("collective mismatch: waits in all_reduce while rank 1 of x2m waits in all_gather")
    assert sus[1].startswith("collective mismatch: waits in all_gather while rank 0 of x2m waits in all_reduce")


@pytest.mark.parametrize("shape", SHAPES)
def test_text_dumps_carry_the_cross_rank_match(shape):
    want = {S: "note: x2s: collective #5 (nccl:all_reduce): ranks [1] never joined (ranks [0] wait)",
            M: "note: x2m: collective #5 mismatch: rank 0 nccl:all_reduce [[16777216]], rank 1 nccl:all_gather "
               "[[1024]]"}[shape]
    assert want in text(shape, "verltop_dump_after_timeout.txt").splitlines()
    assert "note:" not in text(shape, "verltop_dump.txt")  # no dump file yet
    # the JSON of that run had no field for it (added since: `notes`, see test_json_dump_carries_the_notes)
    assert "notes" not in js(shape, "verltop_dump_after_timeout.json")


def _log(shape: str, r: int, when: str) -> str:
    return text(shape, f"log_tail_rank{r}.{when}.err.txt")


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
    for shape in SHAPES:  # before the timeout: no watchdog facts (only the pipe dump's "preparing" line later)
        for r in (0, 1):
            assert parse_watchdog(_log(shape, r, "before")) is None
    meta = js(S, "capture_meta.json")
    assert meta["logs_after"]["0"]["watchdog"] == c0.to_json() and meta["logs_before"]["0"]["watchdog"] is None


@pytest.mark.parametrize("shape", SHAPES)
def test_watchdog_fired_at_the_timeout_and_ray_still_says_alive_running(shape):
    meta = js(shape, "capture_meta.json")
    seen = meta["after_seen_rel_hang"]
    # polled once a second from the timeout (+45 s): the lines and the dump-on-timeout files were there at once
    assert 45 <= seen["log_rank0"] < 47 and 45 <= seen["log_rank1"] < 47
    assert 45 <= seen["fr_rank0"] < 47 and 45 <= seen["fr_rank1"] < 47
    ran = {S: ("45052",), M: ("45090", "45058")}[shape]  # ms, by the timed-out ranks' own count
    assert [f"ran for {ms} milliseconds" in _log(shape, r, "after") for r, ms in enumerate(ran)] == [True] * len(ran)
    acts = js(shape, "api_v0_actors.after_timeout.json")["data"]["result"]["result"]
    assert {a["state"] for a in acts} == {"ALIVE"}
    tasks = js(shape, "api_v0_tasks.after_timeout.json")["data"]["result"]["result"]
    assert {t["state"] for t in tasks if t["name"] == "WorkerDict.actor_rollout_update_actor"} == {"RUNNING"}
    assert all(meta["alive_end"].values())  # hang + 80 s: every process still there
    # ... but 60 s after the watchdog line the timed-out ranks abort (the watchdog thread rethrows), seen in
    # the driver's log (Ray forwards the workers' stderr) just before the harness stopped the cluster
    drv = text(shape, "driver.log")
    assert "Process group watchdog thread terminated with exception" in drv
    assert "Unhandled exception: N3c1016DistBackendErrorE" in drv


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("tag", ["after_trigger", "after_timeout"])
def test_flight_recorder_cross_rank_match(shape, tag):
    states = []
    for r in (0, 1):
        doc, err = load_dump((RUN / shape / "fr" / f"fr_rank_{r}.{tag}").read_bytes())
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
def test_dump_on_timeout_rewrote_the_files_with_the_same_facts(shape):
    for r in (0, 1):
        a = (RUN / shape / "fr" / f"fr_rank_{r}.after_trigger").read_bytes()
        assert a == (RUN / shape / "fr" / f"fr_rank_{r}.after_timeout").read_bytes()
    ls_trig, ls_to = text(shape, "fr/ls.after_trigger.txt"), text(shape, "fr/ls.after_timeout.txt")
    m_trig = {ln.split()[-1]: ln.split()[6] for ln in ls_trig.splitlines()}
    m_to = {ln.split()[-1]: ln.split()[6] for ln in ls_to.splitlines()}
    for r in (0, 1):  # rewritten (a later mtime) after the timeout
        assert m_to[f"/tmp/fr_rank_{r}"] > m_trig[f"/tmp/fr_rank_{r}"]


@pytest.mark.parametrize("shape", SHAPES)
def test_pipe_trigger_before_the_timeout(shape):
    fr = js(shape, "capture_meta.json")["fr_trigger"]
    assert fr["before"] == dict.fromkeys(names(shape))  # no dump file before the first trigger
    assert list(fr["fresh"].values()) == [True, True]
    # two ranks with pending collectives: 5-7.3 s from the pipe write to the files (0.1-1 s on one GPU)
    waits = [m - fr["started"] for m in fr["mtimes_after"].values()]
    assert all(4.5 < w < 8 for w in waits) and 6 < fr["seconds"] < 8
    infos = {v["op"] for v in fr["infos"].values()}
    assert infos == ({"all_reduce"} if shape == S else {"all_reduce", "all_gather"})


@pytest.mark.parametrize("shape", SHAPES)
def test_read_local_finds_both_dumps(shape, tmp_path):
    for r in (0, 1):
        shutil.copy(RUN / shape / "fr" / f"fr_rank_{r}.after_timeout", tmp_path / f"fr_rank_{r}")
    rows = [replace(row(f"a{r}", group=PREFIX[shape], rank=r), fr_dump_prefix=str(tmp_path / "fr_rank_"))
            for r in (0, 1)]
    states, notes, mtimes = read_local(rows)
    infos, findings = fr_infos(states), fr_findings(rows, states)
    assert set(infos) == set(mtimes) == {"a0", "a1"} and notes == []
    assert findings == [f"{PREFIX[shape]}: {f}" for f in match(
        [rank_state(load_dump((tmp_path / f"fr_rank_{r}").read_bytes())[0], r) for r in (0, 1)])]


# ---------------------------------------------------------------- replay: analyse() on the run's own inputs


def _replay(shape: str, source: str):
    """analyse() over the captured py-spy JSON, with the collective from the watchdog log tails or FR files."""
    util = {n: a["gpu_util_percent"] for n, a in by_name(js(shape, "verltop_snapshot.json"), "actors").items()}
    n0, n1 = names(shape)
    r0 = replace(row("a0", group=PREFIX[shape], rank=0, gpu=util[n0]), world_size=2)
    r1 = replace(row("a1", group=PREFIX[shape], rank=1, gpu=util[n1]), world_size=2)
    ctl = row("ctl", None, None, "controller", task="run")
    p0 = ProcessDump(1, threads=parse_json(text(shape, "pyspy_rank0.json"))[0])
    p1 = ProcessDump(2, threads=parse_json(text(shape, "pyspy_rank1.json"))[0])
    if source == "watchdog_log":
        coll = {f"a{r}": parse_watchdog(_log(shape, r, "after")) for r in (0, 1)}
        notes: tuple[str, ...] = ()
    else:
        sts = [rank_state(load_dump((RUN / shape / "fr" / f"fr_rank_{r}.after_timeout").read_bytes())[0], r)
               for r in (0, 1)]
        coll = {f"a{r}": collective_info(sts[r]) for r in (0, 1)}
        notes = tuple(f"{PREFIX[shape]}: {f}" for f in match(sts))
    return analyse([ctl, r0, r1], {"a0": [p0, p0], "a1": [p1, p1], "ctl": []}, 0.0, coll, notes=notes)


@pytest.mark.parametrize("source", ["watchdog_log", "flight_recorder"])
def test_replayed_straggler(source):
    r = _replay(S, source)
    assert [s.actor_id for s in r.suspects] == ["a1"]
    reason = r.suspects[0].reason
    assert reason.startswith("not in all_reduce with rank 0 of x2s") and "generate_sequences" in reason
    assert "never reached collective #5 (its last enqueued work is #4)" in reason
    t = dump_text(r)
    assert "cuda_sync [all_reduce seq 5]" in t


@pytest.mark.parametrize("source", ["watchdog_log", "flight_recorder"])
def test_replayed_mismatch(source):
    r = _replay(M, source)
    assert sorted(s.actor_id for s in r.suspects) == ["a0", "a1"]
    reasons = " | ".join(s.reason for s in r.suspects)
    assert "waits in all_reduce while rank 1 of x2m waits in all_gather" in reasons
    assert "waits in all_gather while rank 0 of x2m waits in all_reduce" in reasons


@pytest.mark.parametrize("shape", SHAPES)
def test_json_dump_carries_the_notes(shape):
    doc = _replay(shape, "flight_recorder").to_json()
    (note,) = doc["notes"]
    assert note.startswith(f"{PREFIX[shape]}: collective #5 ")
    assert f"note: {note}" in text(shape, "verltop_dump_after_timeout.txt")


# ---------------------------------------------------------------- the stack screen


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("screen", ["tui_after_stacks.txt", "tmux_stacks.txt"])
def test_stack_screen_after_the_timeout(shape, screen):
    t = text(shape, screen)
    assert "3/3 ranks dumped" in t
    if shape == S:
        assert "▶ x2s       1" in t and "- all_reduce#4 done" in t and "cuda_sync (GPU) all_reduce#5" in t
        assert "never joined" in t
    else:
        assert "▶ x2m       0" in t and "▶ x2m       1" in t
        assert "cuda_sync (GPU) all_reduce#5" in t and "cuda_sync (GPU) all_gather#5" in t
        assert "collective #5 mismatch" in t


@pytest.mark.parametrize("shape", SHAPES)
def test_tui_f_after_the_timeout_got_no_fresh_dump(shape):
    # past the timeout the ranks no longer answered their pipe: `f` waited its full 15 s, the files kept the
    # dump-on-timeout mtime, and the finding already shown was appended a second time (both fixed)
    meta = js(shape, "tui_after_meta.json")
    assert meta["fr_s"] >= 14.9
    assert len(meta["fr_notes"]) == 2 and meta["fr_notes"][0] == meta["fr_notes"][1]
    ls_to, ls_end = text(shape, "fr/ls.after_timeout.txt"), text(shape, "fr/ls.end.txt")
    files = [ln for ln in ls_to.splitlines() if "fr_rank_" in ln]
    assert files == [ln for ln in ls_end.splitlines() if "fr_rank_" in ln]
    pipes_to = [ln for ln in ls_to.splitlines() if ".pipe" in ln]
    assert pipes_to != [ln for ln in ls_end.splitlines() if ".pipe" in ln]  # the pipes were written to


async def test_trigger_and_read_says_when_no_fresh_dump_came(tmp_path):
    # the ranks' pipes are read (by us here), but nobody writes a new dump: the old files are what there is
    for r in (0, 1):
        shutil.copy(RUN / S / "fr" / f"fr_rank_{r}.after_timeout", tmp_path / f"fr_rank_{r}")
        os.utime(tmp_path / f"fr_rank_{r}", (1795968785.18, 1795968785.18))
        os.mkfifo(tmp_path / f"fr_pipe_{r}.pipe")
    readers = [os.open(tmp_path / f"fr_pipe_{r}.pipe", os.O_RDONLY | os.O_NONBLOCK) for r in (0, 1)]
    try:
        rows = [replace(row(f"a{r}", group="x2s", rank=r), fr_dump_prefix=str(tmp_path / "fr_rank_"),
                        fr_pipe_prefix=str(tmp_path / "fr_pipe_"), node_id="here") for r in (0, 1)]
        states, notes = await trigger_and_read(rows, wait_s=1.0)
        # the same through a finished dump's `f`: the cross-rank finding it already had is shown once
        job = DumpJob(None, frozenset({"here"}), rows, DumpOptions())
        finding = "x2s: collective #5 (nccl:all_reduce): ranks [1] never joined (ranks [0] wait)"
        job.notes = (finding,)
        job.report = analyse(rows, {}, 0.0, notes=job.notes)
        report, _ = await job.refresh_flight_recorder()
    finally:
        for fd in readers:
            os.close(fd)
    assert set(states) == {"a0", "a1"}  # the old dumps are still read
    stale = [n for n in notes if "no fresh dump" in n]
    assert len(stale) == 1 and stale[0].startswith("2 of 2 ranks wrote no fresh dump within 1 s")
    assert "the dumps shown are older (written " in stale[0]
    assert fr_findings(rows, states) == [finding]
    assert report is not None and report.notes.count(finding) == 1
    assert set(job.collectives) == {"a0", "a1"}
