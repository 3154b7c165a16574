"""Child processes in the table: indented under their actor, opened and closed with `t`, orphans last.

The snapshot is built by the real analysis from a real /proc read of real processes (titled as vLLM's);
GPU memory comes from an NVML-like sample (no GPU here). The engine publishes that one snapshot.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable

import pytest

from tests.proc_shapes import SHAPES, spawn
from verltop.analysis.history import TaskHistory
from verltop.analysis.snapshot_build import ClusterData, build_snapshot
from verltop.engine.base import Engine
from verltop.model import ActorRow, Gpu, Node, ProcRow, RawActor, Snapshot
from verltop.sources.local import LocalSampler
from verltop.ui.app import VerltopApp
from verltop.ui.widgets import process_rows as PR
from verltop.ui.widgets.actor_table import ActorTable, layout_rows

pytest.importorskip("setproctitle")
GIB = 1 << 30


class OneSnapshot(Engine):
    """Publishes one snapshot; records what the view asks for."""

    def __init__(self, snap: Snapshot) -> None:
        super().__init__(lambda: snap.taken_at)
        self.snap = snap
        self.asked: list[list[str]] = []

    def start(self) -> None:
        self._publish(self.snap)

    async def stop(self) -> None:
        pass

    @property
    def has_data(self) -> bool:
        return True

    def connection_problem(self):
        return None

    def dump(self, *a, **k):
        raise NotImplementedError

    async def log_tail(self, *a, **k):
        return None, None

    def want_processes(self, node_ids: Iterable[str]) -> list[str]:
        self.asked.append(list(node_ids))
        return self.asked[-1]


@pytest.fixture
def cluster_snapshot():
    """A vLLM-shaped server (engine + 2 TP workers) and a trainer rank on this node, an SGLang-shaped server on
    another node (not read); TP worker 1 holds 30 GiB on GPU 1."""
    p, pids = spawn({"title": "ray::vLLMHttpServer", "children": [SHAPES["vllm"]]})
    rank, rank_pids = spawn({"title": "ray::WorkerDict"})
    try:
        root, _engine, _tp0, tp1 = pids
        tree = LocalSampler(use_nvml=False).sample_tree({root, rank_pids[0]})
        gpus = (Gpu(0, "H200", 50.0, 2 * GIB, 140 * GIB, processes=((rank_pids[0], 2 * GIB, None),)),
                Gpu(1, "H200", 90.0, 30 * GIB, 140 * GIB, processes=((tp1, 30 * GIB, None),)))
        actors = (RawActor("srv", "vLLMHttpServer", "ALIVE", "vllm_server_0_0", "n1", root),
                  RawActor("wd0", "create_colocated_worker_cls.<locals>.WorkerDict", "ALIVE", "abcdefWorkerDict_0:0",
                           "n1", rank_pids[0], env=(("RANK", "0"), ("WORLD_SIZE", "1"), ("WG_PREFIX", "abcdef"))),
                  RawActor("sgl", "SGLangHttpServer", "ALIVE", "sglang_server_0_0", "n2", 4242))
        nodes = (Node("n1", "10.0.0.1", "a", is_head=True, mem_total_bytes=64 * GIB),
                 Node("n2", "10.0.0.2", "b", mem_total_bytes=64 * GIB))
        data = ClusterData(address="x", actors=actors, nodes=nodes, local_node_ids=frozenset({"n1"}),
                           local_gpus=gpus, local_tree=tree)
        yield build_snapshot(data, TaskHistory(), tree.taken_at), pids
    finally:
        for pid in pids + rank_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        p.wait()
        rank.wait()


async def test_tree_rows_open_close_and_remote_read(cluster_snapshot):
    snap, (root, engine, tp0, tp1) = cluster_snapshot
    eng = OneSnapshot(snap)
    app = VerltopApp(eng)
    async with app.run_test(size=(160, 30)) as pilot:
        await app.show_now()
        await pilot.pause()
        t = app.screen.query_one(ActorTable)
        kids = [f"proc:srv:{pid}" for pid in (engine, tp0, tp1)]
        keys = t.keys
        i = keys.index("srv")
        assert keys[i + 1 : i + 4] == kids  # open by default: its processes hold GPU memory
        assert t.cells("srv")["role"] == "▾ rollout_server"
        assert t.cells("srv")["gpu"] == "1" and "30G" in t.cells("srv")["gpu_mem"]  # the child's GPU, summed
        rows = [t.cells(k) for k in kids]
        assert [r["role"] for r in rows] == ["└ EngineCore_DP0", "  ├ Worker_TP0", "  └ Worker_TP1"]
        assert [r["pid"] for r in rows] == [str(engine), str(tp0), str(tp1)]
        assert rows[2]["gpu"] == "1" and "30G" in rows[2]["gpu_mem"] and rows[0]["gpu_mem"].strip() == ""
        assert rows[0]["task"] == "" and rows[0]["why"] == ""
        # `t` on a child row closes the tree and puts the cursor on its actor
        t.move_cursor(t.keys.index(kids[2]))
        await pilot.press("c")
        assert not set(kids) & set(t.keys) and t.selected_key() == "srv"
        assert t.cells("srv")["role"] == "▸ rollout_server"
        await pilot.press("c")
        assert t.keys[t.keys.index("srv") + 1 : t.keys.index("srv") + 4] == kids
        # the selection line says what the process is
        t.move_cursor(t.keys.index(kids[2]))
        await pilot.pause()
        line = str(app.screen.query_one("#selection").render())
        assert "VLLM::Worker_TP1" in line and f"under vllm_server_0_0 (pid {root})" in line
        # the other node's server was not read: `t` asks the engine to read that node
        t.move_cursor(t.keys.index("sgl"))
        await pilot.press("c")
        assert eng.asked == [["n2"]]
        assert "through a probe" in str(app.screen.query_one("#message").render())
        # a group row opens or closes every tree of its group
        t.move_cursor(t.keys.index("grp:group:rollout_server"))
        await pilot.press("c")
        assert not set(kids) & set(t.keys)


def _row(aid: str, procs: tuple[ProcRow, ...]) -> ActorRow:
    return ActorRow(actor_id=aid, actor_name=aid, class_name="vLLMHttpServer", pid=1, node_id="n", node_ip="ip",
                    state="ALIVE", worker_group=None, rank=None, world_size=None, role="rollout_server",
                    roles=("rollout_server",), task=None, task_id=None, task_running_s=None, gpu_index=None,
                    gpu_util_percent=None, gpu_mem_bytes=None, gpu_mem_total_bytes=None, cpu_percent=None,
                    rss_bytes=None, host_mem_total_bytes=None, processes=procs, processes_read_at=0.0)


def _p(pid: int, ppid: int, depth: int, title: str = "x", gpu: int | None = None) -> ProcRow:
    return ProcRow(pid, ppid, title, None, None, 0 if gpu else None, gpu, depth)


def test_branches_draw_the_tree():
    procs = (_p(2, 1, 1, "a"), _p(3, 2, 2), _p(4, 3, 3), _p(5, 2, 2), _p(6, 1, 1, "b"), _p(7, 6, 2))
    assert PR.branches(procs) == ["├ ", "│ ├ ", "│ │ └ ", "│ └ ", "└ ", "  └ "]


def test_a_thousand_actors_open_only_what_fits():
    """1,000 actors with two helper processes each, and 8 rollout servers whose workers hold GPU memory:
    the servers' trees open first, then small trees until 200 child rows are open; the rest stay closed."""
    gpu_trees = [_row(f"s{i}", (_p(10, 1, 1), _p(11, 10, 2, gpu=GIB), _p(12, 10, 2, gpu=GIB))) for i in range(8)]
    small = [_row(f"r{i}", (_p(20, 1, 1), _p(21, 1, 1))) for i in range(1000)]
    snap = Snapshot(taken_at=0.0, address="x", nodes=(), actors=(*small, *gpu_trees), phase=None)
    opened = PR.default_open(snap.actors)
    assert {f"s{i}" for i in range(8)} <= opened
    assert len(opened) == 8 + (PR.OPEN_BUDGET - 24) // 2
    rows = layout_rows(snap, "group", "rank")
    assert len(rows) == 1 + 1008 + 24 + (PR.OPEN_BUDGET - 24)  # one group row, the actors, the open children
    # the user's choice wins over the default
    rows = layout_rows(snap, "group", "rank", toggled={"s0": False, "r999": True})
    keys = {r.key for r in rows}
    assert "proc:s0:11" not in keys and "proc:r999:20" in keys


def test_filter_matches_process_titles():
    import re

    a = _row("srv", (_p(2, 1, 1, "VLLM::EngineCore_DP0"),))
    b = _row("other", ())
    snap = Snapshot(taken_at=0.0, address="x", nodes=(), actors=(a, b), phase=None)
    keys = [r.key for r in layout_rows(snap, "group", "rank", re.compile("EngineCore"))]
    assert "srv" in keys and "other" not in keys


def test_orphans_group_last():
    o = ProcRow(7, 1, "VLLM::EngineCore_DP0", 0.0, 1 << 20, 0, 40 * GIB, 1, "n1", "10.0.0.1", "dead", 140 * GIB)
    dead = _row("dead", ())
    snap = Snapshot(taken_at=0.0, address="x", nodes=(), actors=(dead,), phase=None, orphans=(o,))
    rows = layout_rows(snap, "group", "rank")
    assert [r.key for r in rows[-2:]] == ["grp:orphans", "orphan:n1:7"]
    assert rows[-2].header is not None and "holding 40.0G of GPU memory" in rows[-2].header.plain
    assert rows[-1].note == "left by dead"
