"""The dashboard of the Ray cluster last started on this machine, read from its session directory.

Ray 2.60 keeps the dashboard's URL only in the GCS (internal KV ``dashboard:webui:url``), which needs a gRPC
client; the files it leaves are enough: the dashboard logs ``Dashboard head http address: HOST:PORT``
(``ray/dashboard/http_server_head.py``) into ``<temp>/ray/session_latest/logs/dashboard.log`` once it has
bound its port (after any retries, so it is the port really in use); the GCS's port is in
``session_latest/gcs_server_port_<node id>``. ``<temp>`` is ``$RAY_TMPDIR`` or the
system's temp directory, as in ``ray._common.utils.get_ray_temp_dir``. Read-only; no ray import.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

_LINE = re.compile(rb"Dashboard head http address: (\S+)")
_READ_AT_MOST = 4 << 20  # the line is logged at start; a rotated log keeps it in its oldest part


def ray_temp_dir(env: dict[str, str] | None = None) -> Path:
    """Where Ray keeps its sessions: ``$RAY_TMPDIR/ray``, else ``/tmp/ray`` (the system's temp dir)."""
    env = os.environ if env is None else env
    return Path(env.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray"


def session_dashboard(env: dict[str, str] | None = None, session: Path | None = None) -> str | None:
    """``http://HOST:PORT`` of the latest local session's dashboard (or of the ``session`` directory given),
    or None when there is none to read."""
    logs = (session or ray_temp_dir(env) / "session_latest") / "logs"
    try:
        names = sorted((p for p in logs.iterdir() if p.name.startswith("dashboard.log")),
                       key=lambda p: p.name != "dashboard.log")  # the live log first, then rotated ones
    except OSError:
        return None
    for p in names:
        try:
            with p.open("rb") as f:
                found = _LINE.findall(f.read(_READ_AT_MOST))
        except OSError:
            continue
        if found:
            addr = found[-1].decode("ascii", "replace")
            return addr if "://" in addr else "http://" + addr
    return None


def session_gcs_ports(env: dict[str, str] | None = None, session: Path | None = None) -> set[int]:
    """The GCS ports of the latest local session, or of the ``session`` directory given
    (``gcs_server_port_<node id>``, as Ray 2.60's ``node.py`` writes them): a ``RAY_ADDRESS`` of ``host:port``
    with one of them names this session's cluster."""
    d = session or ray_temp_dir(env) / "session_latest"
    out = set()
    try:
        for p in d.glob("gcs_server_port_*"):
            v = p.read_text().strip()
            if v.isdigit():
                out.add(int(v))
    except OSError:
        pass
    return out


def answers(url: str, timeout_s: float = 0.3) -> bool:
    """Whether something accepts a TCP connection at the URL's host and port (nothing is sent)."""
    try:
        u = urlsplit(url)
        host, port = u.hostname or "127.0.0.1", u.port or (443 if u.scheme == "https" else 80)
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def gcs_port_for_dashboard(url: str, env: dict[str, str] | None = None) -> int | None:
    """The GCS port of the local session whose dashboard listens at ``url``, or None when no session on this
    machine logged that address. Several clusters can run on one machine; ray.init's "auto" joins the newest,
    which need not be the one verltop watches."""
    want = urlsplit(url if "://" in url else "http://" + url)
    try:
        sessions = sorted(ray_temp_dir(env).glob("session_2*"), reverse=True)  # newest first
    except OSError:
        return None
    for d in sessions[:32]:
        got = session_dashboard(env, session=d)
        if got is None:
            continue
        have = urlsplit(got)
        if have.port == want.port and _same_host(have.hostname, want.hostname):
            ports = session_gcs_ports(env, session=d)
            return next(iter(ports)) if len(ports) == 1 else None
    return None


def _same_host(a: str | None, b: str | None) -> bool:
    loop = {None, "", "localhost", "127.0.0.1", "0.0.0.0", "::1"}
    return a == b or (a in loop and b in loop)
