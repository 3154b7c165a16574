"""The test side of ``doctor_cluster.py``: starts it in its own process, sends it commands, runs ``verltop
doctor`` against it as a user on the head would."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import Dashboard
from doctor_cluster import TOKEN

from tests.jsonlines import read_json_line

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


class DoctorCluster:
    def __init__(self, state: Path, plain: bool = False) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        self.log = open(state / "host.log", "wb")  # noqa: SIM115 - closed in stop()
        self.plain = plain
        self.proc = subprocess.Popen([sys.executable, str(HERE / "doctor_cluster.py"), str(state / "state"),
                                      *(["--plain"] if plain else [])],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, text=True,
                                     start_new_session=True)
        t0 = time.monotonic()
        self.info = self._read(180)
        self.startup_s = time.monotonic() - t0
        self.address: str = self.info["address"]
        self.token = TOKEN
        self.nodes: dict[str, str] = self.info["nodes"]
        self.dashboard = Dashboard(self)  # type: ignore[arg-type]  # needs .address and .token only

    def _read(self, timeout_s: float) -> dict[str, Any]:
        got = read_json_line(self.proc, timeout_s)
        if got is None:
            self.stop()
            raise RuntimeError(f"the doctor cluster did not answer (log: {self.log.name})")
        return got

    def send(self, cmd: str, timeout_s: float = 60) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self._read(timeout_s)

    def env(self) -> dict[str, str]:
        """verltop as a user on the head runs it: the token and the GCS address, no other RAY_ variable."""
        e = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        e.update(HOME="/nonexistent-verltop-home", RAY_AUTH_TOKEN=TOKEN, RAY_ADDRESS=self.info["gcs"])
        return e

    def doctor(self, *args: str, timeout: float = 180, env: dict[str, str] | None = None
               ) -> tuple[subprocess.CompletedProcess[str], float]:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "verltop", "doctor", "--address", self.address, *args],
                           capture_output=True, text=True, env=env or self.env(), timeout=timeout, cwd=ROOT)
        return p, time.monotonic() - t0

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.log.close()
