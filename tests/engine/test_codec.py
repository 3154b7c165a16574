"""The model's full JSON round trip (what recordings store)."""

from __future__ import annotations

import json

import pytest

from tests.analysis.helpers import controller_in_get, in_collective, row, sleeping
from tests.engine.helpers import synthetic_snapshots
from verltop import codec
from verltop.analysis.dump import analyse
from verltop.model import (
    ActorRow,
    CollectiveInfo,
    DumpReport,
    Frame,
    FrEntry,
    FrRank,
    Problem,
    ProcessDump,
    Snapshot,
    Stall,
)
from verltop.text.contract import dump_json


def through_json(cls: type, obj: object) -> object:
    return codec.from_data(cls, json.loads(json.dumps(codec.to_data(obj))))


def test_snapshots_come_back_equal():
    for s in synthetic_snapshots(60)[::7]:
        assert through_json(Snapshot, s) == s


def test_a_dump_report_comes_back_equal_with_every_sample():
    ranks = [row(f"a{r}", rank=r) for r in range(4)] + [row("ctl", group=None, rank=None, role="controller")]
    samples = {f"a{r}": [in_collective("all_reduce")] * 3 for r in (0, 1, 3)}
    samples["a2"] = [sleeping(), sleeping(line=56), ProcessDump(2002, error=Problem("exited", "gone", "retry"))]
    samples["ctl"] = [controller_in_get()]
    coll = {"a0": CollectiveInfo("watchdog_log", "all_reduce", 5, 5, 4, 1024, "0", 600000)}
    report = analyse(ranks, samples, 1.79e9, coll, native=True, notes=("x2m: a note",))
    assert report.suspects and report.groups
    back = through_json(DumpReport, report)
    assert back == report
    assert back.ranks[0].samples[0].threads[0].frames[0] == Frame(
        "all_reduce", "/x/torch/distributed/distributed_c10d.py", 2800)
    # the contract view of the decoded report is the contract view of the original
    assert dump_json(back) == dump_json(report)


def test_frames_are_lists_and_defaults_are_left_out():
    d = codec.to_data(Frame("f", "x.py", 3))
    assert d == ["f", "x.py", 3, None]
    assert codec.to_data(Problem("k", "m")) == {"kind": "k", "message": "m"}
    assert "stalls" not in codec.to_data(row("a"))


def test_missing_fields_default_and_unknown_fields_are_ignored():
    r = row("a", rank=1, death="gone")
    d = codec.to_data(r)
    assert "job_id" not in d and d["death_cause"] == "gone"  # a default is not written
    del d["death_cause"], d["task_running_s"]  # written by a verltop without these fields
    d["from_the_future"] = [1, 2]
    a = codec.from_data(ActorRow, d)
    assert a.death_cause is None and a.task_running_s is None and a.rank == 1 and a.role == r.role
    with pytest.raises(codec.DecodeError):
        codec.from_data(Frame, ["f", "x.py"])  # a frame without its line field is not a frame
    assert codec.from_data(Frame, ["f", "x.py", 4]) == Frame("f", "x.py", 4)
    assert codec.from_data(Frame, {"func": "f", "file": "x.py", "line": 4}) == Frame("f", "x.py", 4)
    st = codec.from_data(Stall, {"rule": "age", "running_s": 3})
    assert st.running_s == 3.0 and isinstance(st.running_s, float)


def test_flight_recorder_state_with_any_sizes():
    fr = FrRank(1, 5, 4, (FrEntry("0", 5, "all_reduce", "nccl:all_reduce", [[1024, 8]], "scheduled"),))
    assert through_json(FrRank, fr) == FrRank(1, 5, 4, (FrEntry("0", 5, "all_reduce", "nccl:all_reduce",
                                                                 [[1024, 8]], "scheduled"),))


@pytest.mark.parametrize(("cls", "data", "msg"), [
    (ActorRow, {"actor_id": "a"}, "ActorRow.class_name is missing"),
    (Snapshot, [1, 2], "list where Snapshot was expected"),
    (Problem, {"kind": "k", "message": "m", "status": "x"}, None),  # a scalar of the wrong type passes as is
])
def test_bad_data_says_what(cls, data, msg):
    if msg is None:
        assert codec.from_data(cls, data).status == "x"
        return
    with pytest.raises(codec.DecodeError, match=msg):
        codec.from_data(cls, data)


def chain_report() -> DumpReport:
    """A chain from the driver down to a vLLM worker stuck in its own code, which is the suspect."""
    from tests.analysis.test_chains import (
        AL,
        CTL,
        JOB,
        SRV,
        controller_in_get,
        engine,
        idle_async,
        rows,
        task,
    )
    from verltop.analysis.chains import driver_task_id
    from verltop.model import ChildProc

    ctl, al, srv, drv = rows()
    run = task("0" * 16, "TaskRunner.run", CTL, driver_task_id(JOB), 10)
    gen = task("1" * 16, "AgentLoopWorker.generate_sequences", AL, run.task_id, 20)
    sgen = task("2" * 16, "vLLMHttpServer.generate", SRV, "f" * 16 + AL, 30)
    stuck = engine()
    return analyse([ctl, al, srv, drv], {CTL: [controller_in_get()] * 2, AL: [idle_async()] * 2,
                                         SRV: [idle_async()] * 2, drv.actor_id: [controller_in_get()] * 2,
                                         f"{SRV}:31": [stuck, stuck]}, 0.0,
                   children=[ChildProc(SRV, 31, 30, "VLLM::Worker_TP1")], tasks=[run, gen, sgen])


def straggler_report() -> DumpReport:
    """A rank outside its group's collective while the controller waits in ray.get, and a dead rank."""
    ranks = [row(f"a{r}", rank=r) for r in range(3)] + [row("a3", rank=3, state="DEAD", death="OOM killed"),
                                                        row("ctl", group=None, rank=None, role="controller")]
    samples = {"a0": [in_collective("all_reduce")] * 2, "a1": [in_collective("all_reduce")] * 2,
               "a2": [sleeping()] * 2, "ctl": [controller_in_get()]}
    return analyse(ranks, samples, 1.79e9)


def old_form(data: dict) -> dict:
    """A report's data as verltop wrote it when chain ends and suspects held their reason as a sentence."""
    from verltop.text.chains import end_text
    from verltop.text.suspects import suspect_reason

    report = codec.from_data(DumpReport, data)
    out = json.loads(json.dumps(data))
    for c, chain in zip(out["chains"], report.chains, strict=True):
        c["ends_in"].pop("why")
        c["ends_in"]["reason"] = end_text(chain.ends_in)
    for s, sus in zip(out["suspects"], report.suspects, strict=True):
        s.pop("why")
        s["reason"] = suspect_reason(sus)
    return out


@pytest.mark.parametrize("build", [chain_report, straggler_report])
def test_reasons_come_back_as_data_and_old_sentences_still_read(build):
    from verltop.text.dump import dump_text

    report = build()
    assert report.suspects and (report.chains or build is straggler_report)
    data = codec.to_data(report)
    assert through_json(DumpReport, report) == report
    # a recording written when reasons were sentences reads back with the same words everywhere
    old = codec.from_data(DumpReport, old_form(data))
    assert {w.kind for s in old.suspects for w in s.why} == {"said"}
    assert all(c.ends_in.why.kind == "said" for c in old.chains)
    assert dump_json(old) == dump_json(report) and dump_text(old) == dump_text(report)
