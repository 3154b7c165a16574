"""Start and stop the demo: a local Ray cluster with the dashboard and a verl PPO-shaped job that hangs.

Public API (the CLI and the tests code against it): :func:`start_demo` and :class:`DemoHandle`.

Token authentication, as found on Ray 2.60.0 (``ray/_private/worker.py`` and
``ray/_private/authentication/authentication_token_setup.py``, confirmed live):

- A ``ray.init()`` that starts a *new* local cluster calls ``enable_token_auth_by_default()``: unless
  ``RAY_AUTH_MODE`` is already set (``disabled`` opts out), it sets ``os.environ["RAY_AUTH_MODE"] = "token"``
  in the calling process (and so in every Ray process it spawns) and logs a warning saying so.
- ``ensure_token_if_auth_enabled(create_token_if_missing=True)`` then looks for a token in
  ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` and ``~/.ray/auth_token``; if there is none it generates a
  64-hex-character token and writes it to ``~/.ray/auth_token`` (kept after shutdown and reused next time).
- The dashboard then answers 401 to requests without ``Authorization: Bearer <token>`` (State API,
  ``/nodes`` and the rest alike), 403 to a wrong token and 200 with the right one.

So ``DemoHandle.token`` is the token Ray loaded (``AuthenticationTokenLoader.get_raw_token()``), or None when
auth is off. Another process of the same user finds the same token in ``~/.ray/auth_token``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Fail at import, with the missing package's name, so the CLI can say what to install. Cheap: this checks
# that the packages exist and imports none of them; ray is only imported by start_demo() and stop().
for _mod in ("ray", "torch", "verl"):
    if importlib.util.find_spec(_mod) is None:
        raise ImportError(f"verltop demo needs {_mod}", name=_mod)

HANG_REQUEST_FILE = "hang_request"
NAN_REQUEST_FILE = "nan_request"  # as in job.py
LEAK_REQUEST_FILE = "leak_request"  # as in job.py
LEAK_CAPPED_FILE = "leak_capped"  # as in workers.py
LEAK_MIB = 64  # `verltop demo --leak`: MiB kept per update_actor by default
LEAK_CAP_MIB = 1024  # the leak stops growing here: the demo never eats the machine
METRICS_FILE = "metrics.jsonl"
HANG_TARGETS = ("rank", "late", "tp1", "sandbox")  # as in job.py (which imports ray)
# Duplicated from workers.py / job.py to keep this module free of torch and verl imports.
HUNG_FILE = "hung"
RELEASE_FILE = "release"
PIDS_DIR = "pids"
PROGRESS_FILE = "progress.json"
PHASE_LOG = "phases.jsonl"
PROFILING_ENV = "RAY_DASHBOARD_ENABLE_PROFILING"

log = logging.getLogger(__name__)


@dataclass
class DemoHandle:
    """A running demo. ``request_hang``/``hung``/``progress`` only touch files, so they need no Ray."""

    address: str  # dashboard URL, e.g. "http://127.0.0.1:8265"
    token: str | None = field(repr=False)  # Ray auth token when token auth is on; never printed
    hang_file: str  # write it (request_hang) and the controller hangs one rank; it deletes the file then
    state_dir: str = ""  # hang_file, the hung marker, progress.json and worker pid files live here
    leak: dict[str, Any] | None = None  # {"rank", "mib", "cap_mib"} while a leak was asked for
    _runner: Any = field(default=None, repr=False)
    _run_ref: Any = field(default=None, repr=False)
    _stopped: bool = field(default=False, repr=False)

    def request_hang(self, target: str = "rank") -> None:
        """Ask the controller for a hang (no Ray needed): ``rank`` (the configured trainer rank, in the next
        ``update_actor``), ``late`` (that rank stops after its last collective: its peers finish and it
        arrives late), ``tp1`` (TP worker 1 of ``vllm_server_0_0``, in ``_load_weights_bucket`` at the next
        weight sync) or ``sandbox`` (a sandbox child of ``reward_loop_worker_0`` that never returns, in the
        next generation)."""
        if target not in HANG_TARGETS:
            raise ValueError(f"unknown hang target {target!r} (one of {', '.join(HANG_TARGETS)})")
        Path(self.hang_file).write_text(json.dumps({"target": target, "time": time.time()}))

    def request_leak(self, rank: int = 1, mib: int = LEAK_MIB, cap_mib: int = LEAK_CAP_MIB) -> None:
        """From the next update_actor on, rank ``rank`` of actor_rollout keeps ``mib`` MiB more host memory
        after every update_actor, until ``cap_mib`` (no Ray needed)."""
        if not 0 <= rank < 4 or mib <= 0 or not 0 < cap_mib <= 4096:
            raise ValueError("leak: rank 0..3, mib > 0, cap_mib 1..4096")
        self.leak = {"rank": rank, "mib": mib, "cap_mib": cap_mib}
        Path(self.state_dir, LEAK_CAPPED_FILE).unlink(missing_ok=True)
        Path(self.state_dir, LEAK_REQUEST_FILE).write_text(json.dumps(self.leak))

    def stop_leak(self) -> None:
        """The leaking rank lets go of what it kept, at its next update_actor."""
        self.leak = None
        Path(self.state_dir, LEAK_REQUEST_FILE).write_text(json.dumps({"free": True}))

    def leak_capped(self) -> dict[str, Any] | None:
        """``{"rank", "step", "kept_mib"}`` once the leaking rank reached its cap and stopped growing."""
        try:
            return json.loads(Path(self.state_dir, LEAK_CAPPED_FILE).read_text())
        except (OSError, ValueError):
            return None

    def request_nan(self) -> None:
        """Ask the controller to log a NaN ``actor/grad_norm`` at its next step (no Ray needed)."""
        Path(self.state_dir, NAN_REQUEST_FILE).write_text(str(time.time()))

    def logged_metrics(self) -> dict[int, dict[str, float | None]]:
        """step -> what the controller logged through verl's Tracking (its file backend; NaN/inf as None)."""
        out: dict[int, dict[str, float | None]] = {}
        try:
            lines = Path(self.state_dir, METRICS_FILE).read_text().splitlines()
        except OSError:
            return out
        for line in lines:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                doc = json.loads(line)
                out[doc["step"]] = doc["data"]
        return out

    def hung(self) -> bool:
        """True while the hang is in place: the stuck rank writes the marker when it stops taking part."""
        return Path(self.state_dir, HUNG_FILE).exists()

    def hang_info(self) -> dict[str, Any] | None:
        """``{"step", "rank", "pid", "since"}`` of the stuck process while hung, else None; a TP worker or a
        sandbox adds ``"target"`` (``tp1``, ``sandbox``) and ``rank`` is its TP rank (0 for a sandbox)."""
        try:
            return json.loads(Path(self.state_dir, HUNG_FILE).read_text())
        except (OSError, ValueError):
            return None

    def release_hang(self) -> None:
        """Let the stuck process go on (a rank rejoins its collective, a TP worker finishes loading, a
        sandbox returns) so that the job trains on (used by the tests)."""
        Path(self.state_dir, RELEASE_FILE).write_text(str(time.time()))

    def progress(self) -> dict[str, Any]:
        """The controller's last ``{"step", "phase", "hanging", "time"}``; empty before it starts."""
        try:
            return json.loads(Path(self.state_dir, PROGRESS_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def phase_log(self) -> list[dict[str, Any]]:
        """The controller's own clock: ``{"step", "phase", "time"}`` as each phase began (``done`` ends a
        step; ``adv`` runs in the controller), oldest first."""
        out = []
        with contextlib.suppress(OSError):
            for line in Path(self.state_dir, PHASE_LOG).read_text().splitlines():
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def worker_pids(self) -> dict[int, dict[str, Any]]:
        """pid -> {"role", "rank"} for the TaskRunner, every WorkerDict process (colocated roles share a pid;
        the last role to start is named), the rollout actors (``rollout_server``, ``agent_loop``,
        ``reward_loop``) and the engine's processes (``engine_core``, ``tp_worker``)."""
        out: dict[int, dict[str, Any]] = {}
        d = Path(self.state_dir, PIDS_DIR)
        for f in sorted(d.glob("*")) if d.is_dir() else []:
            with contextlib.suppress(OSError, ValueError):
                out[int(f.name)] = json.loads(f.read_text())
        return out

    def stop(self) -> None:
        """Kill the job and shut the local cluster down. Idempotent; safe after a failed start."""
        if self._stopped:
            return
        self._stopped = True
        pids = self.worker_pids()
        try:
            import ray

            if ray.is_initialized():
                ray.shutdown()  # we started the cluster in this process, so this stops gcs, raylet and workers
        finally:
            _kill_leftovers(pids)
            if self.state_dir:
                shutil.rmtree(self.state_dir, ignore_errors=True)


def start_demo(
    hang_after: int | None = 3,
    hang_rank: int = 2,
    num_cpus: int = 16,
    dashboard_port: int | None = None,
    wait_ready_s: float = 120,
    *,
    seed: int = 0,
    scale: float = 1.0,
    enable_profiling: bool = True,
    hang_target: str = "rank",
    leak: dict[str, Any] | None = None,
) -> DemoHandle:
    """Start a local Ray cluster with the dashboard and launch the demo job; return once step 1 runs.

    ``hang_after``: steps that complete before ``hang_target`` hangs in the next step (None: only on
    ``request_hang``); target ``rank``: rank ``hang_rank`` of the actor_rollout/critic group, in
    ``update_actor``; ``tp1``: TP worker 1 of the rollout server, in its weight load; ``sandbox``: a
    reward-loop sandbox child. ``leak``: ``{"rank", "mib", "cap_mib"}`` (``DemoHandle.request_leak``'s
    arguments) makes that rank keep memory after every update_actor from step 1. ``num_cpus``: logical CPUs for
    Ray (the job reserves 9). ``dashboard_port``: None picks a free port. ``scale`` multiplies every phase
    duration (a step is ~10 s at 1.0).

    ``enable_profiling`` starts the dashboard with ``RAY_DASHBOARD_ENABLE_PROFILING=1`` unless this process
    already sets it: Ray 2.60 answers 403 to ``/worker/traceback`` and ``/worker/cpu_profile`` without it
    (``GET /api/profiling_enabled`` tells a client which).

    The driver does not block: the job runs as ``TaskRunner.run``; this returns when all worker actors
    exist, step 1 has started and the dashboard answers, or raises ``TimeoutError`` once ``wait_ready_s`` pass
    without the controller moving on a stage of its start.
    On any error or Ctrl-C the cluster is stopped before the exception propagates. Must not be called while
    this process is connected to a Ray cluster; after ``stop()`` it can be called again.
    """
    import ray

    if ray.is_initialized():
        raise RuntimeError("start_demo: this process is already connected to a Ray cluster")
    if not 0 <= hang_rank < 4:
        raise ValueError("hang_rank must be a rank of the 4-rank actor_rollout group (0..3)")
    if hang_target not in HANG_TARGETS:
        raise ValueError(f"hang_target must be one of {', '.join(HANG_TARGETS)}")
    port = dashboard_port or _free_port()
    state_dir = tempfile.mkdtemp(prefix="verltop-demo-")
    handle = DemoHandle(address=f"http://127.0.0.1:{port}", token=None,
                        hang_file=str(Path(state_dir, HANG_REQUEST_FILE)), state_dir=state_dir, leak=leak)
    # Ray's processes inherit the env at spawn time; ours is restored right after ray.init.
    saved_env = {k: os.environ.get(k) for k in (PROFILING_ENV, "PATH")}
    if enable_profiling and saved_env[PROFILING_ENV] is None:
        os.environ[PROFILING_ENV] = "1"
    # The dashboard agent runs `shutil.which("py-spy")`; in an unactivated venv (.venv/bin/verltop) py-spy
    # sits next to sys.executable but not on PATH, and the agent answers "py-spy is not installed".
    bindir = os.path.dirname(sys.executable)
    if shutil.which("py-spy") is None and shutil.which("py-spy", path=bindir):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    try:
        ray.init(
            # always a new cluster of our own: with no address, ray.init() joins a cluster that `ray start`
            # left running on this machine (and then refuses num_cpus)
            address="local",
            include_dashboard=True,
            dashboard_host="127.0.0.1",
            dashboard_port=port,
            num_cpus=num_cpus,
            num_gpus=0,
            # The TUI shares this process' terminal: worker prints go to Ray's log files, not stdout.
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        _restore_env(saved_env)
        handle.token = _current_token()
        from verltop.demo.job import TaskRunner

        handle._runner = TaskRunner.remote()
        handle._run_ref = handle._runner.run.remote({
            "state_dir": state_dir, "hang_file": handle.hang_file, "hang_after": hang_after,
            "hang_rank": hang_rank, "hang_target": hang_target, "seed": seed, "scale": scale, "max_steps": None,
            "leak": leak,
        })
        _wait_ready(handle, wait_ready_s)
    except BaseException:  # Ctrl-C and timeouts too: never leave a half-started cluster behind
        _restore_env(saved_env)
        handle.stop()
        raise
    return handle


def _wait_ready(handle: DemoHandle, timeout_s: float) -> None:
    """Wait for step 1 and the dashboard; give up after ``timeout_s`` without news from the controller (each
    stage of its start counts as news: a loaded machine is slow, not stuck)."""
    import ray

    deadline = time.monotonic() + timeout_s
    last = handle.progress()
    while True:
        now = handle.progress()
        if now.get("step", 0) >= 1 and _dashboard_answers(handle):
            return
        if now != last:
            last, deadline = now, time.monotonic() + timeout_s
        done, _ = ray.wait([handle._run_ref], timeout=0)
        if done:
            ray.get(done[0])  # raises the controller's error
            raise RuntimeError("demo controller returned before step 1")
        if time.monotonic() > deadline:
            roles = sorted({f"{w.get('role')}:{w.get('rank')}" for w in handle.worker_pids().values()})
            raise TimeoutError(f"demo job not at step 1: no progress for {timeout_s:.0f}s (progress: {now}; "
                               f"processes up: {', '.join(roles) or 'none'})")
        time.sleep(0.5)


def _dashboard_answers(handle: DemoHandle) -> bool:
    req = urllib.request.Request(f"{handle.address}/api/version")
    if handle.token:
        req.add_header("Authorization", f"Bearer {handle.token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def _current_token() -> str | None:
    """The token Ray authenticates with in this process, or None when token auth is off."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        return None
    try:
        from ray._raylet import AuthenticationTokenLoader

        tok = AuthenticationTokenLoader.instance().get_raw_token()
        if tok:
            return str(tok).strip()
    except (ImportError, AttributeError, RuntimeError):
        pass
    # Same search order as Ray's loader.
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def _restore_env(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def dashboard_port_for_cli(preferred: int = 8265) -> int | None:
    """Ray's usual dashboard port when it is free, so that ``verltop`` in another shell finds the demo
    without ``--address``; None (a free port) when something holds it."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            return None
    return preferred


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_leftovers(pids: dict[int, dict[str, Any]], grace_s: float = 0.5) -> None:
    """SIGKILL demo workers still alive ``grace_s`` after ray.shutdown(), then wait until they are reaped.

    Measured on Ray 2.60: once their raylet is gone, WorkerDict processes spin for ~5 s before exiting
    (hung ones included), and an exiting process has an empty cmdline, so they are identified up front.
    """
    import psutil

    procs: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.Error, IndexError):
            p = psutil.Process(pid)
            cmd = p.cmdline()
            # a Ray worker or the demo engine's process (titled, or not when setproctitle is missing), not a
            # reused pid
            if cmd[0].startswith(("ray::", "VLLM::")) or "verltop.demo.engine" in " ".join(cmd):
                procs.append(p)

    def running() -> list[psutil.Process]:
        out = []
        for p in procs:
            with contextlib.suppress(psutil.Error):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:  # is_running() checks create time
                    out.append(p)
        return out

    deadline = time.monotonic() + grace_s
    while (left := running()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    if left:
        log.info("verltop demo: killed %d worker(s) left after ray.shutdown()", len(left))
    # Orphans are reaped by init; wait a little so that `ps` is clean when stop() returns.
    deadline = time.monotonic() + 5
    while any(p.is_running() for p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
