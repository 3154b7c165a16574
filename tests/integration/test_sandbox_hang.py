"""The demo's reward sandbox that never returns: the child under ``reward_loop_worker_0``, and who waits on it.

Its own module: ``sandbox_hung_demo`` hangs the shared demo job until the module ends (see conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.wait import wait_until

pytestmark = pytest.mark.ray


def test_a_sandbox_that_never_returns_sits_under_the_reward_loop(sandbox_hung_demo):
    demo = sandbox_hung_demo
    info = demo.hang_info()
    assert info["target"] == "sandbox"
    p = demo.progress()
    assert p["phase"] == "gen" and p["hanging"], p
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
    if demo.token:
        env["RAY_AUTH_TOKEN"] = demo.token
    # Ray's task events reach the dashboard about a second after a task starts: the sandbox may be up before
    # its compute_score is listed as running, so ask again for a while
    def snapshot() -> dict[str, dict]:
        out = subprocess.run([sys.executable, "-m", "verltop", "--address", demo.address, "snapshot", "--json"],
                             capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        return {a["actor_name"]: a for a in json.loads(out.stdout)["actors"] if a["actor_name"]}

    actors = wait_until(lambda: (a := snapshot())["reward_loop_worker_0"]["task"] == "compute_score" and a, 30,
                        "compute_score running on reward_loop_worker_0", step=1.0)
    loop = actors["reward_loop_worker_0"]
    sandbox = [x for x in loop["processes"] if x["pid"] == info["pid"]]
    assert sandbox and sandbox[0]["ppid"] == loop["pid"] and sandbox[0]["title"].endswith("demo/sandbox.py"), loop
    # the agent loop that asked for the score is still in generate_sequences, as is the controller
    assert actors["agent_loop_worker_0"]["task"] == "generate_sequences", actors["agent_loop_worker_0"]
    assert loop["task"] == "compute_score", loop
