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

# A head node's dashboard agent listens on Ray's fixed 52365 unless told otherwise; 0 lets it take any free port
# (it reports the port to the GCS, as worker nodes of ray.cluster_utils do), so a cluster_utils cluster can run
# beside the demo's. Spread into ``head_node_args``.
AGENT_PORT = {"dashboard_agent_listen_port": 0}
