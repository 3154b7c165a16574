"""The one ``free_port`` of the tests (programs under tests/ that run outside pytest import it as ``net``
with tests/ on ``sys.path``)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A GCS address where nothing listens (port 1 is privileged and unused): a probe given it fails at once, as on
# a machine without Ray. Tests on synthetic dashboards run with it, so they never ray.init into a real cluster
# that runs on this machine meanwhile (the other test worker's).
NO_RAY_CLUSTER = "127.0.0.1:1"
