"""``verltop doctor`` on a real three-raylet cluster (``doctor_cluster.py``) where one node's workers run with
another ``NCCL_SOCKET_IFNAME`` and read another transformers version: doctor names exactly those two
mismatches, in JSON, in text and in the TUI's nodes view; no planted secret ever shows; a node that stops
answering is given up on at the per-node timeout, and a node that leaves during the check is reported as
gone, not waited on. One cluster for the whole module, driven by its own process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from doctor_cluster import JOB_NCCL, ODD_TRANSFORMERS, SECRETS, TOKEN
from doctor_host import ROOT, DoctorCluster

from tests.wait import wait_until
from verltop.analysis.doctor_problems import PTRACE_FIXES
from verltop.text.doctor import profiling_note

pytestmark = pytest.mark.ray

FORBIDDEN = (*SECRETS, *SECRETS.values(), TOKEN)
TIMES: dict[str, float] = {}


@pytest.fixture(scope="module")
def doctor_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DoctorCluster]:
    c = DoctorCluster(tmp_path_factory.mktemp("doctor-cluster"))
    try:
        yield c
    finally:
        c.stop()
        print("\nverltop doctor on 3 raylets: " + ", ".join(f"{k} {v:.1f} s" for k, v in TIMES.items())
              + f" (cluster start {c.startup_s:.0f} s)")


def clean(text: str, where: str) -> None:
    for s in FORBIDDEN:
        assert s not in text, f"a planted secret ({s[:6]}…) leaked into {where}"


def columns(c: DoctorCluster, report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each node's JSON column by its role in the cluster (head, odd, third)."""
    by_id = {n["node_id"]: n for n in report["nodes"]}
    return {role: by_id[nid] for role, nid in c.nodes.items()}


def ptrace_problem(label: str) -> str:
    """The problem of the node where py-spy may not attach, with its fix (as a KubeRay pod without SYS_PTRACE)."""
    return (f"{label}: py-spy may not read the Ray workers' stacks there (Permission denied (os error 13)): dumps "
            f"of its ranks fail; {PTRACE_FIXES['no_cap']}")


def real_transformers() -> str:
    from importlib.metadata import version

    return version("transformers")


def test_json_names_exactly_the_planted_mismatches(doctor_cluster):
    c = doctor_cluster
    p, wall = c.doctor("--json")
    TIMES["doctor --json"] = wall
    assert p.returncode == 1, p.stderr[-3000:]
    clean(p.stdout + p.stderr, "doctor --json")
    r = json.loads(p.stdout)
    TIMES["its own elapsed_s"] = r["elapsed_s"]
    col = columns(c, r)
    odd, head, third = col["odd"]["label"], col["head"]["label"], col["third"]["label"]
    assert r["problems"] == [ptrace_problem(odd)]
    assert r["notes"] == [profiling_note(False)]  # Ray 2.60 without RAY_DASHBOARD_ENABLE_PROFILING
    assert [m["check"] for m in r["mismatches"]] == ["transformers", "env.NCCL_SOCKET_IFNAME"]
    tf, nccl = r["mismatches"]
    assert tf["values"] == {head: real_transformers(), third: real_transformers(), odd: ODD_TRANSFORMERS}
    assert tf["deviants"] == [odd] and tf["majority"] == real_transformers()
    iface = c.info["iface"]
    assert nccl["values"] == {head: iface, third: iface, odd: "lo"} and nccl["deviants"] == [odd]
    assert r["nodes"][0]["node_id"] == c.nodes["head"] and col["head"]["is_head"]
    for role, n in col.items():
        ch = n["checks"]
        assert n["error"] is None and ch["probe"] == "ok", (role, n)
        assert ch["python"] == sys.version.split()[0] and ch["ray"] == "2.60.0"
        assert ch["env.NCCL_DEBUG"] == JOB_NCCL["NCCL_DEBUG"]  # from the job's runtime env, on every node
        assert ch["env.source"].endswith(("worker", "workers")), ch["env.source"]
        assert ch["iface.NCCL_SOCKET_IFNAME"] == ("lo" if role == "odd" else iface)
        assert ch["disk.tmp_free_bytes"] > 0 and ch["disk.ray_logs_free_bytes"] > 0
        assert abs(ch["clock.offset_s"]) < 0.5  # one machine, one clock
        assert ch["nvidia.driver"] == "no NVML" or ch["gpu.count"] > 0
        assert not any(k.startswith("env.") and k[4:] in SECRETS for k in ch)
        # py-spy beside the workers' Python; on the odd node refused, as in a pod without SYS_PTRACE
        if role == "odd":
            assert ch["pyspy"] == "cannot attach (no CAP_SYS_PTRACE, ptrace_scope 1)", ch
            assert ch["ptrace"] == "no CAP_SYS_PTRACE, ptrace_scope 1"
        else:  # root on this machine: a real `py-spy dump --nonblocking` of one of the job's workers there
            assert ch["pyspy"] == "ok" and ch["ptrace"].startswith("CAP_SYS_PTRACE"), ch
    # one probe per node, in its own namespace, not detached, and removed when the check ended
    probes = wait_until(lambda: (p := [a for a in c.dashboard.rows("actors", detail="true")
                                       if a["class_name"].endswith("VerltopProbe")]) and all(a["state"] == "DEAD" for a in p)
                        and p, 15, "every probe removed", step=0.5)
    assert sorted(a["node_id"] for a in probes) == sorted(c.nodes.values()), probes
    assert all(a["ray_namespace"] == "verltop-probe" and a["is_detached"] is False and a["state"] == "DEAD"
               for a in probes), probes


def test_text_marks_the_odd_column_and_says_how_to_fix_it(doctor_cluster):
    c = doctor_cluster
    p, wall = c.doctor()
    TIMES["doctor (text)"] = wall
    assert p.returncode == 1, p.stderr[-3000:]
    clean(p.stdout + p.stderr, "doctor")
    out = p.stdout
    lines = out.splitlines()
    assert "2 mismatches, 1 problem" in lines[0]
    marked = [ln for ln in lines if " *" in ln and not ln.startswith("*")]
    assert len(marked) == 2, marked
    assert marked[0].startswith("transformers") and f"{ODD_TRANSFORMERS} *" in marked[0]
    assert marked[1].startswith("env.NCCL_SOCKET_IFNAME") and "lo *" in marked[1]
    assert "MISMATCHES (2)" in out and "PROBLEMS (1)" in out
    assert "py-spy may not read the Ray workers' stacks there (Permission denied (os error 13))" in out
    assert "securityContext.capabilities.add" in out and "kubectl debug" in out
    assert f"transformers differs: {real_transformers()} on 2 node(s), but {ODD_TRANSFORMERS} on" in out
    assert f"fix: install transformers=={real_transformers()} on every node" in out
    assert f"env.NCCL_SOCKET_IFNAME differs: {c.info['iface']} on 2 node(s), but lo on" in out
    assert "fix: set NCCL_SOCKET_IFNAME the same on every node" in out
    assert "\x1b[" not in out  # no colour into a pipe


def test_shared_directory(doctor_cluster, tmp_path):
    c = doctor_cluster
    shared = tmp_path / "shared"
    shared.mkdir()
    p, wall = c.doctor("--json", "--path", str(shared))
    TIMES["doctor --path"] = wall
    r = json.loads(p.stdout)
    assert r["problems"] == [ptrace_problem(columns(c, r)["odd"]["label"])] and r["path"] == str(shared)
    for n in r["nodes"]:
        assert n["checks"]["path.write"] == "ok" and n["checks"]["path.read_back"] == "ok (2 other nodes)"
    assert list(shared.iterdir()) == []  # every node removed its file
    p, _ = c.doctor("--json", "--path", str(tmp_path / "missing"))
    r = json.loads(p.stdout)
    assert sorted(r["problems"]) == sorted([ptrace_problem(columns(c, r)["odd"]["label"]),
                                            "every node: cannot write to the shared directory: does not exist; create it, mount the "
                                            "shared file system there, and give the Ray user write access"])
    assert [m["check"] for m in r["mismatches"]] == ["transformers", "env.NCCL_SOCKET_IFNAME"]


def test_tui_nodes_view(doctor_cluster, tmp_path):
    from tests.faults.helpers import PtyTui

    c = doctor_cluster
    tui = PtyTui("--address", c.address, env=c.env(), cwd=tmp_path, cols=200, rows=50)
    try:
        tui.wait_output(b"Quit", 60)  # the main screen's footer
        t0 = time.monotonic()
        tui.press("n")
        tui.wait_output(b"2 mismatches", 90)
        TIMES["TUI n → table"] = time.monotonic() - t0
        tui.wait_output(b"NCCL_SOCKET_IFNAME differs", 10)  # the findings, painted after the status line
        out = bytes(tui.out)
        assert ODD_TRANSFORMERS.encode() in out and b"transformers differs" in out
        clean(out.decode(errors="replace"), "the TUI")
        tui.press("\x1b")
        time.sleep(1.0)
        assert tui.proc.poll() is None
        tui.press("q")
        try:
            tui.proc.wait(30)
        except subprocess.TimeoutExpired:
            spy = subprocess.run([str(Path(sys.executable).parent / "py-spy"), "dump", "--pid", str(tui.proc.pid)],
                                 capture_output=True, text=True).stdout
            raise AssertionError(f"the TUI did not exit after q:\n{spy}") from None
    finally:
        assert tui.quit() == 0


def test_no_ray_cluster_to_join_is_one_line_exit_2(doctor_cluster):
    """The dashboard answers but the probes cannot start (this machine does not reach the cluster's GCS)."""
    c = doctor_cluster
    env = {**c.env(), "RAY_ADDRESS": "127.0.0.1:1"}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "verltop", "doctor", "--json", "--address", c.address],
                       capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    TIMES["doctor, no Ray to join (exit 2)"] = time.monotonic() - t0
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("verltop: error: cannot start the probes"), p.stderr
    assert "RAY_ADDRESS" in lines[0]
    clean(p.stderr, "the error line")


def test_a_node_that_stops_answering_is_given_up_on(doctor_cluster):
    c = doctor_cluster
    c.send("stop third")
    try:
        p, wall = c.doctor("--json", "--node-timeout", "5")
    finally:
        c.send("cont third")
    TIMES["doctor, one node silent (--node-timeout 5)"] = wall
    assert p.returncode == 1, p.stderr[-3000:]
    r = json.loads(p.stdout)
    col = columns(c, r)
    assert col["third"]["error"].startswith("no answer within 5 s"), col["third"]
    assert col["third"]["checks"]["probe"] == "no answer within 5 s"
    assert col["head"]["error"] is None and col["odd"]["error"] is None
    assert sorted(r["problems"]) == sorted([
        ptrace_problem(col["odd"]["label"]),
        f"{col['third']['label']}: could not be checked: no answer within 5 s; the node may be overloaded or its "
        "raylet hung: see `ray status` and the raylet log there"])
    assert wall < 25


def test_a_node_that_leaves_during_the_check_is_reported(doctor_cluster):
    c = doctor_cluster
    c.send("stop third")  # its probe cannot start; the node is still alive for the GCS
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "verltop", "doctor", "--json", "--address", c.address,
                             "--node-timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=c.env(), cwd=ROOT)
    try:
        # once the other two nodes' probes are up, the check is under way: now the node leaves
        def two_probes_up() -> bool:
            assert proc.poll() is None, proc.communicate()
            return len([a for a in c.dashboard.rows("actors")
                        if a["class_name"].endswith("VerltopProbe") and a["state"] == "ALIVE"]) >= 2

        wait_until(two_probes_up, 60, "two nodes' probes up", step=0.2)
        c.send("kill third")
        t_kill = time.monotonic()
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    TIMES["doctor, node leaves (kill → report)"] = time.monotonic() - t_kill
    TIMES["doctor, node leaves (total)"] = time.monotonic() - t0
    assert proc.returncode == 1, err[-3000:]
    r = json.loads(out)
    col = columns(c, r)
    assert col["third"]["error"].startswith("the node left the cluster during the check"), col["third"]
    assert col["head"]["error"] is None and col["odd"]["error"] is None
    assert len(r["problems"]) == 2 and any("could not be checked: the node left the cluster" in x
                                           for x in r["problems"])
    assert time.monotonic() - t_kill < 45  # the GCS declares it dead within seconds; not the 120 s timeout
