"""Shared by the fault tests: run the CLI, read everything a TUI shows, drive the real TUI in a pty."""

from __future__ import annotations

import fcntl
import html
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from tests.net import NO_RAY_CLUSTER
from tests.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """This process' environment without RAY_ variables and with a home that has no ~/.ray/auth_token (but
    with the stand-in GCS address that keeps a test on a synthetic dashboard off real clusters, where set)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    if os.environ.get("RAY_ADDRESS") == NO_RAY_CLUSTER:
        e["RAY_ADDRESS"] = NO_RAY_CLUSTER
    e["HOME"] = "/nonexistent-verltop-home"
    e.update(extra)
    return e


def verltop(*args: str, env: dict[str, str] | None = None, timeout: float = 90,
            cwd: Path | str | None = None) -> subprocess.CompletedProcess[str]:
    """``verltop ARGS`` as a user runs it: a real process."""
    return subprocess.run([sys.executable, "-m", "verltop", *args], capture_output=True, text=True,
                          env=env if env is not None else clean_env(), timeout=timeout, cwd=cwd or ROOT)


def assert_one_line_error(p: subprocess.CompletedProcess[str], *needles: str, rc: int = 2) -> str:
    """Non-zero exit, nothing on stdout, exactly one ``verltop: error:`` line on stderr, no traceback."""
    assert p.returncode == rc, (p.returncode, p.stderr[-2000:])
    assert p.stdout == "", p.stdout[:500]
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("verltop: error: "), p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def svg_text(svg: str) -> str:
    """The characters of a Textual SVG screenshot, tags removed."""
    return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


def screen_text(app) -> str:
    """What the current screen shows (the screenshot) plus the full text of every widget on it, scrolled
    out of view or not: Static contents, TextLines, DataTable and ActorTable rows."""
    from textual.widgets import DataTable, Static

    from verltop.ui.widgets.actor_table import ActorTable
    from verltop.ui.widgets.text_line import TextLine

    parts = [svg_text(app.export_screenshot())]
    for w in app.screen.walk_children(with_self=False):
        if isinstance(w, Static):
            parts.append(str(w.render()))
        elif isinstance(w, TextLine):
            parts.append(w.text.plain)
        elif isinstance(w, ActorTable):
            parts += [" ".join(map(str, w.get_row(k))) for k in w.keys]
        elif isinstance(w, DataTable):
            parts += [" ".join(map(str, w.get_row_at(i))) for i in range(w.row_count)]
    return "\n".join(parts)


class PtyTui:
    """The real ``verltop`` TUI in a pseudo-terminal: keys in, raw terminal output collected."""

    def __init__(self, *args: str, env: dict[str, str], cols: int = 160, rows: int = 45,
                 cwd: Path | str | None = None, python: tuple[str, ...] = ("-m", "verltop")) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**env, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
        self.proc = subprocess.Popen([sys.executable, *python, *args], stdin=slave, stdout=slave,
                                     stderr=slave, env=env, cwd=cwd or ROOT, start_new_session=True)
        os.close(slave)
        self.master = master
        self.out = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                b = os.read(self.master, 65536)
            except OSError:
                return
            if not b:
                return
            self.out += b

    def press(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def wait_output(self, needle: bytes, timeout: float = 20.0) -> None:
        def shown() -> bool:
            if needle in self.out:
                return True
            assert self.proc.poll() is None, f"verltop exited ({self.proc.returncode}): {bytes(self.out[-2000:])!r}"
            return False

        wait_until(shown, timeout, f"{needle!r} on the terminal", detail=lambda: bytes(self.out[-2000:]))

    def quit(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.press("q")
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        time.sleep(0.1)
        os.close(self.master)
        return self.proc.returncode


class FakeDashboardProcess:
    """The synthetic dashboard (``python -m scripts.fake_dashboard``) in its own process: at 10,000 actors its CPU
    must not be the test process' (the TUI under Pilot runs there)."""

    def __init__(self, *args: str) -> None:
        from tests.net import free_port

        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "scripts.fake_dashboard", "--port",
                                      str(port), *args], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        if "dashboard at" not in first:
            self.stop()
            raise RuntimeError(f"fake dashboard did not start: {first}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

    def __enter__(self) -> FakeDashboardProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
