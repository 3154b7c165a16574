"""DoctorJob's order of work: every alive node's probe is started at once, right after joining the cluster;
on each node the clock is read while the node's facts are collected, and the first read (which waited for the
probe to start) does not count toward the offset."""

from __future__ import annotations

import asyncio
from typing import Any

from verltop.engine import doctor as D
from verltop.model import Node
from verltop.sources import node_check
from verltop.sources.dashboard import Result
from verltop.sources.probe_connect import RayNode

IDS = ["a" * 56, "b" * 56, "c" * 56]


class Runner:
    """Records the order of the calls; a node's first read of the clock waits (for its probe, as it would)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.started: set[str] = set()
        self.collecting: dict[str, asyncio.Event] = {}

    async def connect(self, node_ids) -> None:
        self.log.append(("connect", ",".join(sorted(node_ids))))

    def start(self, node_ids) -> None:
        ids = sorted(node_ids)
        self.log.append(("start", ",".join(ids)))
        self.started.update(ids)

    @property
    def nodes(self) -> dict[str, RayNode]:
        return {nid: RayNode(nid, True, f"10.0.0.{i}", "host", None, 0.0) for i, nid in enumerate(IDS)}

    async def call(self, node_id: str, timeout_s: float, fn: Any, *args: Any) -> tuple[Any, None]:
        assert node_id in self.started
        self.log.append((fn.__name__, node_id))
        if fn is node_check.collect:
            ev = self.collecting.setdefault(node_id, asyncio.Event())
            await ev.wait()  # facts come only after the clock was read: the two run at once
            return {"versions": {}, "time": 0.0}, None
        reads = sum(1 for f, n in self.log if f == "now" and n == node_id)
        if reads == 1:
            for _ in range(5):  # the other nodes' reads tick the clock meanwhile
                await asyncio.sleep(0)
        if reads == D.CLOCK_SAMPLES + 1:
            self.collecting.setdefault(node_id, asyncio.Event()).set()
        return 1000.0, None

    async def close(self) -> None:
        self.log.append(("close", ""))


async def fake_nodes(client: Any) -> Result:
    return Result([Node(nid, f"10.0.0.{i}", "host", is_head=i == 0) for i, nid in enumerate(IDS)] +
                  [Node("d" * 56, "10.0.0.9", "gone", state="DEAD")], None, 0.0)


async def fake_profiling(client: Any) -> Result:
    return Result(False, None, 0.0)


class Client:
    class endpoint:
        address = "http://127.0.0.1:1"


def test_probes_start_at_once_and_the_clock_is_read_while_facts_are_collected(monkeypatch):
    monkeypatch.setattr(D, "fetch_nodes", fake_nodes)
    monkeypatch.setattr(D, "fetch_profiling_enabled", fake_profiling)
    seen: list[Any] = []
    against_head = D._against_head
    monkeypatch.setattr(D, "_against_head", lambda facts: (seen.extend(facts), against_head(facts))[1])
    runner = Runner()
    ticks = iter(range(10_000))
    job = D.DoctorJob(Client(), runner=runner, clock=lambda: float(next(ticks)))  # type: ignore[arg-type]
    report = asyncio.run(asyncio.wait_for(job.run(), 10))
    assert report is not None, job.problem
    log = runner.log
    first_call = next(i for i, (f, _) in enumerate(log) if f in ("collect", "now"))
    assert log[:first_call] == [("connect", ""), ("connect", ",".join(IDS)), ("start", ",".join(IDS))]
    for nid in IDS:
        mine = [f for f, n in log if n == nid]
        assert mine[:2] == ["collect", "now"] and mine.count("now") == D.CLOCK_SAMPLES + 1, mine
    assert log[-1] == ("close", "")
    # one tick each side of every read: a round trip of 1, the waiting first read (clock ticks too) left out
    assert {f.node_id: f.clock_rtt_s for f in seen} == dict.fromkeys(IDS, 1.0)
