"""What `verltop dump` starts py-spy on before the tasks are known: a superset of the final targets, and one
finished-task read per colocated group (rank 0 first)."""

from __future__ import annotations

from dataclasses import replace

from tests.analysis.helpers import row
from verltop.analysis.dump import dump_targets
from verltop.engine.oneshot_dump import candidates, colocated_groups


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


def test_dump_prefetches_exactly_the_reads_the_dump_makes(monkeypatch):
    """``verltop dump`` sends ``engine.prefetch.dump_reads`` before the engine is imported; each must be a
    read the dump then makes (else it is sent for nothing, and the dump asks again)."""
    import asyncio

    from tests.fakeray.cluster import ClusterConfig, FakeCluster
    from tests.fakeray.server import FakeDashboard
    from verltop.analysis.stalls import StallSettings
    from verltop.engine import oneshot
    from verltop.engine.monitor import Intervals
    from verltop.engine.oneshot_dump import QuickDump
    from verltop.engine.prefetch import dump_reads
    from verltop.sources.config import Endpoint
    from verltop.sources.http import DashboardClient
    from verltop.sources.pyspy import DumpOptions

    asked: set[tuple[str, tuple]] = set()
    get = DashboardClient.get

    async def recorded(self, path, params=None, timeout_s=10.0):
        asked.add((path, tuple(params or ())))
        return await get(self, path, params, timeout_s)

    monkeypatch.setattr(DashboardClient, "get", recorded)
    t = 3.0

    async def go() -> None:
        mon = oneshot.monitor(Endpoint(fd.url, "--address", None, None), Intervals(timeout_s=t), StallSettings(),
                              use_local=False)
        quick = QuickDump(mon, None, DumpOptions())
        try:
            job = await quick.prepare()
            assert job is not None and job.targets
            await job._wait_graph()
            await job._drivers()
        finally:
            quick.close()
            await mon.stop()

    with FakeDashboard(FakeCluster(ClusterConfig(nodes=1, gpus_per_node=2))) as fd:
        asyncio.run(go())
    wanted = {(p, tuple(q)) for p, q in dump_reads(t, whole_job=True)}
    assert wanted - asked == set()
    assert len(dump_reads(t, whole_job=False)) == len(wanted) - 1  # one group: no drivers to find


def test_snapshot_reads_ahead_only_what_the_snapshot_then_asks_for(monkeypatch):
    """``verltop snapshot`` sends its reads, and once the actors are in, the node details and the trainer's
    log, while the engine is imported; every read it sent ahead is one the snapshot then takes, and the two
    it follows up with are among them (a fake cluster of 2 nodes with a TaskRunner)."""
    import asyncio

    from tests.fakeray.cluster import ClusterConfig, FakeCluster
    from tests.fakeray.server import FakeDashboard
    from tests.wait import wait_until
    from verltop.analysis.stalls import StallSettings
    from verltop.engine import oneshot
    from verltop.engine.monitor import Intervals
    from verltop.engine.prefetch import prefetch_snapshot
    from verltop.sources import reads
    from verltop.sources.config import Endpoint

    t = 3.0
    cluster = FakeCluster(ClusterConfig(nodes=2, gpus_per_node=2))
    with FakeDashboard(cluster) as fd:
        endpoint = Endpoint(fd.url, "--address", None, None)
        pre = prefetch_snapshot(endpoint, t)
        ahead = {(p, tuple(q)) for p, q in (reads.node_detail(n.node_id) for n in cluster.nodes)}
        wait_until(lambda: ahead <= set(pre._futures), 10, "the node details read ahead once the actors are in")
        sent = set(pre._futures)
        assert any(p == "/api/v0/logs/file" for p, _ in sent)  # the TaskRunner's log (its metrics)
        missed: list[tuple[str, tuple]] = []  # reads the snapshot had to make itself, after the engine's import
        take = pre.take

        def counted(path, params):
            fut = take(path, params)
            if fut is None:
                missed.append((path, tuple(params or ())))
            return fut

        pre.take = counted  # type: ignore[method-assign]

        async def go() -> None:
            mon = oneshot.monitor(endpoint, Intervals(timeout_s=t), StallSettings(), use_local=False, prefetch=pre)
            snap = await oneshot.snapshot(mon)
            assert snap.actors and snap.training is not None  # the trainer's metrics, from its log

        asyncio.run(go())
    assert pre._futures == {}, f"read ahead and never asked for: {sorted(pre._futures)}"
    assert missed == [], f"read only once the engine was up: {missed}"
