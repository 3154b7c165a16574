"""``verltop watch``'s memory incidents, in process: an ``oom`` incident at once for each new OOM verdict (once,
naming the rank, its phase, step and lead-up, its waiting peers as waiters), and a ``memory`` incident for a rank
whose forecast is ``--memory-steps`` steps or fewer, or that has less than 5 % of its limit left, closed once clear
for ``--clear-after``."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from tests.analysis.helpers import row
from verltop.engine.watch_memory import MemoryIncidents
from verltop.model import Snapshot
from verltop.model.memory import Headroom, MemoryGrowth, MemoryView, OomVerdict, PhaseMemory

GIB, MIB = 1 << 30, 1 << 20


class FakeWatcher:
    """What MemoryIncidents uses of the watcher."""

    def __init__(self, d: Path) -> None:
        self.cfg = SimpleNamespace(dir=d, clear_after_s=10.0, before_s=60.0)
        self.recorder = None
        self.incidents: deque[str] = deque()
        self.told: list[tuple[str, str]] = []
        self.said: list[str] = []
        self.coros: list = []

    def _spawn(self, coro) -> None:
        self.coros.append(coro)

    def _notify(self, inc) -> None:
        self.told.append((inc.kind, inc.summary))

    def say(self, line: str) -> None:
        self.said.append(line)

    async def settle(self) -> None:
        while self.coros:
            await self.coros.pop(0)


def verdict() -> OomVerdict:
    lead = tuple(PhaseMemory("wg", "actor_rollout", 1, "wgWorkerDict_0:1", "a1", s, "update_actor", 40 * GIB + s * GIB,
                             None, 5) for s in (5, 6, 7))
    g = MemoryGrowth("wg", "actor_rollout", 1, "wgWorkerDict_0:1", "a1", "update_actor", "gpu", 1.0 * GIB, 5, 0.0)
    return OomVerdict("wg", "actor_rollout", 1, "wgWorkerDict_0:1", "a1", 4242, "gpu", "task_error", 100.0, 7,
                      "update_actor", "actor_rollout_update_actor", "CUDA out of memory. Tried to allocate 2.00 GiB",
                      lead, g, ((0, 41 * GIB),))


def snap(at: float, memory: MemoryView) -> Snapshot:
    actors = (row("a0", rank=0), replace(row("a1", rank=1, task=None), pid=4242))
    return Snapshot(at, "http://x", (), actors, "update_actor", memory=memory)


def headroom(steps: float | None, peak: int, limit: int = 80 * GIB) -> Headroom:
    return Headroom("wg", "actor_rollout", 1, "wgWorkerDict_0:1", "a1", "gpu", peak, limit, "gpu_total", steps)


async def test_an_oom_verdict_opens_one_incident_at_once(tmp_path):
    w = FakeWatcher(tmp_path)
    m = MemoryIncidents(w)
    for t in (101.0, 102.0):  # the same verdict in the next snapshot is the same OOM
        m.update(snap(t, MemoryView(oom=(verdict(),))))
        await w.settle()
    (inc,) = (tmp_path / "incidents").iterdir()
    doc = json.loads((inc / "incident.json").read_text())
    assert doc["kind"] == "oom" and [(s["rank"], s["worker_group"]) for s in doc["suspects"]] == [(1, "wg")]
    assert (doc["oom"]["step"], doc["oom"]["phase"], doc["oom"]["how"]) == (7, "update_actor", "task_error")
    assert doc["waiting"] == [{"worker_group": "wg", "rank": 0, "actor_name": "wgWorkerDict_0:0",
                               "task": "actor_rollout_update_actor"}]
    assert doc["memory"]["oom"][0]["lead_up"][-1]["step"] == 7
    summary = (inc / "summary.txt").read_text()
    assert summary.startswith("OOM: rank 1 of wg (pid 4242) ran out of GPU memory in update_actor at step 7 (CUDA out "
                              "of memory. Tried to allocate 2.00 GiB); its call raised torch's OutOfMemoryError. "
                              "lead-up: its peak GPU memory in update_actor: s5 45.0G, s6 46.0G, s7 47.0G; it kept "
                              "+1.0G per step in update_actor over 5 steps (peers +0B per step); peers' peaks there: "
                              "rank 0 41.0G"), summary
    assert "Rank 0 of wg still runs actor_rollout_update_actor: waiting for it (waiters, not suspects)." in summary
    assert [k for k, _ in w.told] == ["oom"] and list(w.incidents) == [inc.name]
    assert oct(inc.stat().st_mode & 0o777) == "0o700" and oct((inc / "incident.json").stat().st_mode & 0o777) == "0o600"


async def test_low_headroom_opens_a_memory_incident_until_it_clears(tmp_path):
    w = FakeWatcher(tmp_path)
    m = MemoryIncidents(w, memory_steps=10)
    assert m.low_headroom(headroom(8.0, 60 * GIB)) and m.low_headroom(headroom(None, 77 * GIB))
    assert not m.low_headroom(headroom(12.0, 60 * GIB)) and not m.low_headroom(headroom(None, 60 * GIB))
    growth = MemoryGrowth("wg", "actor_rollout", 1, "x", "a1", "update_actor", "gpu", 2.5 * GIB, 6, 0.0)
    m.update(snap(100.0, MemoryView(headroom=(headroom(8.0, 60 * GIB),), growth=(growth,))))
    await w.settle()
    m.update(snap(101.0, MemoryView(headroom=(headroom(7.0, 62 * GIB),))))  # still low: the same incident
    await w.settle()
    (inc,) = (tmp_path / "incidents").iterdir()
    doc = json.loads((inc / "incident.json").read_text())
    assert doc["kind"] == "memory" and doc["headroom"]["steps_to_limit"] == 8.0 and doc["closed_at"] is None
    assert doc["summary"] == ("Memory: rank 1 of wg has 8.0 steps left before its GPU memory limit (peak 60.0G of "
                              "80.0G, gpu_total; +2.5G per step in update_actor; the line: 10 steps or 5 % free)."), doc
    m.update(snap(105.0, MemoryView(headroom=(headroom(40.0, 30 * GIB),))))  # clear, not for long enough yet
    await w.settle()
    m.update(snap(116.0, MemoryView(headroom=(headroom(40.0, 30 * GIB),))))
    await w.settle()
    assert json.loads((inc / "incident.json").read_text())["closed_at"] == 116.0
    assert [k for k, _ in w.told] == ["memory"] and w.said and "over" in w.said[-1]



def test_the_main_screen_and_snapshot_mark_the_rank_that_ran_out():
    from verltop.text.snapshot import snapshot_text
    from verltop.ui.widgets.actor_table import layout_rows

    s = snap(101.0, MemoryView(oom=(verdict(),)))
    marks = {r.actor.rank: r.mark for r in layout_rows(s, "group", "rank") if r.actor is not None}
    assert marks == {0: "", 1: "▶ OOM (GPU) update_actor s7"}
    text = snapshot_text(s)
    assert "OOM: rank 1 of wg (pid 4242) ran out of GPU memory in update_actor at step 7" in text
    assert "OOM (GPU) update_actor s7" in text.splitlines()[-1], text


def test_a_group_call_running_on_fewer_ranks_than_the_group_has_is_read_for_failures():
    from verltop.engine.poll_tasks import short_handed
    from verltop.model import RawActor, RawTask

    def actor(aid: str, rank: int) -> RawActor:
        return RawActor(actor_id=aid, name=f"wgWorkerDict_0:{rank}",
                        class_name="create_colocated_worker_cls.<locals>.WorkerDict", state="ALIVE", pid=1,
                        node_id="n1", job_id="01000000")

    actors = {a.actor_id: a for a in (actor("a0", 0), actor("a1", 1))}
    task = RawTask(task_id="t0", name="WorkerDict.actor_rollout_update_actor", func_name="x", state="RUNNING",
                   actor_id="a0", node_id="n1", worker_pid=1, start_time_ms=1000, end_time_ms=None)
    one = [("t0", "a0", "wg", "actor_rollout_update_actor", 1.0)]
    assert short_handed(one, actors, {"t0": task}) == {"actor_rollout_update_actor": task.name}
    both = [*one, ("t1", "a1", "wg", "actor_rollout_update_actor", 1.0)]
    assert short_handed(both, actors, {"t0": task}) == {}


def test_a_rank_whose_worker_log_says_cuda_ran_out_gets_a_verdict():
    from verltop.analysis.history import TaskHistory
    from verltop.engine.oom_book import OomBook
    from verltop.model import RawActor

    cause = "The actor died unexpectedly: Worker unexpectedly exits with a connection error code 2. End of file."
    raw = RawActor(actor_id="a1", name="wgWorkerDict_0:1", class_name="create_colocated_worker_cls.<locals>.WorkerDict",
                   state="DEAD", pid=7, node_id="n1", death_cause=cause, death_text=cause)
    book = OomBook()
    assert book.to_read([raw]) == [raw] and book.to_read([raw]) == []  # each dead rank's log once
    log = ("Traceback (most recent call last):\n  File \"x.py\", line 3, in update_actor\n"
           "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB\n")
    assert book.note_death(raw, log)
    hist = TaskHistory()
    hist.remember_method("a1", "actor_rollout_update_actor")
    rows = (row("a0", rank=0), replace(row("a1", rank=1, task=None, state="DEAD"), death_text=cause))
    m = book.view(MemoryView(), rows, hist, (), 50.0)
    (v,) = m.oom
    assert (v.rank, v.how, v.kind, v.phase, v.message) == (1, "worker_log", "gpu", "update_actor",
                                                            "CUDA out of memory. Tried to allocate 512.00 MiB")
    assert not book.note_death(raw, "ValueError: bad reward")


def test_a_rank_that_ran_out_and_runs_on_is_no_longer_marked():
    from verltop.ui.widgets.actor_table import layout_rows

    v = verdict()  # at 100.0
    again = replace(row("a1", rank=1, task="actor_rollout_generate_sequences"), task_start_s=130.0)
    s = replace(snap(140.0, MemoryView(oom=(v,))), actors=(row("a0", rank=0), again))
    assert all(not r.mark for r in layout_rows(s, "group", "rank") if r.actor is not None)
    same = replace(again, task="actor_rollout_update_actor", task_start_s=90.0)  # the call that ran out
    s = replace(s, actors=(row("a0", rank=0), same))
    assert [r.mark for r in layout_rows(s, "group", "rank") if r.actor is not None and r.actor.rank == 1] == [
        "▶ OOM (GPU) update_actor s7"]


async def test_ooms_from_before_the_watch_began_are_old_news(tmp_path):
    w = FakeWatcher(tmp_path)
    m = MemoryIncidents(w)
    dead = replace(row("a2", rank=2, task=None, state="DEAD"), death_text="x")
    old_call = replace(verdict(), at=10.0)  # 90 s before the first snapshot
    old_death = replace(verdict(), actor_id="a2", rank=2, how="worker_log", at=100.0)
    s = replace(snap(100.0, MemoryView(oom=(old_call, old_death))), actors=(*snap(0, MemoryView()).actors, dead))
    m.update(s)
    await w.settle()
    assert not (tmp_path / "incidents").exists() and not w.told
    m.update(replace(s, taken_at=130.0, memory=MemoryView(oom=(old_call, old_death, replace(verdict(), at=125.0)))))
    await w.settle()
    assert [k for k, _ in w.told] == ["oom"]
