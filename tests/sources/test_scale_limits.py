"""Past one rack: a node that does not answer costs one timeout and is named; Ray's caps on task lists (its
10,000-row limit, task events its GCS dropped) give a clear line and never a wrong answer."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace

from tests.analysis.helpers import row
from verltop.model import Problem
from verltop.sources import dashboard as D
from verltop.sources import parse
from verltop.sources.http import Reply
from verltop.sources.pyspy import DumpOptions
from verltop.sources.stacks import PER_NODE, StackCapture

PYSPY_TEXT = 'Thread 1 (idle): "MainThread"\n    wait (threading.py:320)\n'


class Agents:
    """The dashboard's relay to each node's agent: every node answers after ``latency_s``; ``dead`` ones time out
    (after ``timeout_s``, as the HTTP client would say)."""

    def __init__(self, latency_s: float, dead: set[str], timeout_s: float) -> None:
        self.latency_s, self.dead, self.timeout_s = latency_s, dead, timeout_s
        self.calls: dict[str, int] = {}
        self.inflight: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    async def get(self, path: str, params: list[tuple[str, str]] | None = None, timeout_s: float = 10.0) -> Reply:
        node = dict(params or [])["node_id"]
        self.calls[node] = self.calls.get(node, 0) + 1
        self.inflight[node] = self.inflight.get(node, 0) + 1
        self.peak[node] = max(self.peak.get(node, 0), self.inflight[node])
        try:
            if node in self.dead:
                await asyncio.sleep(self.timeout_s)
                return Reply(None, None, Problem("timeout", f"dashboard did not answer within {timeout_s:g} s"),
                             self.timeout_s)
            await asyncio.sleep(self.latency_s)
            return Reply(200, PYSPY_TEXT.encode(), None, self.latency_s)
        finally:
            self.inflight[node] -= 1


def ranks(nodes: int, per_node: int) -> list:
    return [replace(row(f"a{n}-{i}", "wg", n * per_node + i, pid=1000 + i), node_id=f"node{n}",
                    node_ip=f"10.0.{n}.1") for n in range(nodes) for i in range(per_node)]


def test_a_dead_node_costs_one_timeout_and_is_named():
    agents = Agents(0.01, {"node3"}, timeout_s=0.5)
    targets = ranks(8, 2 * PER_NODE)  # more ranks on each node than its cap: the dead one's wait in line
    cap = StackCapture(agents, frozenset(), DumpOptions(samples=1, via="dashboard"))  # type: ignore[arg-type]
    t0 = time.monotonic()
    out = asyncio.run(cap.capture(targets))
    took = time.monotonic() - t0
    assert took < 0.5 + 0.5, took  # one timeout (the second batch there is not asked), the rest in parallel
    assert agents.calls["node3"] == PER_NODE and max(agents.peak.values()) == PER_NODE
    dead = [out[a.actor_id][0] for a in targets if a.node_id == "node3"]
    assert all(d.error is not None for d in dead)
    assert {d.error.kind for d in dead} == {"timeout", "node_silent"}
    assert all(out[a.actor_id][0].error is None for a in targets if a.node_id != "node3")
    assert cap.notes == [f"node 10.0.3.1: no stack from {2 * PER_NODE} process(es) there (no answer within 10 s)"]


def test_nodes_silent_for_one_reason_share_one_line():
    """Six nodes that do not answer: one line names the first four and counts the rest, not six lines that say
    the same (a whole cluster whose probes cannot start made a wall of text)."""
    dead = {f"node{n}" for n in (1, 2, 3, 5, 6, 7)}
    agents = Agents(0.01, dead, timeout_s=0.3)
    cap = StackCapture(agents, frozenset(), DumpOptions(samples=1, via="dashboard"))  # type: ignore[arg-type]
    asyncio.run(cap.capture(ranks(12, 2)))
    assert cap.notes == ["6 nodes (10.0.1.1, 10.0.2.1, 10.0.3.1, 10.0.5.1 and 2 more): no stack from 12 processes "
                         "there (no answer within 10 s)"], cap.notes
    agents = Agents(0.01, {"node2", "node10", "node11"}, timeout_s=0.3)  # named in the addresses' order
    cap = StackCapture(agents, frozenset(), DumpOptions(samples=1, via="dashboard"))  # type: ignore[arg-type]
    asyncio.run(cap.capture(ranks(12, 2)))
    assert cap.notes[0].startswith("3 nodes (10.0.2.1, 10.0.10.1, 10.0.11.1): "), cap.notes


def test_1024_ranks_on_128_nodes_fan_out_in_parallel():
    agents = Agents(0.05, set(), timeout_s=1.0)
    targets = ranks(128, 8)
    cap = StackCapture(agents, frozenset(), DumpOptions(samples=1, via="dashboard"))  # type: ignore[arg-type]
    t0 = time.monotonic()
    out = asyncio.run(cap.capture(targets))
    assert time.monotonic() - t0 < 3.0  # 1,024 relayed dumps of 50 ms each: nodes side by side
    assert len(out) == 1024 and all(v[0].error is None for v in out.values()) and cap.notes == []


def _doc(rows: int, total: int, after: int) -> dict:
    return {"result": True, "msg": "", "data": {"result": {
        "result": [{"task_id": f"t{i}", "state": "RUNNING", "name": "f", "func_or_class_name": "f",
                    "type": "NORMAL_TASK"} for i in range(rows)],
        "total": total, "num_after_truncation": after, "num_filtered": rows}}}


def test_task_events_dropped_by_the_gcs_are_a_line_not_a_cut_list():
    doc = json.loads(json.dumps(_doc(500, 150_500, 500)))
    rows, lr = parse.tasks(doc)
    assert len(rows) == 500 and not lr.truncated and lr.dropped == 150_000
    note = D._trunc_note("tasks", lr)
    assert note is not None and note.startswith("Ray dropped the events of 150,000 tasks")
    # the list is still all Ray holds: running tasks missing from it have ended
    assert D.complete(D.Result(rows, None, 0.0, truncated=note))


def test_more_than_10000_running_tasks_is_a_cut_list():
    rows, lr = parse.tasks(_doc(10_000, 12_000, 10_000))
    assert lr.truncated and lr.dropped == 0
    note = D._trunc_note("tasks", lr)
    assert note == "tasks: Ray returned 12000 rows but only the first 10000 (its limit)"
    assert not D.complete(D.Result(rows, None, 0.0, truncated=note))  # a task missing from it may still run
