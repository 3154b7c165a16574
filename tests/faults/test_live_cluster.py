"""Faults and secrets on a REAL Ray cluster: two raylets (``ray.cluster_utils.Cluster``), token auth, a
verl-shaped job whose actors carry planted secrets in their runtime env (tests/faults/live_cluster.py).

The cluster runs in its own process; verltop runs as a real CLI process, as the real TUI in a pty, and as
the TUI under Pilot in this process (which never imports ray). Tests run in file order: the destructive
ones (a rank killed, a raylet frozen, a node removed) come last.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.faults.helpers import PtyTui, screen_text, verltop
from tests.faults.live_cluster import SECRETS, TOKEN, WG_PREFIX, LiveCluster
from tests.wait import pilot_wait, wait_until
from verltop.sources.pyspy import ptrace_problem
from verltop.text.contract import dump_json

pytestmark = pytest.mark.ray

FORBIDDEN = (*SECRETS.values(), TOKEN)


def clean(text: str | bytes, where: str) -> None:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    for s in FORBIDDEN:
        assert s not in text, f"{'token' if s == TOKEN else 'secret'} leaked into {where}"


@pytest.fixture(scope="module")
def live() -> Iterator[LiveCluster]:
    c = LiveCluster()
    try:
        yield c
    finally:
        c.stop()


def get(live: LiveCluster, path: str) -> dict:
    req = urllib.request.Request(live.address + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def make_app(live: LiveCluster, interval: float = 0.5):
    from verltop.engine.monitor import Intervals
    from verltop.sources.config import Endpoint
    from verltop.ui.app import VerltopApp

    iv = Intervals(actors_s=interval, tasks_s=interval, nodes_s=1.0, node_detail_s=1.0, timeout_s=5.0)
    return VerltopApp.live(Endpoint(live.address, "--address", TOKEN, "RAY_AUTH_TOKEN"), iv, use_local=True)


def rank_rows(app) -> dict[int, object]:
    return {a.rank: a for a in (app.snapshot.actors if app.snapshot else ()) if a.worker_group == WG_PREFIX}


# ---------------------------------------------------------------------------------------------- secrets


def test_secrets_are_planted_for_real(live):
    rows = get(live, "/api/v0/actors?detail=1&limit=100")["data"]["result"]["result"]
    envs = [r["serialized_runtime_env"] for r in rows if r["state"] == "ALIVE"]
    assert len(envs) == 5 and all(SECRETS["WANDB_API_KEY"] in e for e in envs)


def test_cli_never_prints_or_saves_secrets_or_the_token(live, tmp_path):
    env = live.env()
    p = verltop("--address", live.address, "snapshot", "--json", env=env)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    doc = json.loads(p.stdout)
    ranks = sorted(a["rank"] for a in doc["actors"] if a["worker_group"] == WG_PREFIX)
    assert ranks == [0, 1, 2, 3]
    clean(p.stdout + p.stderr, "snapshot --json")
    p = verltop("--address", live.address, "snapshot", env=env)
    assert p.returncode == 0 and "fltGrp" in p.stdout
    clean(p.stdout + p.stderr, "snapshot")

    out_json, out_txt = tmp_path / "d.json", tmp_path / "d.txt"
    p = verltop("--address", live.address, "dump", "--json", "--samples", "1", "-o", str(out_json), env=env)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    doc = json.loads(p.stdout)
    assert {r["rank"] for r in doc["ranks"] if r["worker_group"] == WG_PREFIX} == {0, 1, 2, 3}
    assert all(r["error"] is None and r["stack"] for r in doc["ranks"]), [r["error"] for r in doc["ranks"]]
    clean(p.stdout + p.stderr, "dump --json")
    p = verltop("--address", live.address, "dump", "--samples", "1", "-o", str(out_txt), env=env)
    assert p.returncode == 0 and "actor_rollout_update_actor" in p.stdout
    clean(p.stdout + p.stderr, "dump")
    for f in (out_json, out_txt):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        clean(f.read_text(), f"the saved {f.name}")

    # never over an existing file without --force; with it, still mode 0600
    before = out_json.read_text()
    p = verltop("--address", live.address, "dump", "--json", "-o", str(out_json), env=env)
    assert p.returncode == 2 and "exists" in p.stderr and out_json.read_text() == before
    os.chmod(out_json, 0o644)
    p = verltop("--address", live.address, "dump", "--json", "--samples", "1", "-o", str(out_json), "--force",
                env=env)
    assert p.returncode == 0 and stat.S_IMODE(out_json.stat().st_mode) == 0o600

    # the probe path (ray.init in verltop): nothing of Ray's on stderr, its probe actors never listed
    p = verltop("--address", live.address, "dump", "--json", "--via", "probe", "--samples", "1",
                env={**env, "RAY_ADDRESS": live.info["gcs"]})
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert all(r["error"] is None for r in json.loads(p.stdout)["ranks"])
    clean(p.stdout + p.stderr, "dump --via probe")
    p = verltop("--address", live.address, "snapshot", "--json", env=env)
    assert not any("VerltopProbe" in a["class_name"] for a in json.loads(p.stdout)["actors"])


async def test_tui_never_shows_secrets(live, tmp_path, monkeypatch):
    from verltop.ui.widgets.actor_table import ActorTable

    monkeypatch.chdir(tmp_path)  # `w` writes the dump here
    app = make_app(live)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot_wait(pilot, lambda: len(rank_rows(app)) == 4, 30, what="four ranks")
        clean(screen_text(app), "the main screen")
        clean(repr(app.engine.src.actors.value), "verltop's memory (actor rows)")
        table = app.screen.query_one(ActorTable)
        rank0 = rank_rows(app)[0].actor_id
        for _ in range(len(table.keys)):
            if table.selected_actor() == rank0:
                break
            await pilot.press("j")
        await pilot.press("enter")
        assert type(app.screen).__name__ == "DetailsScreen"
        await pilot_wait(pilot, lambda: "loading" not in str(app.screen.query_one("#log").render()), 20,
                       what="the log tail")
        clean(screen_text(app), "the details screen")
        await pilot.press("o")
        await pilot_wait(pilot, lambda: "loading" not in str(app.screen.query_one("#log").render()), 20,
                       what="the stdout tail")
        clean(screen_text(app), "the details screen (stdout)")
        await pilot.press("escape")

        await pilot.press("D")
        assert type(app.screen).__name__ == "StackScreen"
        await pilot_wait(pilot, lambda: app.screen.report is not None, 60, what="the dump")
        rep = app.screen.report
        # the four ranks, the controller and the driver: every process of the job
        assert all(r.error is None for r in rep.ranks), [(r.actor.rank, r.error) for r in rep.ranks]
        assert sorted(r.actor.rank for r in rep.ranks if r.actor.rank is not None) == [0, 1, 2, 3]
        assert len([r for r in rep.ranks if r.actor.role != "driver"]) == 5
        clean(screen_text(app), "the stack screen")
        await pilot.press("enter")
        assert type(app.screen).__name__ == "RankStackScreen"
        clean(screen_text(app), "the rank stack screen")
        await pilot.press("escape")
        await pilot.press("w")
        await pilot.press("w")  # a second write never overwrites the first
        files = await pilot_wait(pilot, lambda: len(fs := sorted(tmp_path.glob("verltop-dump-*"))) >= 4 and fs, 30,
                                 "both writes' files", detail=lambda: sorted(tmp_path.glob("verltop-dump-*")))
        assert len(files) == 4, files
        for f in files:
            assert stat.S_IMODE(f.stat().st_mode) == 0o600
            clean(f.read_text(), f"the dump file {f.name}")
        await pilot.press("escape")
        await pilot.press("q")


def test_tui_process_listens_nowhere_and_runs_pyspy_only_when_asked(live, tmp_path):
    """The real `verltop` in a pty for 20 s: only outbound connections, no py-spy until `D` is pressed."""
    tui = PtyTui("--address", live.address, "--interval", "1", env=live.env(), cwd=tmp_path)
    try:
        tui.wait_output(b"fltGrp", 30)
        proc = psutil.Process(tui.proc.pid)
        dash_port = int(live.address.rsplit(":", 1)[1])
        seen_conns = 0
        t_end = time.monotonic() + 20
        while time.monotonic() < t_end:
            for c in proc.net_connections(kind="all"):
                assert c.status != psutil.CONN_LISTEN, f"verltop listens on {c.laddr}"
                if c.family in (2, 10):  # AF_INET, AF_INET6: TCP to the dashboard and nothing else
                    assert c.type == 1 and c.raddr and c.raddr.port == dash_port, c
                    seen_conns += 1
            kids = [k.name() for k in proc.children(recursive=True)]
            assert not any("py-spy" in k for k in kids), f"py-spy ran without a dump being asked: {kids}"
            time.sleep(0.25)
        assert seen_conns > 0  # the watch above did see verltop's own connections
        # positive control: ask for a dump, and py-spy does run
        tui.press("D")
        ran = False
        t_end = time.monotonic() + 20
        while not ran and time.monotonic() < t_end:
            ran = any("py-spy" in k.name() for k in proc.children(recursive=True))
            time.sleep(0.02)
        assert ran, "the watch never saw py-spy even for an asked dump"
        tui.wait_output(b"ranks dumped", 60)
        tui.press("\x1b")
        time.sleep(0.5)
    finally:
        rc = tui.quit()
    assert rc == 0, bytes(tui.out[-3000:])
    clean(bytes(tui.out), "the terminal")


# ---------------------------------------------------------------------------------------------- process faults


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_dump_without_ptrace_says_how_to_fix(live, tmp_path):
    """`verltop dump` whose py-spy runs as an unprivileged user (the kernel refuses ptrace of the root-owned
    workers): every rank carries the fix, the command exits 1 with one line, no traceback."""
    real = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    wrapper = tmp_path / "py-spy"
    wrapper.write_text(f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {real} "$@"\n')
    wrapper.chmod(0o755)
    env = live.env(PATH=f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    p = verltop("--address", live.address, "dump", "--json", "--samples", "1", "--via", "local", env=env)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1 and "no rank could be dumped" in p.stderr and "CAP_SYS_PTRACE" in p.stderr
    ranks = json.loads(p.stdout)["ranks"]
    assert len([r for r in ranks if r["role"] != "driver"]) == 5  # 4 ranks and the controller (and the driver)
    assert all(r["error"] == ptrace_problem().text for r in ranks)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
async def test_tui_dump_without_ptrace_says_how_to_fix(live, tmp_path, monkeypatch):
    """The same in the TUI: the stack screen lists every rank with the fix, and the app goes on."""
    real = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    wrapper = tmp_path / "py-spy"
    wrapper.write_text(f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    app = make_app(live)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot_wait(pilot, lambda: len(rank_rows(app)) == 4, 30, what="four ranks")
        await pilot_wait(pilot, lambda: len(app.engine.local_node_ids()) == 2, 10, what="both nodes local")
        await pilot.press("D")
        await pilot_wait(pilot, lambda: app.screen.report is not None, 60, what="the dump")
        ranks = app.screen.report.ranks
        assert len([r for r in ranks if r.actor.role != "driver"]) == 5  # 4 ranks and the controller
        assert [r.error for r in ranks] == [ptrace_problem()] * len(ranks)
        assert "CAP_SYS_PTRACE" in screen_text(app)
        await pilot.press("escape", "j", "s")
        assert type(app.screen).__name__ == "MainScreen"
        await pilot.press("q")


def _probe(live: LiveCluster, node: str, pid: int, schedule_timeout_s: float = 4.0) -> tuple[str | None, float]:
    """ProbePool.dump in a real process connected to the cluster (ray.init happens only there)."""
    import subprocess
    import sys

    code = (
        "import asyncio, json, sys, time\n"
        "from verltop.sources.probe import ProbePool\n"
        "from verltop.sources.pyspy import DumpOptions\n"
        "async def main():\n"
        f"    pool = ProbePool(DumpOptions(timeout_s=2), schedule_timeout_s={schedule_timeout_s})\n"
        "    t0 = time.monotonic()\n"
        f"    d = await pool.dump({node!r}, {pid})\n"
        "    dt = time.monotonic() - t0\n"
        "    await pool.close()\n"
        "    print(json.dumps([d.error.text if d.error else None, dt, len(d.threads)]))\n"
        "asyncio.run(main())\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**live.env(), "RAY_ADDRESS": live.info["gcs"]})
    assert p.returncode == 0, p.stderr[-2000:]
    err, dt, n = json.loads(p.stdout.strip().splitlines()[-1])
    assert (err is None) == (n > 0)
    return err, dt


def test_probe_on_a_frozen_node_times_out_with_its_reason(live):
    err, _ = _probe(live, live.nodes["second"], live.pids[2])
    assert err is None  # the probe works on that node while its raylet answers
    live.send("stop_raylet")
    try:
        err, dt = _probe(live, live.nodes["second"], live.pids[2], schedule_timeout_s=4.0)
    finally:
        live.send("cont_raylet")
    assert err == "probe actor could not be scheduled on that node (no answer)"
    assert dt < 4.0 + 2 + 3


def test_ras_read_on_another_node_through_a_probe(live):
    """RAS is job-wide: with no rank on this machine, a dump asks it on a node of ranks, through a probe there
    (a real probe actor on the second raylet; the RAS listener serves a real H200 capture, since NCCL cannot
    run on CPU)."""
    import subprocess

    from tests.ras_server import RasServer

    body = (Path(__file__).parents[1] / "fixtures" / "ras" / "run3" / "straggler_hang_status_json.out").read_text()
    code = (
        "import asyncio, json, sys\n"
        "from verltop.analysis.ras import findings\n"
        "from verltop.text.ras import finding_text\n"
        "from verltop.engine import nccl_ras\n"
        "from verltop.sources.probe import ProbePool\n"
        "from verltop.sources.pyspy import DumpOptions\n"
        "async def main():\n"
        "    pool = ProbePool(DumpOptions(timeout_s=2), schedule_timeout_s=15)\n"
        f"    rep, probs = await nccl_ras.read_remote(pool.call, [({live.nodes['second']!r}, [('127.0.0.1', PORT)])])\n"
        "    await pool.close()\n"
        "    print(json.dumps([[finding_text(f) for f in findings(rep)] if rep else None, [p.text for p in probs]]))\n"
        "asyncio.run(main())\n"
    )
    with RasServer({"json": body[body.index("{"):], "text": "unused"}) as srv:
        p = subprocess.run([sys.executable, "-c", code.replace("PORT", str(srv.port))], capture_output=True,
                           text=True, timeout=120, env={**live.env(), "RAY_ADDRESS": live.info["gcs"]})
        assert p.returncode == 0, p.stderr[-2000:]
        found, probs = json.loads(p.stdout.strip().splitlines()[-1])
        assert srv.queries >= 1 and probs == []
    assert found == ["NCCL RAS, communicator a5ed3c6f… (2 ranks): rank 1 (pid 1835 on 192.0.2.2) issued 4 "
                     "AllReduce, its peers 5 — it never reached all_reduce #5"]


async def test_actor_dies_mid_dump(live):
    """SIGKILL a rank between two samples of a dump: that rank says so, the others are reported."""
    from verltop.analysis.dump import analyse, dump_targets
    from verltop.engine.monitor import Intervals, Monitor
    from verltop.sources.config import Endpoint
    from verltop.sources.pyspy import DumpOptions
    from verltop.sources.stacks import StackCapture

    col = Monitor(Endpoint(live.address, "--address", TOKEN, "RAY_AUTH_TOKEN"), Intervals(timeout_s=5))
    try:
        await col.poll_once()
        targets = dump_targets(col.snapshot().actors)
        victim = next(a for a in targets if a.worker_group == WG_PREFIX and a.rank == 1)
        assert victim.pid == live.pids[1]
        cap = StackCapture(col.client, col.local_node_ids(), DumpOptions(samples=3, interval_s=0.5))
        assert all(cap.is_local(a) for a in targets)  # both raylets run here: py-spy reads every rank

        def progress(a, d, done, total):
            if a.actor_id == victim.actor_id and d.error is None and psutil.pid_exists(a.pid):
                os.kill(a.pid, 9)

        samples = await cap.capture(targets, progress)
        report = analyse(targets, samples, time.time())
    finally:
        await col.stop()
    by_rank = {r.actor.rank: r for r in report.ranks if r.actor.worker_group == WG_PREFIX}
    dead = by_rank[1]
    assert dead.error and "exited" in dead.error.text and "earlier sample" in dead.error.text, dead.error
    assert dead.stack  # what it was doing before it died is kept
    for r in (0, 2, 3):
        assert by_rank[r].error is None and by_rank[r].stack and by_rank[r].stuck is True
    js = dump_json(report)
    assert next(r for r in js["ranks"] if r["rank"] == 1)["error"] == dead.error.text

    # the snapshot (and the CLI) then report it DEAD with Ray's cause; the other ranks stay ALIVE
    def ranks() -> dict[int, dict]:
        p = verltop("--address", live.address, "snapshot", "--json", env=live.env())
        return {a["rank"]: a for a in json.loads(p.stdout)["actors"] if a["worker_group"] == WG_PREFIX}

    st = wait_until(lambda: (s := ranks())[1]["state"] == "DEAD" and s, 30, "rank 1 DEAD in the snapshot", step=1)
    assert st[1]["state"] == "DEAD" and st[1]["stalled"] and "DEAD" in st[1]["stall_reason"]
    assert [st[r]["state"] for r in (0, 2, 3)] == ["ALIVE"] * 3


async def test_node_leaves_the_cluster(live):
    """The second raylet goes away for real: its ranks are DEAD with Ray's reason, the rest is reported,
    a probe aimed at the gone node fails at once with the reason, and the TUI shows it all."""
    live.send("remove_node")
    def snapshot() -> dict:
        p = verltop("--address", live.address, "snapshot", "--json", env=live.env())
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    def ranks_2_3_dead() -> dict | None:
        d = snapshot()
        s = {a["rank"]: a for a in d["actors"] if a["worker_group"] == WG_PREFIX}
        return d if s[2]["state"] == s[3]["state"] == "DEAD" else None

    doc = wait_until(ranks_2_3_dead, 60, "ranks 2 and 3 DEAD in the snapshot", step=1)
    st = {a["rank"]: a for a in doc["actors"] if a["worker_group"] == WG_PREFIX}
    for r in (2, 3):
        assert st[r]["state"] == "DEAD" and "node" in st[r]["stall_reason"].lower(), st[r]
    assert st[0]["state"] == "ALIVE" and len(doc["nodes"]) == 2
    p = verltop("--address", live.address, "snapshot", env=live.env())
    assert "nodes 1 (1 dead)" in p.stdout

    # dump: the dead ranks are listed with their cause, the live ones dumped; exit 0
    p = verltop("--address", live.address, "dump", "--json", "--samples", "1", env=live.env())
    assert p.returncode == 0, p.stderr
    ranks = {r["rank"]: r for r in json.loads(p.stdout)["ranks"] if r["worker_group"] == WG_PREFIX}
    assert ranks[2]["error"].startswith("actor is DEAD") and ranks[3]["error"].startswith("actor is DEAD")
    assert ranks[0]["error"] is None and ranks[0]["stack"]

    # a probe actor cannot be scheduled on a node that is gone: the reason, at once
    err, dt = _probe(live, live.nodes["second"], live.pids[2])
    assert err.startswith("probe failed: ") and "not schedulable" in err and dt < 10, err

    app = make_app(live)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot_wait(pilot, lambda: len(rank_rows(app)) == 4, 30, what="the ranks")
        header = app.screen.query_one("#header")
        await pilot_wait(pilot, lambda: "(1 dead)" in header.text.plain, 15, what="the dead node in the header")
        rows = rank_rows(app)
        assert rows[2].state == rows[3].state == "DEAD" and rows[2].stalled
        text = screen_text(app)
        assert "DEAD" in text
        await pilot.press("q")
    await asyncio.sleep(0)
