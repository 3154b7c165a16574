"""Process trees of other nodes: a node that leaves the cluster takes its tree with it (a long run sees
many nodes come and go; their trees must not pile up)."""

from __future__ import annotations

from verltop.analysis.stalls import StallSettings
from verltop.engine.monitor import Intervals, Monitor
from verltop.model import Node, ProcTree
from verltop.sources import dashboard as D
from verltop.sources.config import Endpoint


def test_a_node_leaving_drops_its_process_tree():
    mon = Monitor(Endpoint("http://127.0.0.1:9", "--address", None, None), Intervals(), StallSettings(),
                  use_local=False)
    mon.remote.ask(["n1", "n2", "n3"])
    for n in ("n1", "n2", "n3"):
        mon.remote.trees[n] = ProcTree(100.0, roots=(1,), node_id=n)
    nodes = [Node("n1", "10.0.0.1", "a"), Node("n2", "10.0.0.2", "b", state="DEAD")]  # n3: gone from the list
    mon.take_nodes(D.Result(nodes, None, 101.0), None)
    assert set(mon.remote.trees) == {"n1"}
    assert list(mon.remote.asked) == ["n1"]  # not asked about again: not re-read, not shown
    assert [t.node_id for t in mon.data().remote_trees] == ["n1"]
    mon.take_nodes(D.Result([], None, 102.0), None)  # a glitch: a cluster always has a node
    assert set(mon.remote.trees) == {"n1"}
    mon.take_nodes(D.Result([Node("n4", "10.0.0.4", "d")], None, 103.0), None)
    assert mon.remote.trees == {} and not mon.remote.asked
