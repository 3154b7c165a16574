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

from pathlib import Path
from typing import Any

import pytest

from tests.integration.job_host import JobHost
from tests.wait import wait_until

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
        d = c.verltop("dump")
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
            return d if "my_reward_fn" in frames and _rank(d, 1)["task"] else None

        d = wait_until(ready, 60, "the controller in my_reward_fn", step=1)
        ctl = next(r for r in d["ranks"] if r["role"] == "controller")
        for ch in d["chains"]:  # no chain passes the controller on to the ranks it will wait on
            names = [h["actor_name"] for h in ch["path"]]
            assert names[-1] == "TaskRunner" or "TaskRunner" not in names, d["chains"]
        assert [s["pid"] for s in d["suspects"]] == [ctl["pid"]], d["suspects"]
        assert "in its own code at aftermath_job.py:" in d["suspects"][0]["reason"] and \
            "my_reward_fn; its stack did not move" in d["suspects"][0]["reason"], d["suspects"]
    finally:
        c.release("reward")
    assert c.reply(60)["score"] == 1.0
