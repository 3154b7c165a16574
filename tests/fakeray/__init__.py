"""A synthetic Ray 2.60 dashboard for benchmarks and fault tests.

``cluster.FakeCluster`` generates a verl-shaped Ray cluster (deterministic for a seed, evolving with a
clock); ``server.FakeDashboard`` serves it over real HTTP with the dashboard's endpoints and JSON shapes.
"""

from tests.fakeray.cluster import PLANTED_SECRETS, ClusterConfig, FakeClock, FakeCluster, Phase
from tests.fakeray.server import FakeDashboard, Faults, make_app

__all__ = [
    "PLANTED_SECRETS",
    "ClusterConfig",
    "FakeClock",
    "FakeCluster",
    "FakeDashboard",
    "Faults",
    "Phase",
    "make_app",
]
