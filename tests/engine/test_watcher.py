"""The watcher's escalations, in process against the synthetic dashboard: after the incident opened (and the
stacks were taken), the NCCL watchdog's lines appear at the collective's timeout and a rank dies; both are
added to the same incident, with no second capture."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from tests.fakeray import FakeDashboard
from tests.fakeray.cluster import ClusterConfig, FakeCluster
from tests.wait import wait_until_async
from verltop.analysis.stalls import StallSettings
from verltop.engine.monitor import Intervals, Monitor
from verltop.engine.watch import Watcher, WatchSettings
from verltop.sources.config import Endpoint


async def test_watchdog_lines_and_a_death_escalate_the_same_incident(tmp_path):
    cluster = FakeCluster(ClusterConfig(nodes=1, gpus_per_node=4, speed=4.0, profiling=True, nccl_timeout_s=20.0))
    with FakeDashboard(cluster) as fd:
        mon = Monitor(Endpoint(fd.url, "--address", None, None),
                      Intervals(actors_s=0.5, tasks_s=0.5, nodes_s=2, node_detail_s=1, timeout_s=5),
                      StallSettings(stall_after_s=6), use_local=False)
        cfg = WatchSettings(dir=tmp_path, evidence_every_s=1.0, status_every_s=0.5, clear_after_s=30, samples=2)
        lines: list[str] = []
        w = Watcher(mon, cfg, lines.append)
        stop = asyncio.Event()
        task = asyncio.create_task(w.run(stop))
        try:
            shown: list = []
            mon.subscribe(shown.append)
            # healthy snapshots first, every rank in its task: the hang is news to the watcher
            await wait_until_async(lambda: len(shown) >= 3 and sum(1 for a in shown[-1].actors if a.task) >= 4,
                                   30, "three snapshots with every rank in a task",
                                   detail=lambda: [(a.rank, a.task) for a in shown[-1].actors] if shown else None)
            cluster.set_hang(rank=1)

            def doc() -> dict:
                ps = sorted((tmp_path / "incidents").glob("*/incident.json")) if (tmp_path / "incidents").exists() else []
                return json.loads(ps[-1].read_text()) if ps else {}

            await wait_until_async(lambda: doc().get("dump") == "dump.json", 60, "the incident")
            first = doc()
            assert first["captures"]["stacks"] == 1 and [s["rank"] for s in first["suspects"]] == [1]
            assert not any(e["kind"] == "collective" for e in first["escalations"])  # no watchdog line yet
            await wait_until_async(lambda: any(e["kind"] == "collective" for e in doc()["escalations"]), 60, "the watchdog")
            esc = next(e for e in doc()["escalations"] if e["kind"] == "collective")
            assert esc["text"].startswith("NCCL watchdog on ") and esc["at"] > first["detected_at"]
            dump = json.loads(next((tmp_path / "incidents").glob("*/dump.json")).read_text())
            assert any((r["collective"] or {}).get("source") == "watchdog_log" for r in dump["ranks"])
            cluster.kill_rank(1)
            await wait_until_async(lambda: any(e["kind"] == "died" for e in doc()["escalations"]), 30, "the death")
            last = doc()
            assert "Died: " in last["summary"] and last["captures"]["stacks"] == 1  # no second py-spy run
            assert len(list((tmp_path / "incidents").iterdir())) == 1
            assert sum("INCIDENT" in ln for ln in lines) == 1 and any("NCCL watchdog on" in ln for ln in lines)
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)


class SlowProbe:
    """``ProbePool`` with the probe's transport stood in: its calls wait until ``gate`` is set (``ray.init`` into a
    cluster that does not answer waits its 15 s), then run the function here, where the node's RAS listens."""

    gate: asyncio.Event
    asked = 0

    def __init__(self, *a: object, **kw: object) -> None:
        pass

    async def call(self, node_id: str, timeout_s: float, fn, *args):
        SlowProbe.asked += 1
        await SlowProbe.gate.wait()
        return await asyncio.to_thread(fn, *args), None

    async def close(self) -> None:
        pass


async def test_the_incident_is_written_before_a_slow_ras_probe_and_ras_escalates_it(tmp_path, monkeypatch):
    from tests.fakeray import cluster as fake
    from tests.ras_server import RasServer, captured

    SlowProbe.gate, SlowProbe.asked = asyncio.Event(), 0
    monkeypatch.setattr("verltop.sources.probe.ProbePool", SlowProbe)
    with RasServer({"json": captured("default_hang10_status_json"), "text": ""}) as srv:
        # every rank says where its RAS listens; no rank is on this machine (use_local=False): RAS is asked on
        # the ranks' node through a probe
        monkeypatch.setitem(fake.JOB_ENV, "NCCL_RAS_ADDR", f"127.0.0.1:{srv.port}")
        cluster = FakeCluster(ClusterConfig(nodes=1, gpus_per_node=4, speed=4.0, profiling=True))
        with FakeDashboard(cluster) as fd:
            mon = Monitor(Endpoint(fd.url, "--address", None, None),
                          Intervals(actors_s=0.5, tasks_s=0.5, nodes_s=2, node_detail_s=1, timeout_s=5),
                          StallSettings(stall_after_s=6), use_local=False)
            cfg = WatchSettings(dir=tmp_path, evidence_every_s=600, status_every_s=0.5, clear_after_s=30, samples=1)
            lines: list[str] = []
            w = Watcher(mon, cfg, lines.append)
            stop = asyncio.Event()
            task = asyncio.create_task(w.run(stop))
            try:
                shown: list = []
                mon.subscribe(shown.append)
                await wait_until_async(lambda: len(shown) >= 3 and sum(1 for a in shown[-1].actors if a.task) >= 4,
                                       30, "three snapshots with every rank in a task")
                cluster.set_hang(rank=1)

                def doc() -> dict:
                    ps = sorted((tmp_path / "incidents").glob("*/incident.json")) if (tmp_path / "incidents").exists() else []
                    return json.loads(ps[-1].read_text()) if ps else {}

                await wait_until_async(lambda: doc().get("dump") == "dump.json", 60, "the incident")
                # written, its stacks analysed and the user told, while the probe still waits to join the cluster
                # (RAS is asked beside the dump: on a loaded machine the incident can be written first)
                await wait_until_async(lambda: SlowProbe.asked, 30, "RAS asked through the probe")
                assert SlowProbe.asked == 1 and srv.queries == 0
                first = doc()
                assert [s["rank"] for s in first["suspects"]] == [1] and sum("INCIDENT" in ln for ln in lines) == 1
                assert not any(e["kind"] == "ras" for e in first["escalations"])
                SlowProbe.gate.set()
                await wait_until_async(lambda: any(e["kind"] == "ras" for e in doc()["escalations"]), 30, "RAS's word")
                esc = next(e for e in doc()["escalations"] if e["kind"] == "ras")
                assert esc["text"].startswith("NCCL RAS, communicator 5719f456") and "never reached all_reduce #6" in \
                    esc["text"] and esc["at"] > first["detected_at"]
                dump = json.loads(next((tmp_path / "incidents").glob("*/dump.json")).read_text())
                assert any(n.startswith("NCCL RAS, communicator") for n in dump["notes"]) and srv.queries == 1
                assert len(list((tmp_path / "incidents").iterdir())) == 1 and doc()["captures"]["stacks"] == 1
                assert any("NCCL RAS, communicator" in ln for ln in lines)
            finally:
                stop.set()
                await asyncio.wait_for(task, 60)


async def test_the_dump_analysed_again_with_the_peers_failures_is_what_later_dumps_carry(tmp_path):
    """A stall's dump taken after the peers gave up (their failures not listed yet) names the straggler weakly;
    the watch analyses it again once the failures come. The engine's later dumps carry suspects from its last
    dump: it must be that second analysis, not the first (a later dump then said nothing of the straggler)."""
    from verltop.model import DumpReport

    mon = Monitor(Endpoint("http://127.0.0.1:9", "--address", None, None), Intervals(timeout_s=1), use_local=False)
    w = Watcher(mon, WatchSettings(dir=tmp_path), [].append)
    first, second = DumpReport(1.0, (), (), ()), DumpReport(2.0, (), (), ())

    class Job:  # the incident's dump, finished: its stacks are kept, and the failures read later
        report, client = first, object()

        async def read_failed(self) -> list:
            return []

        def add_failures(self, failed: list) -> DumpReport:
            self.report = second
            return second

    escalated: list = []

    async def escalated_with(inc, report, now) -> None:
        escalated.append(report)

    snap = SimpleNamespace(actors=())
    w.current, w.job = object(), Job()
    w._escalated = escalated_with
    mon.last_dump = first  # as the dump's end sets it (Monitor.dump)
    await w._peers_failed([], snap)
    assert escalated == [second] and mon.last_dump is second
    # a dump of the engine made since (another scope's, or the user's) stays the engine's last
    third = DumpReport(3.0, (), (), ())
    mon.last_dump, w.job.report = third, first
    await w._peers_failed([], snap)
    assert mon.last_dump is third
