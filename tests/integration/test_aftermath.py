"""The root cause stays named after its first symptoms change, on a real Ray cluster running a verl worker
group (``aftermath_job.py``: two gloo ranks whose collectives time out after 3 s, and a TaskRunner):

- rank 0's ``all_reduce`` times out while rank 1 sits in ``_slow_reward_fn``: rank 0's call FAILS and its
  process lives on. ``verltop dump`` still names rank 1, with its peers' failure and its own frame; its
  snapshot row is stalled (``peers failed … ago``); the controller that caught the RayTaskError and waits
  on rank 1's result is in the chain that runs to rank 1. Also when the controller gives the batch up.
- the controller in ``my_reward_fn`` (its own code) while the ranks' calls it submitted run on: its chain
  ends in it, and it is the suspect (its stack did not move); no chain runs on to the ranks.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.job_host import JobHost
from tests.wait import wait_until, wait_until_async

pytestmark = pytest.mark.ray


class AftermathCluster(JobHost):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, "aftermath_job.py")
        self.info = self.reply(240)
        self.address = self.info["dashboard"]
        self.pids = {r["rank"]: r["pid"] for r in self.info["ranks"]}
        self.ids = {r["rank"]: r["actor_id"] for r in self.info["ranks"]}


@pytest.fixture(scope="module")
def aftermath(tmp_path_factory: pytest.TempPathFactory):
    c = AftermathCluster(tmp_path_factory.mktemp("aftermath"))
    try:
        yield c
    finally:
        c.stop()


def _rank(d: dict[str, Any], rank: int) -> dict[str, Any]:
    return next(r for r in d["ranks"] if r["rank"] == rank and r["worker_group"] and r["process"] is None)


def _stuck_dump(c: AftermathCluster, rank: int) -> dict[str, Any] | None:
    """A dump in which ``rank``'s stack did not move between its two samples, or None."""
    d = c.verltop("dump")
    return d if _rank(d, rank)["stuck"] else None


def _idle(c: AftermathCluster) -> bool:
    """Both ranks run nothing (Ray's task states come a moment after the calls end)."""
    rows = {a["actor_id"]: a for a in c.verltop("snapshot")["actors"]}
    return all(rows[c.ids[k]]["task"] is None for k in (0, 1))


def _failed(c: AftermathCluster) -> bool:
    """Rank 0's call has failed (gloo's timeout) and its process is back in its loop."""
    d = c.verltop("snapshot")
    rows = {a["actor_id"]: a for a in d["actors"]}
    row0, row1 = rows[c.ids[0]], rows[c.ids[1]]
    return row0["task"] is None and row1["task"] is not None and any(
        s["rule"] == "peers" and s["state"] == "failed" for s in row1["stalls"])


@pytest.mark.parametrize("then", ["wait", "give_up"])
def test_the_straggler_stays_named_after_its_peers_collective_failed(aftermath, then):
    c = aftermath
    wait_until(lambda: _idle(c), 30, "both ranks idle")
    c.cmd(cmd="straggle", tag=then, then=then)
    try:
        wait_until(lambda: _failed(c), 60, "rank 0's all_reduce to time out and rank 1's row to say so", step=1)
        snap = c.verltop("snapshot")
        row1 = next(a for a in snap["actors"] if a["actor_id"] == c.ids[1])
        st = next((s for s in row1["stalls"] if s["rule"] == "peers"), None)
        assert st is not None, row1
        assert st["reason"].startswith("1 peer failed in actor_rollout_act ") and "waiting for it (" in st["reason"]
        assert "Timed out waiting" in st["cause"], st
        # rank 1 polls a file every 0.1 s: on a loaded machine one of a dump's two samples can land in the
        # poll, and a stack that moved is rightly not called stuck; wait for a dump where it did not
        d = wait_until(lambda: _stuck_dump(c, 1), 60, "a dump in which rank 1's stack did not move", step=1)
        sus = d["suspects"]
        assert [(s["rank"], s["pid"]) for s in sus] == [(1, c.pids[1])], sus
        reason = sus[0]["reason"]
        assert reason.startswith(f"rank 0 of {c.info['prefix']} failed in actor_rollout_act "), reason
        assert "waiting for it (RuntimeError: " in reason and "Timed out waiting 3000ms" in reason, reason
        assert "aftermath_job.py" in reason and "_slow_reward_fn; its stack did not move" in reason, reason
        ctl = next(r for r in d["ranks"] if r["role"] == "controller")
        if then == "wait":
            # the controller caught the error and waits on rank 1's result: a waiter, its chain runs to rank 1
            assert (ctl["blocked_on"] or {}).get("op") == "ray.get", ctl["blocked_on"]
            assert "(the controller waits on it in ray.get at aftermath_job.py:" in reason, reason
            ends = [(ch["path"][-1]["pid"], [h["actor_name"] for h in ch["path"]]) for ch in d["chains"]]
            assert any(pid == c.pids[1] and "TaskRunner" in hops for pid, hops in ends), d["chains"]
        else:
            assert not (ctl["blocked_on"] or {}).get("op"), ctl["blocked_on"]
    finally:
        c.release(then)
    r = c.cmd(cmd="wait", tag=then)
    assert r["done"] and "Timed out" in r["result"]["error"], r


def test_a_controller_in_its_own_reward_function_ends_its_chain(aftermath):
    c = aftermath
    wait_until(lambda: _idle(c), 30, "both ranks idle")
    c.send(cmd="reward", tag="reward")  # the driver waits in ray.get until released
    try:
        def ready() -> dict[str, Any] | None:
            d = c.verltop("dump")
            ctl = next(r for r in d["ranks"] if r["role"] == "controller")
            frames = " ".join(f["func"] for f in ctl["stack"] or [])
            # the function polls a file every 0.1 s: on a loaded machine one of the dump's two samples can
            # land in the poll, and a stack that moved is rightly not called stuck; wait for one that did not
            return d if "my_reward_fn" in frames and ctl["stuck"] and _rank(d, 1)["task"] else None

        d = wait_until(ready, 60, "the controller in my_reward_fn, its stack not moving", step=1)
        ctl = next(r for r in d["ranks"] if r["role"] == "controller")
        for ch in d["chains"]:  # no chain passes the controller on to the ranks it will wait on
            names = [h["actor_name"] for h in ch["path"]]
            assert names[-1] == "TaskRunner" or "TaskRunner" not in names, d["chains"]
        assert [s["pid"] for s in d["suspects"]] == [ctl["pid"]], d["suspects"]
        assert "in its own code at aftermath_job.py:" in d["suspects"][0]["reason"] and \
            "my_reward_fn; its stack did not move" in d["suspects"][0]["reason"], d["suspects"]
    finally:
        c.release("reward")
        reply = c.reply(60)  # read even after a failed assertion: the next test's replies stay in step
    assert reply["score"] == 1.0


async def test_a_watch_escalates_with_the_peers_failure_and_a_later_dump_says_still(aftermath, tmp_path):
    """``watch`` from before the hang: the incident names rank 1 and is escalated with rank 0's failed
    collective (its error); then the controller goes on with rank 0 alone (it computes: no witness any more),
    and the next dump of the same engine, whose rules alone would name nobody, still names rank 1 ("still")."""
    from verltop.analysis.stalls import StallSettings
    from verltop.engine.monitor import Intervals, Monitor
    from verltop.engine.watch import Watcher, WatchSettings
    from verltop.sources.config import Endpoint, resolve_token
    from verltop.sources.pyspy import DumpOptions
    from verltop.text.suspects import suspect_reason

    c = aftermath
    await asyncio.to_thread(wait_until, lambda: _idle(c), 30, "both ranks idle")
    mon = Monitor(Endpoint(c.address, "--address", resolve_token()[0], None),
                  Intervals(actors_s=1.0, tasks_s=1.0, nodes_s=5, node_detail_s=5, timeout_s=10), StallSettings())
    lines: list[str] = []
    w = Watcher(mon, WatchSettings(dir=tmp_path / "w", samples=2, clear_after_s=300, evidence_every_s=600), lines.append)
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    tag = "watched"
    try:
        shown: list = []
        mon.subscribe(shown.append)
        await wait_until_async(lambda: len(shown) >= 2 and {c.ids[0], c.ids[1]} <= {a.actor_id for a in shown[-1].actors},
                               60, "the watch's first snapshots")
        await asyncio.to_thread(c.cmd, cmd="straggle", tag=tag, then="give_up", group="watch")

        def doc() -> dict[str, Any]:
            ps = sorted((tmp_path / "w" / "incidents").glob("*/incident.json"))
            return json.loads(ps[-1].read_text()) if ps else {}

        await wait_until_async(lambda: any(e["kind"] == "peers_failed" for e in doc().get("escalations", ())), 90,
                               "the incident, escalated with the peers' failure", detail=lambda: lines[-5:])
        d = doc()
        esc = next(e for e in d["escalations"] if e["kind"] == "peers_failed")
        assert esc["text"].startswith(f"{c.info['prefix']}:0 failed in actor_rollout_act (a collective gave up ") and \
            "Timed out waiting 3000ms" in esc["text"], esc
        assert [(s["rank"], s["pid"]) for s in d["suspects"]] == [(1, c.pids[1])], d["suspects"]
        assert f"Suspect: rank 1 of {c.info['prefix']} (pid {c.pids[1]})" in d["summary"], d["summary"]
        assert any("failed in actor_rollout_act" in ln for ln in lines), lines
        # the controller goes on: rank 0 at work in its own code, its failure no longer witnesses anything
        await asyncio.to_thread(c.cmd, cmd="go_on", tag=tag)
        await wait_until_async(lambda: next(a for a in mon.snapshot().actors if a.actor_id == c.ids[0]).task,
                               30, "rank 0 at work again")
        rep = await mon.dump(mon.snapshot(), None, DumpOptions(samples=2)).run()
        assert rep is not None
        mine = [s for s in rep.suspects if s.pid == c.pids[1]]
        assert len(mine) == 1, ("rank 1 not named by the later dump", [(s.pid, s.score, [w.kind for w in s.why])
                                for s in rep.suspects], [(r.actor.pid, r.actor.task_id, r.stuck) for r in rep.ranks])
        (s1,) = mine
        reason = suspect_reason(s1)
        assert reason.startswith("still: ") and "_slow_reward_fn" in reason, reason
        assert all(w.still for w in s1.why), s1.why
    finally:
        c.release(tag)
        stop.set()
        await asyncio.wait_for(task, 60)
    assert (await asyncio.to_thread(c.cmd, cmd="wait", tag=tag))["done"]
