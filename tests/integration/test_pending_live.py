"""Jobs stuck before their first step, on a real local Ray cluster (``pending_job.py``: real verl
``RayResourcePool`` / ``RayWorkerGroup`` in driver processes): a pool that cannot be placed shows as a pending
placement group with its demand and the node's capacity, within one poll; an actor whose runtime env cannot
be built says why in its row; a pool waiting for another job's resources is placed once they are released
(its line goes, its workers appear).

One cluster for the module (2 CPUs, ~15 s to start); it runs before the demo's cluster (see conftest).
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.wait import pilot_wait, wait_until

pytestmark = pytest.mark.ray

HERE = Path(__file__).resolve().parent


class PendingCluster:
    """The pytest side of ``pending_job.py host``."""

    def __init__(self, log: Path) -> None:
        self.token = secrets.token_hex(32)
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token,
                   PYTHONPATH=os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p))
        self.env = env
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, str(HERE / "pending_job.py"), "host"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, text=True,
                                     start_new_session=True)
        self._replies: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        first = self._reply(180)
        assert first.get("ok"), first.get("error")
        self.address: str = first["dashboard"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._replies.put(line)
        self._replies.put("")

    def _reply(self, timeout: float) -> dict[str, Any]:
        line = self._replies.get(timeout=timeout)
        assert line, f"pending_job host exited (rc={self.proc.poll()}; log: {self.log.name})"
        return json.loads(line)

    def cmd(self, cmd: str, timeout: float = 90, **kw: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()
        r = self._reply(timeout)
        assert r.get("ok"), r.get("error")
        return r

    def verltop(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        exe = Path(sys.executable).parent / "verltop"
        return subprocess.run([str(exe), *args, "--address", self.address, "--no-local"], capture_output=True,
                              text=True, timeout=timeout, env=self.env)

    def snapshot(self) -> dict[str, Any]:
        p = self.verltop("snapshot", "--json", "--cpu-window", "0")
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    def stop(self) -> None:
        try:
            if self.proc.poll() is None and self.proc.stdin is not None:
                self.proc.stdin.write(json.dumps({"cmd": "stop"}) + "\n")
                self.proc.stdin.close()
            self.proc.wait(timeout=90)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def pending_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PendingCluster]:
    c = PendingCluster(tmp_path_factory.mktemp("pending-cluster") / "host.log")
    try:
        yield c
    finally:
        c.stop()


def test_unplaceable_pool_and_broken_env(pending_cluster: PendingCluster) -> None:
    c = pending_cluster
    c.cmd("infeasible")
    c.cmd("broken_env")

    def big() -> dict[str, Any] | None:
        snap = c.snapshot()  # one poll, as a user runs it
        return next((p for p in snap["pending"] if p["name"] == "bigverl_group_2:0"), None)

    pg = wait_until(big, 30, "the pool's placement group in a snapshot", step=0.5)
    assert (pg["kind"], pg["state"], pg["scheduling_state"], pg["worker_group"]) == (
        "placement_group", "PENDING", "INFEASIBLE", "big")
    assert pg["demand"] == [{"CPU": 10.0}, {"CPU": 10.0}] and pg["waiting_s"] >= 0
    # the demand against the node's 2 CPUs (free counts and strategy come with the autoscaler's status)
    assert pg["reason"].endswith(": 2 CPU) — infeasible") or pg["reason"].endswith(": 2 CPU, 2 free) — infeasible")
    # the autoscaler's status (which has the strategy and what is free) is written every few seconds
    pg = wait_until(lambda: (p := big()) and p["strategy"] and p, 30, "the strategy from /api/cluster_status", step=0.5)
    assert pg["strategy"] == "STRICT_PACK"
    node_ip = c.snapshot()["nodes"][0]["ip"]
    assert pg["reason"] == (f"2 bundles × {{CPU: 10}} STRICT_PACK: no node has 20 CPU for all bundles together "
                            f"(node {node_ip}: 2 CPU, 2 free) — infeasible")

    def broken() -> dict[str, Any] | None:
        snap = c.snapshot()
        a = next((a for a in snap["actors"] if a["actor_name"] == "broken_env_actor"), None)
        return a if a and a["state"] == "DEAD" else None

    a = wait_until(broken, 60, "the broken-env actor to die", step=0.5)
    assert a["stalled"] and a["stalls"][0]["rule"] == "cannot_start"
    assert a["stall_reason"] == "cannot start: ValueError: Could not find Conda executable at conda."
    text = c.verltop("snapshot").stdout
    assert "PENDING (not placed by Ray yet)" in text and "bigverl_group_2:0" in text
    assert "STALLED: cannot start: ValueError: Could not find Conda executable at conda." in text
    # the controller waits in ray.get on workers that do not exist yet: its wait chain ends in the placement
    # group, and that is the suspect
    d = c.verltop("dump", "--json", "--samples", "1")
    assert d.returncode == 0, d.stderr
    rep = json.loads(d.stdout)
    top = rep["suspects"][0]
    assert top["placement_group_id"] == pg["id"] and top["actor_id"] is None, rep["suspects"]
    # (the frame is the job's own code that called verl: RayWorkerGroup(...) → get_placement_groups → ray.get)
    assert top["reason"].startswith("the controller waits in ray.get (pending_job.py:")
    assert "bigverl_group_2:0 (worker group big) is not placed" in top["reason"]
    chain = rep["chains"][0]
    assert chain["ends_in"]["placement_group_id"] == pg["id"] and chain["ends_in"]["pid"] is None
    assert chain["path"][-1]["actor_name"] == "task_runner" and "no node has 20 CPU" in chain["ends_in"]["reason"]


async def test_pool_placed_once_the_other_job_releases(pending_cluster: PendingCluster) -> None:
    from verltop.engine.monitor import Intervals
    from verltop.sources.config import Endpoint
    from verltop.ui.app import VerltopApp
    from verltop.ui.widgets.actor_table import ActorTable

    c = pending_cluster
    c.cmd("hold", timeout=120)
    c.cmd("job2")

    def job2_pg() -> dict[str, Any] | None:
        return next((p for p in c.snapshot()["pending"] if p["name"] == "job2verl_group_2:0"), None)

    pg = wait_until(job2_pg, 60, "job 2's placement group", step=0.5)
    assert pg["scheduling_state"] == "NO_RESOURCES" and pg["reason"].endswith("— waits for resources held by others")
    # job 2's driver waits in its main thread, in verl's ray.get: the dump reads it (a driver on this node)
    # and its chain ends in job 2's placement group, not in the other job's
    rep = json.loads(c.verltop("dump", "--json", "--samples", "1").stdout)
    ends = {ch["ends_in"]["placement_group_id"]: ch for ch in rep["chains"] if ch["ends_in"]["placement_group_id"]}
    assert pg["id"] in ends, rep["chains"]
    assert ends[pg["id"]]["path"][-1]["actor_id"] is None  # the driver
    assert "waits in ray.get at pending_job.py:" in ends[pg["id"]]["ends_in"]["reason"]
    iv = Intervals(actors_s=1.0, tasks_s=1.0, nodes_s=15.0, node_detail_s=5.0, timeout_s=10.0)
    app = VerltopApp.live(Endpoint(c.address, "--address", c.token, "RAY_AUTH_TOKEN"), iv, use_local=False)
    async with app.run_test(size=(200, 50)) as pilot:
        t = app.screen.query_one(ActorTable)

        def job2_line() -> str | None:
            snap = app.snapshot
            p = next((p for p in (snap.pending if snap else ()) if p.name == "job2verl_group_2:0"), None)
            return f"pend:placement_group:{p.id}" if p is not None and f"pend:placement_group:{p.id}" in t.keys \
                else None

        key = await pilot_wait(pilot, job2_line, 60, "job 2's placement group on screen", step=0.25)
        line = t.cells(key)["pending"]
        assert "NO_RESOURCES" in line and "2 bundles × {CPU: 1}" in line
        assert any(k.startswith("grp:group:holdwg") for k in t.keys)
        c.cmd("release")
        await pilot_wait(pilot, lambda: key not in t.keys, 30, "the pending line to go", step=0.25)
        def job2_alive() -> list[Any]:
            return [a for a in (app.snapshot.actors if app.snapshot else ())
                    if a.worker_group == "job2wg" and a.state == "ALIVE"]

        # the two workers come up one poll apart at times: wait for both, then for their rows
        rows = await pilot_wait(pilot, lambda: len(job2_alive()) == 2 and job2_alive(), 60, "both of job 2's workers", step=0.25)
        await pilot_wait(pilot, lambda: all(r.actor_id in t.keys for r in rows), 10, "job 2's rows on screen", step=0.25)
        assert c.cmd("wait_job2")["ready"]
        await pilot.press("q")
