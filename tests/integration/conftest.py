"""Fixtures for tests against a real local Ray cluster running the verltop demo job (CPU, gloo).

Contract (other test modules rely on it):

- ``demo`` (session scope): ONE cluster per pytest session, started on first use with
  ``start_demo(hang_after=None)`` (~30 s on 2 cores) and stopped at session end, so no raylet, GCS or
  ``ray::`` worker outlives the session. The job trains forever (about 10 s per PPO step) and is healthy
  whenever a test that uses only ``demo`` starts. Never call ``demo.stop()`` or hang it without releasing.
- ``hung_demo`` (module scope): the same handle with a hang injected: rank 2 of the actor_rollout/critic
  group sits in ``_stuck_rollout`` inside ``WorkerDict.actor_rollout_update_actor`` and ranks 0, 1, 3
  block in ``torch.distributed.all_reduce``; ``TaskRunner.run`` waits in ``ray.get``. Set up on the first
  test of a module that asks for it (wait: up to one step, ~10-20 s); torn down at the end of that module
  by releasing the stuck rank and waiting until the job has finished that ``update_actor``. So within a
  module, put tests that need a healthy job BEFORE the first test that uses ``hung_demo``.
- ``dashboard`` (session scope): ``dashboard(path, **params)`` GETs ``demo.address + path`` with the
  bearer token and returns the decoded JSON (or text); ``dashboard.raw(path, token=..., **params)``
  returns ``(status, body)`` without raising on HTTP errors.

Mark every test here with ``ray`` (``pytest -m "not ray"`` then deselects them). Without ray, torch or verl
installed, no test module in this directory is collected.
"""

from __future__ import annotations

import importlib.util
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from verltop.demo.cluster import DemoHandle

# Without the demo extras, collect nothing here rather than fail at import.
if any(importlib.util.find_spec(m) is None for m in ("ray", "torch", "verl")):
    collect_ignore_glob = ["test_*.py"]

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


@pytest.fixture(scope="session")
def demo() -> Iterator[DemoHandle]:
    from verltop.demo.cluster import start_demo

    handle = start_demo(hang_after=None)
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
    deadline = time.monotonic() + HANG_WAIT_S
    while not demo.hung():
        assert time.monotonic() < deadline, f"no hang after {HANG_WAIT_S}s: {demo.progress()}"
        time.sleep(0.5)
    hung_step = demo.progress().get("step")
    yield demo
    # Let the stuck rank rejoin the all_reduce; the job must then get past that update_actor.
    demo.release_hang()
    deadline = time.monotonic() + RELEASE_WAIT_S
    while True:
        p = demo.progress()
        if not demo.hung() and (p.get("step", 0) > hung_step or p.get("phase") in ("update_weights", "done")):
            break
        assert time.monotonic() < deadline, f"job did not resume within {RELEASE_WAIT_S}s: {p}"
        time.sleep(0.5)
