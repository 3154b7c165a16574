"""What ships for Prometheus and Grafana: the alert rules load (``promtool check rules``) and pass their unit tests
(``promtool test rules``), and every metric the Grafana dashboard names is one verltop exports or one of Ray's
own (as Ray's shipped dashboards name them)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tests.engine.helpers import synthetic_snapshots
from verltop.engine.exporter import Exporter, exposition, registry, training_name
from verltop.model import RolloutLoad

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "docs" / "prometheus" / "verltop-rules.yml"
DASHBOARD = ROOT / "docs" / "grafana" / "verltop.json"
PROMTOOL = shutil.which("promtool")
INSTALL = "apt-get install -y prometheus (Debian's package: prometheus and promtool)"
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason=f"promtool missing: {INSTALL}")


@needs_promtool
def test_rules_load():
    p = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS: 10 rules found" in p.stdout


@needs_promtool
def test_rules_pass_their_unit_tests():
    p = subprocess.run([PROMTOOL, "test", "rules", "verltop-rules.test.yml"], cwd=RULES.parent, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr


def test_every_alert_has_a_summary_and_a_test():
    rules = RULES.read_text()
    alerts = re.findall(r"^\s+- alert: (\w+)$", rules, re.M)
    assert len(alerts) == 10 and rules.count("summary: >-") == 10
    tests = (RULES.parent / "verltop-rules.test.yml").read_text()
    assert all(f"alertname: {a}\n" in tests for a in alerts), [a for a in alerts if f"alertname: {a}\n" not in tests]


def exported_names() -> set[str]:
    s = synthetic_snapshots()[5]
    exp = Exporter(lambda: replace(s, rollout=(RolloutLoad("r", "vllm_server_0_0", "a:1", "vllm", 1, 0, 0.5, 0, 1.0,
                                                                   1.0, 1.0),)))
    body = exposition(registry(exp))[0].decode()
    return set(re.findall(r"^# TYPE (\S+) ", body, re.M))


def package_dir(name: str) -> Path:
    """Where an installed package's sources are, without importing it (verl imports torch)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{name} not installed: pip install -e '.[test]'")
    return Path(next(iter(spec.submodule_search_locations)))


def verl_keys() -> set[str]:
    """The metric keys verl's sources write (string literals like ``critic/score/mean``)."""
    keys: set[str] = set()
    for f in package_dir("verl").rglob("*.py"):
        keys |= set(re.findall(r"[\"']([a-z_]+(?:/[a-z_0-9@]+)+)[\"']", f.read_text(errors="replace")))
    return keys


def ray_names() -> set[str]:
    """The metric names Ray's own Grafana dashboards use."""
    d = package_dir("ray") / "dashboard" / "modules" / "metrics" / "dashboards"
    return {n for f in d.glob("*.py") for n in re.findall(r"\b(ray_[a-z_]+)\{", f.read_text())}


def test_the_grafana_dashboard_names_only_metrics_that_exist():
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in doc["templating"]["list"] if v["type"] == "query"]
    used = {n for e in exprs for n in re.findall(r"\b((?:verltop|ray)_[a-z0-9_]+)\b", e)}
    ours = exported_names()
    training = {training_name(k) for k in verl_keys()}
    ray = ray_names()
    missing = sorted(n for n in used if n not in ours and n not in training and n not in ray)
    assert missing == [], missing
    assert any(n.startswith("verltop_training_") for n in used) and any(n.startswith("ray_") for n in used)
    assert {"verltop_stalled_actors", "verltop_rollout_running_requests", "verltop_phase_duration_seconds"} <= used


@needs_promtool
def test_every_verl_metric_name_passes_promtools_lint():
    """verl's keys as exported gauges: promtool's lint (abbreviated units, _total on a gauge) refuses none."""
    if importlib.util.find_spec("verl") is None:
        pytest.skip("needs verl (pip install -e '.[demo]')")
    lines = []
    for name in sorted({training_name(k) for k in verl_keys()}):
        lines += [f"# HELP {name} verl's metric", f"# TYPE {name} gauge", f"{name} 1"]
    p = subprocess.run([PROMTOOL, "check", "metrics"], input="\n".join(lines) + "\n", capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, (p.stdout + p.stderr)[:2000]
