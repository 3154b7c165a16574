"""Pending tasks, retries and restarts per group, from real Ray 2.60 answers."""

from __future__ import annotations

import json
from pathlib import Path

from verltop.analysis.history import TaskHistory
from verltop.analysis.snapshot_build import ClusterData, build_snapshot
from verltop.engine.timeline import Work
from verltop.model import GroupWork
from verltop.sources import parse

FIX = Path(__file__).parent.parent / "fixtures" / "ray-2.60"


def load(rel: str):
    return json.loads((FIX / rel).read_text())


def test_queued_actor_calls_are_pending_in_their_group():
    tasks, _ = parse.tasks(load("E_object_store/1_tasks_detail0.json"))
    pending = [t for t in tasks if t.state not in ("RUNNING", "FINISHED", "FAILED")]
    assert len(pending) == 4 and {t.state for t in pending} == {"PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY"}
    w = Work()
    assert w.summary(pending, {}, ()) == (GroupWork("tasks", pending=4),)


def test_retries_and_restart_loops():
    tasks, _ = parse.tasks(load("C_actor_failures/final_tasks_detail0.json"))
    actors, _ = parse.actors(load("C_actor_failures/final_actors_detail1.json"))
    by_id = {a.actor_id: a for a in actors}
    w = Work()
    w.note(tasks, by_id)
    w.note(tasks, by_id)  # seen again: counted once
    snap = build_snapshot(ClusterData(address="x", actors=tuple(actors)), TaskHistory(), now=0.0)
    restarts = {a.actor_name: a.num_restarts for a in snap.actors}
    assert restarts["restart_loop_actor"] == 5 and restarts["exit_in_init_actor"] == 3
    summary = {g.group: g for g in w.summary([], by_id, snap.actors)}
    # raise_task and crash_task were retried twice each (attempts 1 and 2 are rows of their own)
    assert summary["tasks"].retries == 4
    assert sum(g.restarts for g in summary.values()) == 8
