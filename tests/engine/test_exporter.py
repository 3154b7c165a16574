"""``verltop watch --metrics-port``'s metrics: what a snapshot exports, the labels kept bounded, a scrape's cost
at 1,024 ranks, the HTTP endpoint (real aiohttp server, real GETs), promtool's check of the exposition, and the
rollout servers' load read from a real HTTP server found through /proc."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.analysis.helpers import row
from tests.engine.helpers import synthetic_snapshots
from tests.wait import wait_until_async
from verltop.engine.exporter import Exporter, exposition, registry, serve, training_metric, training_name
from verltop.engine.rollout_load import LOOPBACK, OTHER_NODE, RolloutWatch
from verltop.model import PhaseRun, RawActor, RolloutLoad, Snapshot, Stall, Step

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "rollout"
PROMTOOL = shutil.which("promtool")
INSTALL = "apt-get install -y prometheus (Debian's package: prometheus and promtool)"


def scrape(exp: Exporter) -> dict[str, list]:
    body, _ = exposition(registry(exp))
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode())}


def value(fams: dict[str, list], name: str, **labels: str) -> float | None:
    family = name.removesuffix("_total") if name.endswith("_total") else name
    for s in fams.get(family, []):
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def test_a_hang_a_death_and_the_dashboard_going_away():
    snaps = synthetic_snapshots()
    cur = {"s": snaps[10]}
    exp = Exporter(lambda: cur["s"], lambda: 2)
    f = scrape(exp)
    assert value(f, "verltop_up") == 1 and value(f, "verltop_dashboard_up") == 1
    assert value(f, "verltop_stalled_actors", worker_group="wg", role="actor_rollout") == 0
    assert value(f, "verltop_stalled_actors", worker_group="controller", role="controller") == 0
    assert value(f, "verltop_suspects") == 2
    cur["s"] = snaps[30]  # four ranks stalled
    assert value(scrape(exp), "verltop_stalled_actors", worker_group="wg", role="actor_rollout") == 4
    cur["s"] = snaps[42]  # rank 3 died of a system error
    assert value(scrape(exp), "verltop_dead_actors", kind="failed") == 1
    cur["s"] = snaps[52]  # the dashboard does not answer
    assert value(scrape(exp), "verltop_dashboard_up") == 0
    exp.incident("hang")
    exp.incident("hang")
    exp.incident("death")
    f = scrape(exp)
    assert value(f, "verltop_incidents_total", kind="hang") == 2 and value(f, "verltop_incidents_total", kind="death") == 1


def test_no_snapshot_yet():
    f = scrape(Exporter(lambda: None))
    assert value(f, "verltop_up") == 0 and "verltop_stalled_actors" not in f


def test_steps_phases_skew_and_the_rollout_load():
    s = synthetic_snapshots()[5]
    run = PhaseRun("gen", "rollout", "generate_sequences", 0.0, 30.0, 2)
    steps = (Step(7, 100.0, 42.5, (run,), (("gen", 30.0), ("update_actor", 10.0), ("other", 2.5)), (("gen", 12.0),)),
             Step(8, 142.5, None, (), (("gen", 3.0),)))
    loads = (RolloutLoad("r0", "vllm_server_0_0", "10.0.0.1:41000", "vllm", 14, 2, 0.63, 3, 9e5, 812.5, 1.0),
             RolloutLoad("r1", "vllm_server_1_0", None, problem=OTHER_NODE))
    f = scrape(Exporter(lambda: replace(s, steps=steps, rollout=loads)))
    assert value(f, "verltop_step") == 8  # the running one (verl's own step once its metrics are read)
    assert value(f, "verltop_step_duration_seconds") == 42.5  # the last complete one
    assert value(f, "verltop_phase_duration_seconds", phase="gen") == 30.0
    assert value(f, "verltop_phase_skew_seconds", phase="gen") == 12.0
    assert value(f, "verltop_rollout_running_requests", actor_name="vllm_server_0_0") == 14
    assert value(f, "verltop_rollout_waiting_requests", actor_name="vllm_server_0_0") == 2
    assert value(f, "verltop_rollout_kv_cache_usage_ratio", actor_name="vllm_server_0_0") == 0.63
    assert value(f, "verltop_rollout_preemptions_total", actor_name="vllm_server_0_0") == 3
    assert value(f, "verltop_rollout_generation_tokens_per_second", actor_name="vllm_server_0_0") == 812.5
    assert value(f, "verltop_rollout_running_requests", actor_name="vllm_server_1_0") is None  # never read


def test_labels_are_bounded_and_nothing_ray_exports():
    f = scrape(Exporter(lambda: synthetic_snapshots()[42]))
    allowed = {"worker_group", "role", "kind", "phase", "metric", "actor_name", "rank"}
    for fam in f.values():
        for s in fam:
            assert set(s.labels) <= allowed, (s.name, s.labels)
            assert s.name.startswith("verltop_"), s.name
    # DCGM's and Ray's (verltop's own are each rank's headroom and growth by phase)
    assert not any(("gpu" in n or "memory" in n) and not n.startswith("verltop_memory_") for n in f)


def test_training_names():
    assert training_name("actor/entropy") == "verltop_training_actor_entropy"
    assert training_name("timing_s/gen") == "verltop_training_timing_seconds_gen"
    assert training_metric("perf/cpu_memory_used_gb") == ("verltop_training_perf_cpu_memory_used_bytes", 2.0 ** 30)
    assert training_metric("timing_ms/gen") == ("verltop_training_timing_seconds_gen", 1e-3)
    assert training_name("a/sampleable_count") == "verltop_training_a_sampleable_count_value"
    assert training_name("perf/Total Num-Tokens") == "verltop_training_perf_total_num_tokens"
    assert training_name("x/count_total") == "verltop_training_x_count_total_value"
    assert training_name("//") == "verltop_training_unnamed"


def big_job() -> Snapshot:
    """A 1,024-rank job: 128 worker groups of 8 ranks (a quarter of them stalled, some dead), the controller,
    16 rollout servers with their load, and the last steps (``scripts/bench_metrics.py`` measures the real
    Monitor's snapshots of the synthetic 1,024-rank dashboard too)."""
    base = synthetic_snapshots()[5]
    stall = (Stall("peers", running_s=90.0, method="update_actor", peers=7, peers_done_s=60.0),)
    actors = [row("ctl", group=None, rank=None, role="controller", task="run")]
    for g in range(128):
        for r in range(8):
            a = row(f"g{g}r{r}", group=f"wg{g:03d}", rank=r, pid=10_000 + g * 8 + r)
            if g % 4 == 0:
                a = replace(a, stalls=stall)
            if g == 5 and r == 3:
                a = replace(a, state="DEAD", death_cause="SYSTEM_ERROR: the worker died")
            actors.append(a)
    loads = tuple(RolloutLoad(f"s{i}", f"vllm_server_{i}_0", f"10.0.0.{i}:41000", "vllm", i, 0, 0.5, 1, 1e6, 800.0,
                              1.0) for i in range(16))
    run = PhaseRun("gen", "rollout", "generate_sequences", 0.0, 30.0, 8)
    steps = (Step(7, 100.0, 42.5, (run,), (("gen", 30.0), ("update_actor", 10.0), ("other", 2.5)), (("gen", 12.0),)),)
    return replace(base, actors=tuple(actors), rollout=loads, steps=steps)


def test_a_scrape_at_1024_ranks_is_cheap():
    """Each scrape on a new snapshot builds its families afresh: median ≤ 5 ms of CPU (about 1 ms here)."""
    snap = big_job()
    exp = Exporter(lambda: snap)
    reg = registry(exp)
    fresh = []
    for _ in range(40):
        snap = replace(snap)  # a new object: nothing cached
        t0 = time.thread_time()
        exposition(reg)
        fresh.append((time.thread_time() - t0) * 1000)
    print(f"\nscrape at {len(snap.actors)} actors: median {statistics.median(fresh):.2f} ms CPU, max {max(fresh):.2f}")
    assert statistics.median(fresh) <= 5.0
    f = scrape(exp)
    assert value(f, "verltop_stalled_actors", worker_group="wg000", role="actor_rollout") == 8
    assert value(f, "verltop_dead_actors", kind="failed") == 1


async def test_the_endpoint_over_http():
    snap = synthetic_snapshots()[30]
    exp = Exporter(lambda: snap)
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runner = await serve(registry(exp), "127.0.0.1", port)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                assert 'verltop_stalled_actors{role="actor_rollout",worker_group="wg"} 4.0' in await r.text()
            async with http.get(f"http://127.0.0.1:{port}/metrics",
                                headers={"Accept": "application/openmetrics-text; version=1.0.0"}) as r:
                assert r.headers["Content-Type"].startswith("application/openmetrics-text")
                assert (await r.text()).endswith("# EOF\n")
            async with http.get(f"http://127.0.0.1:{port}/") as r:
                assert r.status == 404
            async with http.post(f"http://127.0.0.1:{port}/metrics") as r:
                assert r.status == 405  # read-only
        with pytest.raises(OSError):  # the port is taken: a clear error, not a second server
            await serve(registry(exp), "127.0.0.1", port)
    finally:
        await runner.cleanup()


@pytest.mark.skipif(PROMTOOL is None, reason=f"promtool missing: {INSTALL}")
def test_promtool_checks_the_exposition():
    s = synthetic_snapshots()[42]
    loads = (RolloutLoad("r0", "vllm_server_0_0", "10.0.0.1:41000", "vllm", 14, 2, 0.63, 3, 9e5, 812.5, 1.0),)
    exp = Exporter(lambda: replace(s, rollout=loads))
    exp.incident("hang")
    body, _ = exposition(registry(exp))
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()


SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == '/metrics'
        self.send_response(200 if ok else 404); self.end_headers()
        self.wfile.write(open(sys.argv[1], 'rb').read() if ok else b'no')
    def log_message(self, *a): pass
srv = http.server.HTTPServer((sys.argv[3] if len(sys.argv) > 3 else '127.0.0.1', 0), H)
open(sys.argv[2], 'w').write('up')
srv.serve_forever()
"""


async def test_rollout_watch_finds_the_server_through_proc_and_reads_its_load(tmp_path):
    """A process that listens (as a rollout server's actor does) is found by its listening socket; its
    /metrics is read every poll; tokens/s from the counter between two reads; another node's server is
    listed without figures."""
    text = (FIX / "vllm-0.11-dp2.txt").read_text()
    body = tmp_path / "metrics.txt"
    body.write_text(text)
    up = tmp_path / "up"
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(body), str(up)])
    rw = RolloutWatch(timeout_s=2.0)
    try:
        await wait_until_async(up.exists, 20, "the server to listen")
        here = RawActor("a" * 8, "vLLMHttpServer", "ALIVE", "vllm_server_0_0", "n1", proc.pid)
        there = RawActor("b" * 8, "vLLMHttpServer", "ALIVE", "vllm_server_1_0", "n2", 4242)
        worker = RawActor("c" * 8, "WorkerDict", "ALIVE", "actor_rollout_WorkerDict_0:0", "n1", proc.pid)

        async def found() -> bool:
            await rw.poll([here, there, worker], frozenset({"n1"}), {}, time.time())
            return rw.loads.get(here.actor_id) is not None and rw.loads[here.actor_id].read_at is not None

        await wait_until_async(found, 20, "the server's load", step=0.2)
        first = rw.loads[here.actor_id]
        assert first.address is not None and first.address.startswith("127.0.0.1:") and first.running == 17
        assert rw.loads[there.actor_id].problem == OTHER_NODE and worker.actor_id not in rw.loads
        body.write_text(text.replace("812345.0", "813345.0"))
        reads = rw.reads
        await rw.poll([here, there], frozenset({"n1"}), {}, first.read_at + 2.0)
        assert rw.reads == reads + 1  # the known address only: no second search
        assert rw.loads[here.actor_id].gen_tokens_per_s == pytest.approx(500.0)
        proc.kill()
        proc.wait()
        await rw.poll([], frozenset({"n1"}), {}, time.time())
        assert rw.loads == {}  # gone with its actor
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await rw.close()


def test_training_metrics_anomalies_and_slow_ranks():
    from verltop.model import Anomaly, SlowRank, TrainingView

    nan = float("nan")
    tv = TrainingView("actor_log", "TaskRunner", 12, {
        "actor/entropy": ((11, 0.9), (12, 0.02)), "critic/vf_loss": ((11, 0.5), (12, nan)),
        "timing_s/gen": ((12, 31.5),), "actor/skipped": ((12, None),)},
        anomalies=(Anomaly(12, "critic/vf_loss", "nan", nan, None, "nan"),
                   Anomaly(12, "actor/entropy", "collapse", 0.02, 0.9)))
    slow = (SlowRank("r1", "vllm_server_1_0", None, None, "gen", "generate", 4, 12.5, 5),)
    s = replace(synthetic_snapshots()[5], training=tv, slow_ranks=slow)
    cur = {"s": s}
    exp = Exporter(lambda: cur["s"])
    exp.observe(s)
    exp.observe(s)  # the same anomalies again: counted once
    f = scrape(exp)
    assert value(f, "verltop_step") == 12  # verl's own step
    assert value(f, "verltop_training_actor_entropy") == 0.02
    assert value(f, "verltop_training_timing_seconds_gen") == 31.5
    v = value(f, "verltop_training_critic_vf_loss")
    assert v is not None and v != v  # NaN is exported as NaN (the NaN alert reads the anomaly count)
    assert "verltop_training_actor_skipped" not in f
    assert value(f, "verltop_anomalies_total", kind="nan", metric="critic/vf_loss") == 1
    assert value(f, "verltop_anomalies_total", kind="collapse", metric="actor/entropy") == 1
    assert value(f, "verltop_slow_rank_lag_seconds", actor_name="vllm_server_1_0", phase="gen") == 12.5
    nxt = replace(tv, last_step=13, anomalies=(*tv.anomalies, Anomaly(13, "critic/vf_loss", "nan", nan, None)))
    exp.observe(replace(s, training=nxt))
    assert value(scrape(exp), "verltop_anomalies_total", kind="nan", metric="critic/vf_loss") == 2


def test_watch_says_in_one_line_when_the_port_is_taken_or_wrong(tmp_path, capsys):
    import socket

    from tests.faults.helpers import clean_env

    def watch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "verltop", "watch", "--address", "http://127.0.0.1:1", "--dir",
                               str(tmp_path / "w"), *args], capture_output=True, text=True, timeout=60, env=clean_env())

    from verltop.cli import main

    assert main(["watch", "--metrics-port", "70000", "--dir", str(tmp_path / "w")]) == 2
    assert capsys.readouterr().err.strip() == "verltop: error: --metrics-port 70000: not a TCP port (1-65535)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = watch("--metrics-port", str(port))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().startswith(f"verltop: error: --metrics-port {port} on 127.0.0.1: "), p.stderr


async def test_rollout_servers_on_another_node_are_found_through_its_probe(tmp_path):
    """On another node the sockets come from that node's probe (here the very function the probe runs there,
    called in-process: the probe's transport is tested with the multi-node cluster); the GET then goes over
    the network to the address the server bound, as Prometheus would. A server bound to its node's loopback
    cannot be reached from here, and says so; without a probe, remote servers are listed without figures."""
    from verltop.sources.rollout import listening_many

    body = tmp_path / "metrics.txt"
    body.write_text((FIX / "sglang-0.5.txt").read_text())
    procs = {}
    for host in ("0.0.0.0", "127.0.0.1"):
        up = tmp_path / f"up-{host}"
        procs[host] = subprocess.Popen([sys.executable, "-c", SERVER, str(body), str(up), host])
        await wait_until_async(up.exists, 20, f"the server on {host}")
    asked: list[tuple[str, list[int]]] = []

    async def probe(node_id: str, pids: list[int]):
        asked.append((node_id, pids))
        return listening_many(pids), None

    wide = RawActor("w" * 8, "SGLangHttpServer", "ALIVE", "sglang_server_0_0", "n2", procs["0.0.0.0"].pid)
    lo = RawActor("l" * 8, "SGLangHttpServer", "ALIVE", "sglang_server_1_0", "n2", procs["127.0.0.1"].pid)
    rw = RolloutWatch(find=probe)
    try:
        await rw.poll([wide, lo], frozenset({"n1"}), {"n2": "127.0.0.1"}, 100.0)
        r = rw.loads[wide.actor_id]
        assert r.engine == "sglang" and r.address == f"127.0.0.1:{r.address.rsplit(':', 1)[1]}" and r.running == 9
        assert rw.loads[lo.actor_id].problem == LOOPBACK
        assert [(n, sorted(p)) for n, p in asked] == [("n2", sorted([wide.pid, lo.pid]))]  # one call per node
        await rw.poll([wide, lo], frozenset({"n1"}), {"n2": "127.0.0.1"}, 105.0)
        assert len(asked) == 1  # found: read directly from then on; the other not looked for again yet
        await rw.poll([wide, lo], frozenset({"n1"}), {"n2": "127.0.0.1"}, 140.0)
        assert len(asked) == 2 and asked[1][1] == [lo.pid]  # the unreachable one, looked for again later
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
        await rw.close()
    none = RolloutWatch()
    await none.poll([wide], frozenset({"n1"}), {}, 1.0)
    assert none.loads[wide.actor_id].problem == OTHER_NODE
    await none.close()


def test_the_kind_of_each_incident_the_watch_opens():
    from types import SimpleNamespace

    from verltop.engine.watch import incident_kind

    snaps = synthetic_snapshots()
    hung = SimpleNamespace(groups=["wg"], first=snaps[30])  # ranks of wg stalled
    died = SimpleNamespace(groups=["wg"], first=replace(snaps[42], actors=tuple(
        replace(a, stalls=()) if a.state == "ALIVE" else a for a in snaps[42].actors)))
    assert incident_kind(hung) == "hang" and incident_kind(died) == "death"
    assert incident_kind(SimpleNamespace(kind="anomaly", groups=[])) == "anomaly"  # an incident that says its kind
    assert incident_kind(SimpleNamespace(episode=SimpleNamespace(kind="slow"), groups=[])) == "slow"
