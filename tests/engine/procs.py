"""Real processes and servers for the watch tests: a chat tool's webhook endpoint, the synthetic dashboard on
a fixed port (killed and started again there), and ``verltop watch`` itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.faults.helpers import ROOT, clean_env
from tests.wait import wait_until
from verltop.engine.recording_format import RecordingError
from verltop.engine.recording_reader import Recording


class Hook:
    """A chat tool's webhook endpoint: answers with ``statuses`` in turn (then 200), records each POST."""

    def __init__(self, statuses: list[int] | None = None, delay_s: float = 0.0) -> None:
        self.statuses = list(statuses or [])
        self.delay_s = delay_s
        self.posts: list[tuple[str, dict, dict]] = []
        hook = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hook.posts.append((self.path, dict(self.headers), json.loads(body)))
                time.sleep(hook.delay_s)
                status = hook.statuses.pop(0) if hook.statuses else 200
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/B000/SECRETKEY"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Dashboard:
    """``python -m scripts.fake_dashboard`` on a fixed port, so that it can be killed and started again there."""

    def __init__(self, port: int, log: Path, *args: str) -> None:
        self.port, self.log, self.args = port, log, args
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Dashboard:
        out = open(self.log, "a")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen([sys.executable, "-m", "scripts.fake_dashboard", "--port",
                                      str(self.port), *self.args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        out.close()
        proc = self.proc

        def listening() -> bool:
            assert proc.poll() is None, f"the fake dashboard exited: {self.log.read_text()[-2000:]}"
            return "dashboard at" in self.log.read_text()

        wait_until(listening, 30, "the fake dashboard to listen", detail=lambda: self.log.read_text()[-2000:])
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


class Watch:
    """``verltop watch`` in its own process, stdout to a file."""

    def __init__(self, d: Path, url: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.dir = d
        self.out = d.parent / f"{d.name}.out"
        with open(self.out, "w") as f:
            self.proc = subprocess.Popen([sys.executable, "-m", "verltop", "watch", "--address", url, "--dir",
                                          str(d), *args], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                         env=clean_env(PYTHONPATH=str(ROOT), **(env or {})), start_new_session=True)

    def text(self) -> str:
        return self.out.read_text()

    def log(self) -> str:
        p = self.dir / "watch.log"
        return p.read_text() if p.exists() else ""

    def incidents(self, kinds: tuple[str, ...] = ("hang", "death")) -> list[Path]:
        """The incident directories written so far, oldest first, of these kinds (a stall's or a death's by
        default: the demo's training also gives ``anomaly`` and ``slow`` ones)."""
        d = self.dir / "incidents"
        if not d.is_dir():
            return []
        out = []
        for p in sorted(d.iterdir()):
            try:
                doc = json.loads((p / "incident.json").read_text())
            except (OSError, ValueError):  # not written yet, or being written
                continue
            if doc.get("kind", "hang") in kinds:
                out.append(p)
        return out

    def recording(self) -> Recording | None:
        """The recording as it stands (each frame is one write: it reads while being written); None before
        its first snapshot."""
        try:
            return Recording.open(self.dir)
        except RecordingError:
            return None

    def recorded(self) -> int:
        """How many snapshots the recording holds now."""
        rec = self.recording()
        return len(rec.snaps) if rec else 0

    def wait(self, cond, timeout: float, what: str) -> None:
        def ready() -> object:
            if v := cond():
                return v
            assert self.proc.poll() is None, f"watch exited ({self.proc.returncode}): {self.text()[-3000:]}"
            return v

        wait_until(ready, timeout, what, step=0.25, detail=lambda: self.text()[-3000:])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                raise
        return self.proc.returncode
