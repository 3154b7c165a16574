"""The metrics poller: a log tail read by step (longer when the last step seen is not in it), the file
logger's JSONL when the log has no console lines, ``--metrics-file``, and a new TaskRunner's own history."""

from __future__ import annotations

import json

from verl.utils.logger.aggregate_logger import concat_dict_to_str

from verltop.demo.metrics import RunMetrics
from verltop.engine import poll_training as P
from verltop.engine.monitor import Intervals, Monitor
from verltop.model import RawActor
from verltop.sources import dashboard as D
from verltop.sources.config import Endpoint


def _mon(actor_id: str = "a1") -> Monitor:
    mon = Monitor(Endpoint("http://127.0.0.1:9", "--address", None, None), Intervals(timeout_s=1), use_local=False)
    mon.src.actors.value = [RawActor(actor_id, "TaskRunner", "ALIVE", None, "n1", 10)]
    return mon


class FakeLog:
    """The worker log as the dashboard serves it: the last ``lines`` lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.asked: list[int] = []

    async def __call__(self, client, actor_id, suffix="err", lines=200, timeout_s=10.0):
        self.asked.append(lines)
        return D.Result("\n".join(self.lines[-lines:]) + "\n", None, 0.0)


async def test_log_read_by_step_and_grown_when_steps_were_missed(monkeypatch):
    log, run = FakeLog(), RunMetrics(0)
    monkeypatch.setattr(D, "fetch_log_tail", log)
    mon = _mon()
    log.lines = ["Creating file logger at /nonexistent.jsonl", "starting"]
    await mon._poll_training()
    assert mon.training_view() is None and log.asked == [P.FIRST_LINES]
    for s in range(1, 31):
        log.lines += [concat_dict_to_str(run.step(s), step=s), "(some other line)"]
    await mon._poll_training()
    assert mon.training_view().last_step == 30 and log.asked[1:] == [P.TAIL_LINES, 4 * P.TAIL_LINES]  # to step 1
    assert mon.training.lines == 120  # twice the span the history needed
    mon.training.lines = P.TAIL_LINES
    for s in range(31, 61):  # 30 steps between two polls: the 20-line tail misses some, reads 80 lines
        log.lines += [concat_dict_to_str(run.step(s), step=s), "x"]
    log.asked.clear()
    await mon._poll_training()
    t = mon.training_view()
    assert log.asked == [P.TAIL_LINES, 4 * P.TAIL_LINES]
    log.lines += ["chatter"] * 100  # output after the last step pushes its line out of the tail
    log.asked.clear()
    await mon._poll_training()
    assert log.asked[-1] >= 101 and mon.training.lines >= 202 and mon.training_view().last_step == 60
    assert [s for s, _ in t.metrics["actor/grad_norm"]] == list(range(1, 61)) and t.source == "actor_log"
    mon.src.actors.value = [RawActor("a2", "TaskRunner", "ALIVE", None, "n1", 11)]  # a new job
    log.lines = [concat_dict_to_str(run.step(1), step=1)]
    await mon._poll_training()
    assert mon.training_view().last_step == 1 and len(mon.training_view().metrics["actor/grad_norm"]) == 1


async def test_file_logger_announced_in_the_log_and_metrics_file(monkeypatch, tmp_path):
    path = tmp_path / "exp.jsonl"
    path.write_text(json.dumps({"step": 1, "data": {"actor/grad_norm": None, "critic/score/mean": 0.3}}) + "\n")
    log = FakeLog()
    log.lines = [f"Creating file logger at {path}"]
    monkeypatch.setattr(D, "fetch_log_tail", log)
    mon = _mon()
    await mon._poll_training()
    t = mon.training_view()
    assert t.source == "file" and t.last_step == 1 and [a.kind for a in t.anomalies] == ["nan"]
    mon2 = _mon()
    mon2.training.metrics_file = str(path)
    with open(path, "a") as f:
        f.write(json.dumps({"step": 2, "data": {"critic/score/mean": 0.4}}) + "\n")
    await mon2._poll_training()
    assert mon2.training_view().last_step == 2 and mon2.training_view().source == "file"
    mon3 = _mon()
    mon3.training.metrics_file = str(tmp_path / "missing.jsonl")
    await mon3._poll_training()
    assert mon3.training_view() is None and "missing.jsonl" in mon3.training.error


async def test_older_layout_reads_the_submitted_driver_log(monkeypatch):
    """No TaskRunner actor: the trainer runs in the driver; its console lines are in the driver's job log."""
    from verltop.model import RawJob

    asked: list[str] = []

    async def jobs(client, timeout_s=10.0):
        return D.Result([RawJob("01000000", "SUCCEEDED", 1, "10.0.0.1", "raysubmit_old"),
                         RawJob("02000000", "RUNNING", 2, "10.0.0.1", "raysubmit_new")], None, 0.0)

    async def job_log(client, submission_id, lines=200, timeout_s=10.0):
        asked.append(submission_id)
        return D.Result("step:1 - critic/score/mean:0.25\nstep:2 - critic/score/mean:nan\n", None, 0.0)

    monkeypatch.setattr(D, "fetch_jobs", jobs)
    monkeypatch.setattr(D, "fetch_job_log_tail", job_log)
    mon = _mon()
    mon.src.actors.value = []
    await mon._poll_training()
    t = mon.training_view()
    assert asked == ["raysubmit_new"] and t.source == "job_log" and t.actor_name == "raysubmit_new"
    assert t.last_step == 2 and [(a.step, a.kind) for a in t.anomalies] == [(2, "nan")]
