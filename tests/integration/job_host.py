"""A real Ray job in a host process of its own, driven with JSON lines: both sides.

The job side (``serve``, run by ``python some_job.py host --state-dir DIR``): its stdout belongs to the protocol
(everything the job prints goes to stderr, the host log); each line it writes is a JSON reply with ``ok``; it
reads one JSON command a line from stdin until ``{"cmd": "stop"}`` or EOF.

The pytest side (``JobHost``): starts the script in a session of its own (so no Ray process outlives it), reads
replies with a deadline, sends commands, runs the ``verltop`` CLI against its dashboard, and stops it.

Never from the pytest process: it may be the demo's driver (tests/integration/conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

HERE = Path(__file__).resolve().parent
EXE = Path(sys.executable).parent / "verltop"


class Host(Protocol):
    info: dict[str, Any]  # the first reply (``ok`` added)

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]: ...

    def close(self) -> None: ...


def serve(make: Callable[[str, Callable[[dict[str, Any]], None]], Host], argv: list[str]) -> int:
    """The job side: ``make(state_dir, say)`` builds the host (``say`` writes a reply line at once: the dashboard's
    address before a slow setup, say); its ``info`` is the first reply after it, then commands until stop."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--state-dir", required=True)
    args = p.parse_args(argv)
    proto = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol owns the real stdout
    os.dup2(2, 1)

    def say(d: dict[str, Any]) -> None:
        proto.write(json.dumps({"ok": True, **d}) + "\n")

    try:
        host = make(args.state_dir, say)
    except BaseException:
        proto.write(json.dumps({"ok": False, "error": traceback.format_exc()}) + "\n")
        raise
    say(host.info)
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            if cmd["cmd"] == "stop":
                break
            try:
                reply = {"ok": True, **host.handle(cmd)}
            except Exception:  # noqa: BLE001 - the test sees the traceback
                reply = {"ok": False, "error": traceback.format_exc()}
            proto.write(json.dumps(reply) + "\n")
    finally:
        host.close()
    return 0


class JobHost:
    """The pytest side: ``script`` (a file beside this one) as ``host --state-dir TMP/state``."""

    def __init__(self, tmp: Path, script: str, env: dict[str, str] | None = None) -> None:
        import psutil  # noqa: F401 - stop() needs it; fail here, not half-way

        base = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
        base["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), base.get("PYTHONPATH")) if p)
        base["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), base.get("PATH", "")))
        base.update(env or {})
        self.state = tmp / "state"
        self.state.mkdir()
        self.log = open(tmp / "host.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, str(HERE / script), "host", "--state-dir", str(self.state)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=base, text=True,
                                     start_new_session=True)
        self.replies: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.replies.put(ln) for ln in self.proc.stdout] + [self.replies.put("")],
                         daemon=True).start()
        self.env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
        self.address = ""

    def reply(self, timeout: float) -> dict[str, Any]:
        try:
            line = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"job host silent for {timeout:.0f}s (log {self.log.name})") from None
        assert line, f"job host exited (rc={self.proc.poll()}, log {self.log.name})"
        r = json.loads(line)
        assert r.get("ok"), r.get("error")
        return r

    def send(self, **kw: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(kw) + "\n")
        self.proc.stdin.flush()

    def cmd(self, **kw: Any) -> dict[str, Any]:
        self.send(**kw)
        return self.reply(120)

    def release(self, tag: str) -> None:
        (self.state / f"release-{tag}").touch()

    def verltop(self, *args: str) -> dict[str, Any]:
        p = subprocess.run([str(EXE), *args, "--json", "--address", self.address], capture_output=True, text=True,
                           timeout=120, env=self.env)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout)

    def stop(self) -> None:
        import psutil

        kids = []
        with contextlib.suppress(psutil.Error):
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        with contextlib.suppress(OSError):
            self.send(cmd="stop")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for k in kids:
            with contextlib.suppress(psutil.Error):
                k.kill()
        self.log.close()
