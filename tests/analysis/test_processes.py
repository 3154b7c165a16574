"""Process trees joined to actors: descendants under their actor, GPU memory attributed to the child and
summed on the actor, orphans. GPU memory comes from NVML-like samples and from the dashboard's
``processesPids`` (parsed from a real Ray 2.60 ``/nodes/{id}`` answer with the child's pid added), since no
GPU is at hand here."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from verltop.analysis.history import TaskHistory
from verltop.analysis.snapshot_build import ClusterData, build_snapshot
from verltop.model import Gpu, Node, ProcStat, ProcTree, RawActor
from verltop.sources import parse
from verltop.text.contract import actor_json, snapshot_json

GIB = 1 << 30
NOW = 1_800_000_000.0
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu-run" / "run1" / "nodes_NODE_ID.json"


def actor(aid: str, pid: int, node: str = "n1", name: str | None = None, cls: str = "vLLMHttpServer",
          state: str = "ALIVE") -> RawActor:
    return RawActor(actor_id=aid, class_name=cls, state=state, name=name or aid, node_id=node, pid=pid)


def proc(pid: int, ppid: int, title: str, rss: int = 100 << 20, cpu: float | None = 5.0) -> ProcStat:
    return ProcStat(pid=pid, cpu_percent=cpu, rss_bytes=rss, title=title, ppid=ppid)


def gpu(index: int, procs: list[tuple[int, int | None]], total: int = 140 * GIB, util: float = 90.0) -> Gpu:
    return Gpu(index=index, name="NVIDIA H200", util_percent=util, mem_used_bytes=sum(m or 0 for _, m in procs),
               mem_total_bytes=total, processes=tuple((p, m, None) for p, m in procs))


SERVER_TREE = (proc(1001, 1000, "VLLM::EngineCore_DP0"), proc(1002, 1001, "VLLM::Worker_TP0"),
               proc(1003, 1001, "VLLM::Worker_TP1"))


HEAD = (Node("n1", "10.0.0.1", "h1", is_head=True, mem_total_bytes=64 * GIB),)


def snap(actors, local=None, gpus=None, nodes=HEAD, remote=(), local_ids=frozenset({"n1"})):
    data = ClusterData(address="x", actors=tuple(actors), nodes=tuple(nodes), local_node_ids=local_ids,
                       local_gpus=gpus, local_tree=local, remote_trees=tuple(remote))
    return build_snapshot(data, TaskHistory(), NOW)


def test_children_under_their_actor_with_gpu_memory_summed_on_it():
    # TP=2 on GPUs 0 and 1: the server itself holds nothing, its workers 40 GiB each
    tree = ProcTree(NOW, roots=(1000, 2000), procs=SERVER_TREE)
    s = snap([actor("srv", 1000, name="vllm_server_0_0"), actor("alw", 2000, cls="AgentLoopWorker")], tree,
             (gpu(0, [(1002, 40 * GIB)], util=99.0), gpu(1, [(1003, 40 * GIB)])))
    srv = next(a for a in s.actors if a.actor_id == "srv")
    assert [(p.pid, p.ppid, p.title, p.depth) for p in srv.processes] == [
        (1001, 1000, "VLLM::EngineCore_DP0", 1), (1002, 1001, "VLLM::Worker_TP0", 2),
        (1003, 1001, "VLLM::Worker_TP1", 2)]
    assert [(p.gpu_index, p.gpu_mem_bytes) for p in srv.processes] == [(None, None), (0, 40 * GIB), (1, 40 * GIB)]
    assert srv.gpu_mem_bytes == 80 * GIB and srv.gpu_index == 0 and srv.gpu_util_percent == 99.0
    assert srv.gpu_mem_total_bytes == 280 * GIB  # the bar is against both GPUs it uses
    alw = next(a for a in s.actors if a.actor_id == "alw")
    assert alw.processes == () and alw.processes_read_at == NOW and actor_json(alw)["processes"] == []
    assert snapshot_json(s)["orphans"] == []


def test_actor_with_its_own_gpu_keeps_it_and_adds_the_childrens():
    tree = ProcTree(NOW, roots=(1000,), procs=SERVER_TREE[:2])
    s = snap([actor("srv", 1000)], tree, (gpu(3, [(1000, 2 * GIB)]), gpu(5, [(1002, 30 * GIB)])))
    a = s.actors[0]
    assert (a.gpu_index, a.gpu_mem_bytes) == (3, 32 * GIB)


def test_not_read_is_null_not_empty():
    tree = ProcTree(NOW, roots=(1000,), procs=SERVER_TREE)
    # an actor on another node (no probe read there), one newer than the tree, and a dead one
    s = snap([actor("srv", 1000), actor("far", 7, node="n2"), actor("new", 3000), actor("dead", 4000, state="DEAD")],
             tree, nodes=(Node("n1", "10.0.0.1", "h1"), Node("n2", "10.0.0.2", "h2")))
    by = {a.actor_id: actor_json(a)["processes"] for a in s.actors}
    assert by["far"] is None and by["new"] is None and by["dead"] is None and len(by["srv"]) == 3
    assert snap([actor("srv", 1000)]).orphans is None  # no tree anywhere: orphans unknown


def test_orphans_name_the_dead_actor_and_hold_gpu_memory():
    # the server was SIGKILLed: its engine and workers were reparented to init; verltop had seen them below it
    loose = (proc(1001, 1, "VLLM::EngineCore_DP0"), proc(1002, 1001, "VLLM::Worker_TP0"),
             proc(1003, 1001, "VLLM::Worker_TP1"), proc(5000, 1, "python3 train_other.py"))
    tree = ProcTree(NOW, roots=(2000,), loose=loose, left_by=((1001, 1000), (1002, 1000), (1003, 1000)))
    s = snap([actor("srv", 1000, name="vllm_server_0_0", state="DEAD"), actor("alw", 2000, cls="AgentLoopWorker")],
             tree, (gpu(0, [(1002, 40 * GIB), (5000, 3 * GIB)]), gpu(1, [(1003, 40 * GIB)])))
    j = snapshot_json(s)["orphans"]
    assert [(o["pid"], o["ppid"], o["title"], o["gpu_index"], o["gpu_mem_bytes"], o["actor_id"], o["node_ip"])
            for o in j] == [(1001, 1, "VLLM::EngineCore_DP0", None, None, "srv", "10.0.0.1"),
                            (1002, 1001, "VLLM::Worker_TP0", 0, 40 * GIB, "srv", "10.0.0.1"),
                            (1003, 1001, "VLLM::Worker_TP1", 1, 40 * GIB, "srv", "10.0.0.1"),
                            (5000, 1, "python3 train_other.py", 0, 3 * GIB, None, "10.0.0.1")]
    assert [o.depth for o in s.orphans] == [1, 2, 2, 1]


def _dashboard_node(child_pids: dict[int, int]) -> Node:
    """The real /nodes/{id} answer of a 1-GPU node, with child processes holding GPU memory added to
    ``processesPids`` (MiB, as the dashboard reports them)."""
    doc = copy.deepcopy(json.loads(FIXTURE.read_text()))
    g = doc["data"]["detail"]["gpus"][0]
    g["processesPids"] += [{"pid": pid, "gpuMemoryUsage": mib, "gpuUtilization": 50} for pid, mib in child_pids.items()]
    node = parse.node_detail(doc)
    assert node is not None
    return node


def test_remote_tree_through_a_probe_and_memory_from_the_dashboard():
    node = _dashboard_node({9001: 4326, 9002: 512})
    far = RawActor(actor_id="srv", class_name="vLLMHttpServer", state="ALIVE", name="vllm_server_0_0",
                   node_id=node.node_id, pid=1851)
    tree = ProcTree(NOW - 3, roots=(1851,), procs=(proc(9001, 1851, "VLLM::EngineCore"), proc(9002, 9001, "VLLM::Worker")),
                    node_id=node.node_id)
    s = snap([far], nodes=(node,), remote=(tree,), local_ids=frozenset())
    a = s.actors[0]
    assert [(p.pid, p.gpu_index, p.gpu_mem_bytes) for p in a.processes] == [
        (9001, 0, 4326 << 20), (9002, 0, 512 << 20)]
    assert a.processes_read_at == NOW - 3
    # the actor's own 4326 MiB (pid 1851 holds it in the capture) plus its children's
    assert a.gpu_index == 0 and a.gpu_mem_bytes == (4326 + 4326 + 512) << 20
    assert a.gpu_mem_total_bytes == node.gpus[0].mem_total_bytes  # one GPU: its own total
    assert s.orphans == ()


def test_remote_gpu_pids_without_a_tree_are_not_orphans():
    node = _dashboard_node({9001: 4326})
    far = RawActor(actor_id="srv", class_name="vLLMHttpServer", state="ALIVE", name="vllm_server_0_0",
                   node_id=node.node_id, pid=1700)
    s = snap([far], nodes=(node,), local_ids=frozenset())
    # without a tree there, pid 9001 may well be the server's engine: unknown, not an orphan
    assert s.orphans is None and s.actors[0].gpu_mem_bytes is None and actor_json(s.actors[0])["processes"] is None


def test_descendants_of_several_local_nodes_of_one_machine():
    # three raylets on one host (ray.cluster_utils.Cluster): one tree covers every local node
    tree = ProcTree(NOW, roots=(1000, 2000), procs=(proc(1001, 1000, "VLLM::EngineCore"),
                                                    proc(2001, 2000, "sglang::scheduler_TP0"),
                                                    proc(2002, 2000, "sglang::detokenizer")))
    nodes = (Node("h", "127.0.0.1", "m", is_head=True), Node("a", "127.0.0.1", "m"), Node("b", "127.0.0.1", "m"))
    s = snap([actor("v", 1000, node="a"), actor("g", 2000, node="b", cls="SGLangHttpServer", name="sglang_server_0_0")],
             tree, nodes=nodes, local_ids=frozenset({"h", "a", "b"}))
    by = {a.actor_id: [p.title for p in a.processes] for a in s.actors}
    assert by == {"v": ["VLLM::EngineCore"], "g": ["sglang::scheduler_TP0", "sglang::detokenizer"]}
