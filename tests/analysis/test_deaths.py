"""Death causes from Ray's real death_cause rows (Ray 2.60, ``tests/fixtures/ray-deaths``) and from real worker
logs: the two-H200 run, where NCCL's watchdog aborted rank 0 while Ray said "... killed by the OOM killer ...".
Then the post-mortem dump of that run: rank 0 DEAD, rank 1 still in the function that never reached the
collective — the dump names rank 1 and says rank 0 died of the timeout."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests.analysis.helpers import controller_in_get, in_collective, row, sleeping
from verltop.analysis.deaths import classify, last_exception
from verltop.analysis.dump import analyse
from verltop.model import Death, ProcessDump
from verltop.sources import parse
from verltop.sources.pyspy import parse_json
from verltop.sources.watchdog import parse_watchdog
from verltop.text.contract import dump_json
from verltop.text.dump import dump_text
from verltop.text.suspects import suspect_reason

FIX = Path(__file__).resolve().parent.parent / "fixtures"
X2 = FIX / "real-gpu-run" / "x2-straggler"


def ray_actors() -> dict[str, object]:
    rows, _ = parse.actors(json.loads((FIX / "ray-deaths" / "actors_detail1.json").read_text()))
    return {a.name: a for a in rows}


def test_death_text_is_whole_and_the_cause_line_stays_one_line():
    acts = ray_actors()
    pip = acts["pip_fail_actor"]
    assert len(pip.death_text) > 2000 and "No matching distribution found" in pip.death_text
    assert "\n" not in pip.death_cause
    assert acts["restart_loop_actor"].death_text.startswith("[WORKER_DIED] The actor is dead because its worker")


@pytest.mark.parametrize(("name", "kind", "detail"), [
    ("import_error_actor", "exception", "ModuleNotFoundError: No module named 'this_module_does_not_exist_xyz'"),
    ("raise_in_init_restarts_actor", "exception", "ValueError: boom in __init__ (max_restarts=2)"),
    ("restart_loop_actor", "unknown", "the worker process died and left no reason in its log"),
    ("exit_in_init_actor", "unknown", "the worker process died and left no reason in its log"),
    ("conda_fail_actor", "unknown", "its runtime env could not be created: "),
    ("pip_fail_actor", "unknown", "its runtime env could not be created: "),
])
def test_ray_death_causes(name, kind, detail):
    a = ray_actors()[name]
    d = classify(a.death_text, None)
    assert d.kind == kind and d.detail.startswith(detail), d


def worker_stderr(log: str, pid: int) -> str:
    """A worker's stderr as Ray forwarded it to the driver: its ``(Class pid=N)`` lines, prefix removed."""
    out = []
    for line in re.sub(r"\x1b\[[0-9;]*m", "", log).splitlines():
        m = re.match(rf"\((\w+) pid={pid}\) ?(.*)$", line)
        if m:
            out.append(m.group(2))
    return "\n".join(out)


def x2_rank0() -> tuple[str, str]:
    """Rank 0 of the straggler run: its stderr, and Ray's death cause for it (the raylet's line)."""
    drv = (X2 / "driver.log").read_text()
    pid = json.loads((X2 / "hang_rank0.json").read_text())["pid"]
    raylet = next(ln for ln in re.sub(r"\x1b\[[0-9;]*m", "", drv).splitlines() if f"Worker PID: {pid}" in ln)
    cause = ("[WORKER_DIED] The actor is dead because its worker process has died. Worker exit type: "
             + raylet.split("Worker exit type: ", 1)[1])
    return worker_stderr(drv, pid), cause


def test_h200_rank0_is_an_nccl_timeout_not_the_oom_killer():
    log, cause = x2_rank0()
    assert "killed by the OOM killer" in cause  # what Ray says
    assert "Watchdog caught collective operation timeout" in log and "Fatal Python error: Aborted" in log
    d = classify(cause, log, parse_watchdog(log))
    assert d == Death("nccl_timeout", "all_reduce #5 timed out after 45 s (NCCL watchdog), then the process "
                                      "aborted (SIGABRT)")
    assert classify(cause, None).kind == "unknown"  # without the log: no guess at OOM


def test_h200_post_mortem_dump_names_the_rank_that_never_reached_the_collective():
    log0, cause = x2_rank0()
    util = {n: a["gpu_util_percent"] for n, a in
            ((a["actor_name"], a) for a in json.loads((X2 / "verltop_snapshot.json").read_text())["actors"])}
    r0 = replace(row("a0", group="x2s", rank=0, state="DEAD", task=None, death=cause.split(". ", 1)[0]),
                 world_size=2, death_text=cause)
    r1 = replace(row("a1", group="x2s", rank=1, gpu=util.get("x2sWorkerDict_0:1")), world_size=2)
    ctl = row("ctl", None, None, "controller", task="run")
    p1 = ProcessDump(2, threads=parse_json((X2 / "pyspy_rank1.json").read_text())[0])
    coll = {"a0": parse_watchdog(log0), "a1": parse_watchdog((X2 / "log_tail_rank1.after.err.txt").read_text())}
    deaths = {"a0": classify(cause, log0, coll["a0"])}
    rep = analyse([ctl, r0, r1], {"a1": [p1, p1], "ctl": [controller_in_get()] * 2}, 0.0, coll, deaths=deaths)
    assert [s.actor_id for s in rep.suspects] == ["a1"]
    why = suspect_reason(rep.suspects[0])
    assert why.startswith("not in all_reduce with rank 0 of x2s (rank 0 timed out in it and died): it is in "
                          "actor_rollout_update_actor at device_gpu_job.py:153 WorkerDict.generate_sequences"), why
    assert "never reached collective #5 (its last enqueued work is #4)" in why
    doc = dump_json(rep)
    (d0,) = [r for r in doc["ranks"] if r["actor_id"] == "a0"]
    assert d0["death"] == {"kind": "nccl_timeout", "detail": deaths["a0"].detail}
    assert doc["suspects"][0]["pid"] == 100
    assert all(r["death"] is None for r in doc["ranks"] if r["actor_id"] != "a0")
    assert "nccl_timeout" in dump_text(rep)


def test_dead_rank_whose_peers_failed_out_is_the_suspect():
    """gloo: rank 3 is SIGKILLed inside all_reduce; every peer fails with "Connection closed by peer" and goes
    idle, so no rank waits any more. The dead rank is still the one to name."""
    cause = "[WORKER_DIED] The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR"
    rows = [row(f"a{k}", rank=k, task=None) for k in range(3)]
    dead = replace(row("a3", rank=3, state="DEAD", task=None, death="The actor is dead"), death_text=cause)
    idle = ProcessDump(1, threads=parse_json(json.dumps([{"thread_id": 1, "thread_name": "MainThread",
                                                          "active": False, "frames": []}]))[0])
    rep = analyse([*rows, dead], {f"a{k}": [idle] for k in range(3)}, 0.0, deaths={"a3": classify(cause, None)})
    assert [s.actor_id for s in rep.suspects] == ["a3"]
    assert suspect_reason(rep.suspects[0]).startswith("DEAD (unknown: the worker process died and left no reason")
    assert "ranks 0-2 of wg live on" in suspect_reason(rep.suspects[0])


def test_dead_rank_with_peers_waiting_keeps_its_reason():
    rows = [row(f"a{k}", rank=k) for k in range(3)]
    dead = row("a3", rank=3, state="DEAD", task=None, death="killed")
    rep = analyse([*rows, dead], {f"a{k}": [in_collective("all_reduce")] for k in range(3)}, 0.0,
                  deaths={"a3": Death("signal", "SIGSEGV (Fatal Python error: Segmentation fault)")})
    assert [s.actor_id for s in rep.suspects] == ["a3"]
    assert suspect_reason(rep.suspects[0]) == ("DEAD (signal: SIGSEGV (Fatal Python error: Segmentation fault)) while ranks "
                                      "0-2 of wg wait in all_reduce")


def test_timed_out_ranks_alone_are_named_when_no_live_rank_is_outside():
    rows = [replace(row(f"a{k}", rank=k, state="DEAD", task=None), world_size=2) for k in range(2)]
    d = Death("nccl_timeout", "all_reduce #5 timed out after 45 s (NCCL watchdog)")
    rep = analyse(rows, {}, 0.0, deaths={"a0": d, "a1": d})
    assert rep.suspects == ()  # every rank dead: nobody lives on to wait


@pytest.mark.parametrize(("log", "kind", "detail"), [
    ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity",
     "cuda_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB."),
    ("Fatal Python error: Segmentation fault\n\nThread 0x1 (most recent call first):\n  File x", "signal",
     "SIGSEGV (Fatal Python error: Segmentation fault)"),
    ("*** SIGTERM received at time=1795968844 on cpu 11 ***\nPC: @ 0x7f", "signal", "SIGTERM"),
    ("Traceback (most recent call last):\n  File \"w.py\", line 3, in f\n    raise KeyError('x')\nKeyError: 'x'\n",
     "exception", "KeyError: 'x'"),
])
def test_log_deaths(log, kind, detail):
    d = classify("[WORKER_DIED] The actor is dead because its worker process has died.", log)
    assert d.kind == kind and d.detail.startswith(detail), d


def test_host_oom_and_exits():
    oom = ("[OUT_OF_MEMORY] Task was killed due to the node running low on memory. Memory on the node (IP: 10.0.0.1, "
           "ID: ab) where the task (actor ID: cd, name=W, pid=7, memory used=20.1GB) was running was 22.5GB / 23.6GB "
           "(0.953), which exceeds the memory usage threshold of 0.95.")
    d = classify(oom, None)
    assert d.kind == "host_oom" and "22.5GB / 23.6GB" in d.detail
    assert classify("The actor is dead because it was killed by `ray.kill`.", None) == Death("exit",
                                                                                              "killed by ray.kill")
    assert classify("Worker exits with an exit code 3. exit", None) == Death("exit", "exit code 3")
    assert last_exception("no traceback here") is None


def test_rank_dump_json_fields_are_always_there():
    rep = analyse([row("a0"), row("a1", rank=1)], {"a0": [sleeping()], "a1": [sleeping()]}, 0.0)
    for r in dump_json(rep)["ranks"]:
        assert r["process"] is None and r["parent_pid"] is None and r["death"] is None
    assert dump_json(rep)["chains"] == []


def test_a_group_that_died_whole_names_the_rank_whose_death_was_its_own():
    """The shape of the H200 'kill' run (NCCL, 2 ranks, Ray 2.60): rank 1 is SIGKILLed while rank 0 waits
    in all_reduce #5. The controller's ray.get raises, the driver exits, and Ray kills rank 0 as its owner
    died: nobody is left waiting, every rank is DEAD. The one that died first, of its own cause, is named;
    the rank that died of its owner's death is not."""
    killed = ("[WORKER_DIED] The actor is dead because its worker process has died. Worker exit type: "
              "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.")
    owner = ("[OWNER_DIED] The actor is dead because its owner has died. Owner Id: 01000000ffffffffffff "
             "Owner Ip address: 192.0.2.2 Owner worker exit type: INTENDED_SYSTEM_EXIT")
    r0 = replace(row("a0", rank=0, state="DEAD", task=None, death="its owner (the process that created it) died "
                     "(INTENDED_SYSTEM_EXIT)", pid=5262), world_size=2, death_text=owner)
    r1 = replace(row("a1", rank=1, state="DEAD", task=None, death="worker process died (SYSTEM_ERROR): Worker "
                     "unexpectedly exits with a connection error code 2. End of file.", pid=5263),
                 world_size=2, death_text=killed)
    deaths = {"a0": classify(owner, None), "a1": classify(killed, None)}
    assert (deaths["a0"].kind, deaths["a1"].kind) == ("exit", "unknown")
    rep = analyse([r0, r1], {}, 0.0, deaths=deaths)
    assert [s.actor_id for s in rep.suspects] == ["a1"]
    reason = suspect_reason(rep.suspects[0])
    assert reason.startswith("DEAD (unknown: the worker process died and left no reason")
    assert reason.endswith("; rank 0 of wg died after it (their owner died)")
    # a group killed on purpose (every rank's owner gone) names nobody
    both = analyse([r0, replace(r1, death_text=owner, death_cause=r0.death_cause)], {}, 0.0,
                   deaths={"a0": deaths["a0"], "a1": deaths["a0"]})
    assert both.suspects == ()
