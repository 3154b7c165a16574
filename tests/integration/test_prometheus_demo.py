"""A real Prometheus (Debian's ``prometheus``) scrapes ``verltop watch --metrics-port`` on the demo's real verl
job: its query API returns the step and the rollout server's load, and ``promtool check metrics`` passes on
the live exposition."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request

import pytest

from tests.engine.procs import Watch
from tests.faults.helpers import ROOT
from tests.net import free_port
from tests.wait import wait_until

pytestmark = pytest.mark.ray

PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
if PROMETHEUS is None or PROMTOOL is None:
    pytest.skip("prometheus missing: apt-get install -y prometheus (Debian's package: prometheus and promtool)",
                allow_module_level=True)


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


@pytest.fixture(scope="module")
def scraped(demo, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prometheus")
    port, prom_port = free_port(), free_port()
    extra = {"RAY_AUTH_TOKEN": demo.token} if demo.token else {}
    w = Watch(tmp / "w", demo.address, "--metrics-port", str(port), env=extra)
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{ROOT / 'docs' / 'prometheus' / 'verltop-rules.yml'}']\n"
        f"scrape_configs:\n  - job_name: verltop\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
    with open(tmp / "prometheus.out", "w") as out:
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        w.wait(lambda: "Prometheus metrics at" in w.text(), 60, "the metrics endpoint")
        yield w, port, f"http://127.0.0.1:{prom_port}", tmp
    finally:
        for p in (prom, w.proc):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def query(base: str, q: str) -> list[dict]:
    doc = json.loads(get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': q})}"))
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def test_prometheus_scrapes_the_step_and_the_rollout_load(scraped):
    w, _, base, tmp = scraped

    def step() -> float | None:
        try:
            r = query(base, 'verltop_step{job="verltop"}')
        except OSError:
            return None  # prometheus still starting
        return float(r[0]["value"][1]) if r else None

    wait_until(lambda: (step() or 0) >= 1, 120, "Prometheus to return verltop_step",
               detail=lambda: (tmp / "prometheus.out").read_text()[-2000:] + w.text()[-1000:])
    assert query(base, 'up{job="verltop"}')[0]["value"][1] == "1"
    assert query(base, 'verltop_dashboard_up{job="verltop"}')[0]["value"][1] == "1"
    groups = {r["metric"]["worker_group"] for r in query(base, "verltop_stalled_actors")}
    assert {"controller"} < groups, groups  # the controller and the verl worker groups

    def load() -> list[dict]:
        return query(base, 'verltop_rollout_running_requests{actor_name="vllm_server_0_0"}')

    wait_until(load, 60, "the rollout server's load in Prometheus")
    assert query(base, 'verltop_rollout_kv_cache_usage_ratio{actor_name="vllm_server_0_0"}')

    def rules() -> list[dict]:
        return json.loads(get(f"{base}/api/v1/rules"))["data"]["groups"][0]["rules"]

    # the shipped rules load and evaluate on the live series (health stays "unknown" until the first round)
    shipped = (ROOT / "docs" / "prometheus" / "verltop-rules.yml").read_text().count("- alert:")
    assert shipped >= 8
    wait_until(lambda: len(rules()) == shipped and all(r["health"] == "ok" for r in rules()), 30,
               "the alert rules evaluated", detail=rules)


def test_promtool_checks_the_live_exposition(scraped):
    _, port, _, _ = scraped
    body = get(f"http://127.0.0.1:{port}/metrics")
    assert b"verltop_step " in body and b'verltop_rollout_running_requests{actor_name="vllm_server_0_0"}' in body
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
