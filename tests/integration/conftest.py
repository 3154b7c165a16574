"""Fixtures for tests against a real local Ray cluster running the verltop demo job (CPU, gloo).

Contract (other test modules rely on it):

- ``demo`` (session scope): ONE cluster per pytest session, started on first use with
  ``start_demo(hang_after=None, scale=DEMO_SCALE)`` (~30 s on 2 cores) and stopped at session end, so no
  raylet, GCS or ``ray::`` worker outlives the session. The job trains forever (7–8 s per PPO step at the
  tests' pace, 10–13 s at the demo's own) and is healthy whenever a test that uses only ``demo`` starts. Never
  call ``demo.stop()`` or hang it without releasing.
- ``hung_demo`` (module scope): the same handle with a hang injected: rank 2 of the actor_rollout/critic
  group sits in ``_stuck_rollout`` inside ``WorkerDict.actor_rollout_update_actor`` and ranks 0, 1, 3
  block in ``torch.distributed.all_reduce``; ``TaskRunner.run`` waits in ``ray.get``. Set up on the first
  test of a module that asks for it (wait: up to one step, ~10-20 s); torn down at the end of that module
  by releasing the stuck rank and waiting until the job has finished that ``update_actor``. So within a
  module, put tests that need a healthy job BEFORE the first test that uses ``hung_demo``.
- ``tp_hung_demo`` (module scope): the same handle with TP worker 1 of the rollout server ``vllm_server_0_0``
  hung: ``VLLM::Worker_TP1`` sits in ``_load_weights_bucket`` (``verltop/demo/engine.py``), ``VLLM::Worker_TP0``
  blocks in ``torch.distributed.all_reduce``, ``VLLM::EngineCore_DP0`` in ``get_response`` (a pipe read) under
  ``collective_rpc``, ``vLLMHttpServer.update_weights`` awaits the engine and ``TaskRunner.run`` waits in
  ``ray.get``. ``hang_info()`` has ``"target": "tp1"`` and the worker's pid. Same rules as ``hung_demo``
  (released at the end of the module, which waits until that step is done); never both in one module.
- ``sandbox_hung_demo`` (module scope): one sandbox child of ``reward_loop_worker_0`` (``python -I -S …/sandbox.py``)
  never returns during generation: ``RewardLoopWorker.compute_score`` waits on it in an executor thread
  (``subprocess.run``), ``agent_loop_worker_0``'s ``generate_sequences`` awaits that score, ``TaskRunner.run``
  waits in ``ray.get`` in phase ``gen``. ``hang_info()`` has ``"target": "sandbox"`` and the sandbox's pid. Same
  rules as ``hung_demo``.
- The demo's actors besides the 8 WorkerDict ranks and the TaskRunner: ``vllm_server_0_0`` (``vLLMHttpServer``,
  children ``VLLM::EngineCore_DP0`` → ``VLLM::Worker_TP0``, ``VLLM::Worker_TP1``), ``agent_loop_worker_0``/``_1``
  (``AgentLoopWorker``) and ``reward_loop_worker_0`` (``RewardLoopWorker``, a short-lived sandbox child per
  score). ``demo.worker_pids()`` lists all of them and the engine's processes by role.
- ``dashboard`` (session scope): ``dashboard(path, **params)`` GETs ``demo.address + path`` with the
  bearer token and returns the decoded JSON (or text); ``dashboard.raw(path, token=..., **params)``
  returns ``(status, body)`` without raising on HTTP errors.

- ``scenario_cluster`` (session scope): a second, separate Ray cluster for the dump scenarios
  (``scenarios.py``): head + two worker nodes on this machine (``ray.cluster_utils.Cluster``, token auth,
  ``RAY_DASHBOARD_ENABLE_PROFILING=1``), a ``TaskRunner`` controller and two verl worker groups, ``A``
  (4 ranks, 2 per worker node, roles actor_rollout + critic) and ``B`` (4 ranks on the head, role ref).
  It is driven by a host process (never by the pytest process, which may be the demo's driver), started
  on first use (~30-60 s) and stopped right after the last test that uses it. The modules that use it run
  before the demo's (``pytest_collection_modifyitems`` below), so in one process the two never run at once;
  under the README's ``-n 2`` they run on the other worker beside the demo (tests/conftest.py: the groups).
  A scenario leaves group A released (idle) when it ends; group B may be left hung or dead.

Mark every test here with ``ray`` (``pytest -m "not ray"`` then deselects them). Without ray, torch or verl
installed, every test module in this directory is reported as skipped, saying what is missing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.wait import wait_until

if TYPE_CHECKING:
    from verltop.demo.cluster import DemoHandle

# Without the demo extras, each module here is reported as skipped (with what is missing) instead of
# failing at import.
MISSING = [m for m in ("ray", "torch", "verl") if importlib.util.find_spec(m) is None]


class _NotInstalled(pytest.File):
    def collect(self):  # type: ignore[override]
        pytest.skip(f"needs {', '.join(MISSING)} (pip install -e '.[demo]'): a real Ray cluster runs verl here")


if MISSING:
    def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.File:
        return _NotInstalled.from_parent(parent, path=module_path)

HANG_WAIT_S = 60
RELEASE_WAIT_S = 45


class Dashboard:
    """Minimal dashboard HTTP client: urllib only, bearer token from the handle."""

    def __init__(self, handle: DemoHandle) -> None:
        self.handle = handle

    def raw(self, path: str, token: str | None = "default", timeout: float = 30, **params: Any) -> tuple[int, bytes]:
        url = self.handle.address + path
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        req = urllib.request.Request(url)
        tok = self.handle.token if token == "default" else token
        if tok:
            req.add_header("Authorization", f"Bearer {tok}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def __call__(self, path: str, **params: Any) -> Any:
        status, body = self.raw(path, **params)
        assert status == 200, f"GET {path} -> {status}: {body[:300]!r}"
        try:
            return json.loads(body)
        except ValueError:
            return body.decode(errors="replace")

    def rows(self, kind: str, **params: Any) -> list[dict[str, Any]]:
        """State API list (``actors``, ``tasks``...) rows."""
        params.setdefault("limit", 1000)
        return self(f"/api/v0/{kind}", **params)["data"]["result"]["result"]

    def running_tasks(self) -> list[dict[str, Any]]:
        return self.rows("tasks", filter_keys="state", filter_predicates="=", filter_values="RUNNING")


# The tests' demo runs its phases at this share of the demo's own pace: what they wait for is steps (a leak's
# six, a timeline's few), not seconds, and the rollout server's generation keeps its own pace.
DEMO_SCALE = 0.6


@pytest.fixture(scope="session")
def demo() -> Iterator[DemoHandle]:
    from verltop.demo.cluster import start_demo

    handle = start_demo(hang_after=None, scale=DEMO_SCALE)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="session")
def dashboard(demo: DemoHandle) -> Dashboard:
    return Dashboard(demo)


@pytest.fixture(scope="module")
def hung_demo(demo: DemoHandle) -> Iterator[DemoHandle]:
    demo.request_hang()
    wait_until(demo.hung, HANG_WAIT_S, "the hang", step=0.5, detail=demo.progress)
    hung_step = demo.progress().get("step")
    yield demo
    # Let the stuck rank rejoin the all_reduce; the job must then get past that update_actor.
    demo.release_hang()

    def resumed() -> bool:
        p = demo.progress()
        return not demo.hung() and (p.get("step", 0) > hung_step or p.get("phase") in ("update_weights", "done"))

    wait_until(resumed, RELEASE_WAIT_S, "the job to resume", step=0.5, detail=demo.progress)


def _hang_target(demo: DemoHandle, target: str) -> Iterator[DemoHandle]:
    """Hang ``target``, yield while hung, then release and wait until the job is past that step's phase."""
    demo.request_hang(target)
    wait_until(lambda: demo.hung() and (demo.hang_info() or {}).get("target") == target, HANG_WAIT_S,
               f"the {target} hang", step=0.5, detail=demo.progress)
    hung = demo.progress()
    yield demo
    demo.release_hang()

    def resumed() -> bool:
        p = demo.progress()
        return not demo.hung() and (p.get("step", 0) > hung["step"] or p.get("phase") != hung["phase"])

    wait_until(resumed, RELEASE_WAIT_S, "the job to resume", step=0.5, detail=demo.progress)


@pytest.fixture(scope="module")
def tp_hung_demo(demo: DemoHandle) -> Iterator[DemoHandle]:
    yield from _hang_target(demo, "tp1")


@pytest.fixture(scope="module")
def sandbox_hung_demo(demo: DemoHandle) -> Iterator[DemoHandle]:
    yield from _hang_target(demo, "sandbox")


# ------------------------------------------------------------------------------------ scenario cluster

HERE = Path(__file__).resolve().parent
SCENARIO_START_S = 300
_SCENARIO: dict[str, ScenarioCluster] = {}


class ScenarioCluster:
    """The pytest side of ``scenarios.py host``: JSON-line commands, rank positions, ``verltop`` runs."""

    def __init__(self, state_dir: Path) -> None:
        import queue
        import threading

        from verltop.sources.config import resolve_token

        self.state_dir = state_dir
        self.token = resolve_token()[0]
        self.stopped = False
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
        # the dashboard agents run `shutil.which("py-spy")`: the venv's bin must be on their PATH
        env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
        env["RAY_DASHBOARD_ENABLE_PROFILING"] = "1"
        env.setdefault("RAY_AUTH_MODE", "token")  # as on a cluster that ray.init() started
        env.pop("RAY_ADDRESS", None)
        self.env = env
        self.log = open(state_dir / "host.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "scenarios.py"), "host", "--state-dir", str(state_dir / "state")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, text=True,
            start_new_session=True,
        )
        self._replies: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        t0 = time.monotonic()
        first = self._reply(SCENARIO_START_S)
        if not first.get("ok"):
            self.stop()
            raise RuntimeError(f"scenario cluster did not start:\n{first.get('error')}")
        self.startup_s = time.monotonic() - t0
        self.info = first
        self.address: str = first["dashboard"]
        self.gcs: str = first["gcs"]
        self.prefix = {g: v["prefix"] for g, v in first["groups"].items()}
        self.dashboard = Dashboard(self)  # type: ignore[arg-type]  # needs .address and .token only
        self._wait_settled()

    def _wait_settled(self, timeout: float = 30) -> None:
        """Until the dashboard lists every rank's setup tasks as finished (task events lag ~1 s): verltop
        learns the roles a colocated worker hosts from them."""
        want = {f"WorkerDict.{role}_setup": v["world_size"] for v in self.info["groups"].values()
                for role in v["roles"]}
        done: dict[str, int] = {}

        def settled() -> bool:
            done.clear()
            for t in self.dashboard.rows("tasks", limit=10000):
                if t["state"] == "FINISHED":
                    done[t["name"]] = done.get(t["name"], 0) + 1
            return all(done.get(k, 0) >= n for k, n in want.items())

        wait_until(settled, timeout, "every setup task finished on the dashboard", step=0.5, detail=lambda: done)

    # -- protocol

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._replies.put(line)
        self._replies.put("")

    def _reply(self, timeout: float) -> dict[str, Any]:
        import queue

        try:
            line = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"scenario host silent for {timeout:.0f}s (log: {self.log.name})") from None
        if not line:
            raise AssertionError(f"scenario host exited (rc={self.proc.poll()}; log: {self.log.name})")
        return json.loads(line)

    def cmd(self, timeout: float = 60, **kw: Any) -> dict[str, Any]:
        assert not self.stopped, "the scenario cluster was stopped"
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(kw) + "\n")
        self.proc.stdin.flush()
        r = self._reply(timeout)
        assert r.get("ok"), r.get("error")
        return r

    # -- scenarios

    def ranks(self, group: str) -> list[dict[str, Any]]:
        """``{"rank", "pid", "node_id", "actor_id", ...}`` of the group's ranks, by rank."""
        return sorted((r for r in self.info["ranks"] if r["group"] == group), key=lambda r: r["rank"])

    def start(self, group: str, plan: dict[str, str], tag: str) -> None:
        """The controller launches the plan and returns (it is idle while the ranks act)."""
        self.cmd(cmd="start", group=group, plan=plan, tag=tag)

    def run(self, group: str, plan: dict[str, str], tag: str) -> None:
        """The controller launches the plan and waits for every rank in ``ray.get``."""
        self.cmd(cmd="run", group=group, plan=plan, tag=tag)

    def release(self, tag: str) -> None:
        (self.state_dir / "state" / f"release-{tag}").write_text("")

    def wait(self, tag: str, timeout: float = 30) -> dict[str, Any]:
        """``{"done", "errors"}`` once every rank (or the controller's run) of ``tag`` returned."""
        return self.cmd(cmd="wait", tag=tag, wait_s=timeout, timeout=timeout + 30)

    def finish(self, tag: str) -> None:
        """Release the stragglers of ``tag`` and wait until the scenario is over, cleanly."""
        self.release(tag)
        r = self.wait(tag)
        assert r["done"] and not r["errors"], r

    def positions(self, group: str) -> dict[int, dict[str, Any]]:
        out = {}
        for r in self.ranks(group):
            with contextlib.suppress(OSError, ValueError):
                out[r["rank"]] = json.loads((self.state_dir / "state" / "pos" / f"{group}.{r['rank']}").read_text())
        return out

    def wait_positions(self, group: str, ops: dict[int, str], tag: str, timeout: float = 30) -> None:
        """Until rank r of ``group`` has entered ``ops[r]`` in scenario ``tag``; then a moment for it to be
        inside (the marker is written just before the call)."""
        def placed() -> bool:
            pos = self.positions(group)
            return all(pos.get(r, {}).get("tag") == tag and pos[r]["op"] == op for r, op in ops.items())

        wait_until(placed, timeout, f"ranks of {group} in position for {tag}", detail=lambda: self.positions(group))
        time.sleep(0.5)

    def wait_tasks(self, running: set[str], idle: set[str] = frozenset(), timeout: float = 30) -> None:
        """Until the dashboard (what verltop reads) shows a running task on the actors in ``running`` and
        none on those in ``idle`` (task events reach it about once a second)."""
        now: set[str] = set()

        def shown() -> bool:
            now.clear()
            now.update(t["actor_id"] for t in self.dashboard.running_tasks() if t.get("actor_id"))
            return running <= now and not idle & now

        wait_until(shown, timeout, f"running tasks on {running}, none on {idle}", step=0.5, detail=lambda: now)

    # -- verltop, as a user runs it

    def verltop(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120
                ) -> tuple[subprocess.CompletedProcess[str], float]:
        exe = Path(sys.executable).parent / "verltop"
        e = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
        e.update(env or {})
        t0 = time.monotonic()
        p = subprocess.run([str(exe), *args, "--address", self.address], capture_output=True, text=True,
                           timeout=timeout, env=e)
        return p, time.monotonic() - t0

    def dump(self, group: str | None = None, *extra: str, env: dict[str, str] | None = None
             ) -> tuple[dict[str, Any], float]:
        """``verltop dump --json [--group PREFIX] ...``: the parsed report and the wall time."""
        args = ["dump", "--json", *extra]
        if group is not None:
            args += ["--group", self.prefix[group]]
        p, wall = self.verltop(*args, env=env)
        assert p.returncode == 0, f"verltop {' '.join(args)} -> {p.returncode}\n{p.stderr[-2000:]}"
        return json.loads(p.stdout), wall

    # -- teardown

    def descendants(self) -> list[int]:
        import psutil

        try:
            return [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.Error:
            return []

    def stop(self) -> list[str]:
        """Stop the cluster; SIGKILL whatever of it outlives the host. Returns ``ps`` lines of the
        processes that were still there 20 s after the stop was asked (empty when clean). Idempotent."""
        import psutil

        if self.stopped:
            return []
        self.stopped = True
        procs = []
        for pid in self.descendants():
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(pid))
        try:
            if self.proc.poll() is None and self.proc.stdin is not None:
                self.proc.stdin.write(json.dumps({"cmd": "stop"}) + "\n")
                self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        deadline = time.monotonic() + 20
        while (left := [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]) and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        stray = []
        for p in left:
            with contextlib.suppress(psutil.Error):
                stray.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
                p.kill()
        self.log.close()
        return stray


@pytest.fixture(scope="session")
def scenario_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScenarioCluster]:
    c = ScenarioCluster(tmp_path_factory.mktemp("scenario-cluster"))
    _SCENARIO["cluster"] = c
    try:
        yield c
    finally:
        c.stop()


STOPS_ITS_CLUSTER = {"test_cluster_stops_without_strays"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules on a cluster of their own (the scenario cluster, the doctor's...) run before the other modules
    here (the demo's): one cluster at a time per worker. Only whole modules move; the order inside a module is
    kept."""
    here = [i for i, it in enumerate(items) if Path(str(it.path)).parent == HERE]
    # modules with a cluster of their own (scenario, chains, test_pending_live's pending, the doctor's) go first
    own = {"scenario_cluster", "chains_cluster", "pending_cluster", "doctor_cluster", "plain_doctor_cluster"}
    cluster_of: dict[Path, str] = {}
    for it in items:
        for name in sorted(own & set(getattr(it, "fixturenames", ()))):
            cluster_of.setdefault(Path(str(it.path)), name)
    # the modules of one cluster run back to back: the scenario cluster stops after its last user, so a
    # module of another cluster between two of its users would find it stopped
    # a test that stops its cluster (to check nothing is left behind) goes after every other user of it
    moved = sorted((items[i] for i in here),
                   key=lambda it: (Path(str(it.path)) not in cluster_of, cluster_of.get(Path(str(it.path)), ""),
                                   getattr(it, "originalname", it.name) in STOPS_ITS_CLUSTER))
    for i, it in zip(here, moved, strict=True):
        items[i] = it


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the scenario cluster after the last test that uses it, not at the end of the session."""
    c = _SCENARIO.get("cluster")
    if c is None or "scenario_cluster" not in getattr(item, "fixturenames", ()):
        return
    if nextitem is None or "scenario_cluster" not in getattr(nextitem, "fixturenames", ()):
        c.stop()
