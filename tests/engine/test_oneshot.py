"""What `verltop dump` starts py-spy on before the tasks are known: a superset of the final targets, and one
finished-task read per colocated group (rank 0 first)."""

from __future__ import annotations

from dataclasses import replace

from tests.analysis.helpers import row
from verltop.analysis.dump import dump_targets
from verltop.engine.oneshot import candidates, colocated_groups


def _rows():
    ctl = row("ctl", None, None, role="controller", task="run")
    a = [row(f"a{i}", "A", i) for i in range(3)]
    idle = replace(row("lone", None, None, role="other", task=None),
                   class_name="create_colocated_worker_cls.<locals>.WorkerDict")  # no group: its methods decide
    helper = replace(row("h", None, None, role="other", task=None), class_name="SomeHelper")
    dead = row("b0", "B", 0, state="DEAD")
    gone = row("b1", "B", 1, state="DEPENDENCIES_UNREADY")
    return ctl, a, idle, helper, dead, gone


def test_candidates_are_the_targets_and_ungrouped_colocated_workers():
    ctl, a, idle, helper, dead, gone = _rows()
    rows = (ctl, *a, idle, helper, dead, gone)
    got = {x.actor_id for x in candidates(rows, None)}
    assert got == {x.actor_id for x in dump_targets(rows, None)} | {"lone"}
    assert got == {"ctl", "a0", "a1", "a2", "lone", "b0"}  # never a helper, never an actor not yet started
    # once its methods name a role, the lone worker is a target: the superset covered it
    assert "lone" in {x.actor_id for x in dump_targets((replace(idle, role="rm"),), None)}
    # a group: that group and the controller only
    assert {x.actor_id for x in candidates(rows, "A")} == {"ctl", "a0", "a1", "a2"}


def test_one_roles_read_per_colocated_group_rank_zero_alive_first():
    ctl, a, idle, helper, dead, _ = _rows()
    b2 = row("b2", "B", 2)
    groups = colocated_groups((ctl, a[2], a[0], a[1], idle, helper, dead, b2))
    assert sorted(groups) == sorted([["a0", "a1", "a2"], ["lone"], ["b2", "b0"]])
