"""The doctor's pure rules: majorities, NCCL's interface syntax, the workers' environment, the limits, the
sentences, and which cells are marked."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from verltop.analysis.doctor import (
    NodeFacts,
    build_report,
    cell_marks,
    env_values,
    gloo_ifname_missing,
    labels,
    majority,
    nccl_ifname_matches,
)
from verltop.model import Problem
from verltop.text.contract import doctor_json
from verltop.text.doctor import doctor_summary, value_text

GIB = 1 << 30


def facts(**over: Any) -> dict[str, Any]:
    """One healthy GPU node's answer of ``node_check.collect``."""
    f: dict[str, Any] = {
        "hostname": "gpu-a",
        "versions": {"python": "3.11.7", "torch": "2.6.0", "torch.cuda": "12.4", "torch.nccl": "2.21.5",
                     "verl": "0.9.1", "ray": "2.60.0", "transformers": "4.57.1", "vllm": "0.8.5", "sglang": "absent",
                     "flash-attn": "2.7.4"},
        "gpus": {"driver": "570.124.06", "cuda": "12.8",
                 "gpus": [{"index": i, "name": "NVIDIA H200", "mem_free_bytes": 140 * GIB, "mem_total_bytes": 141 * GIB,
                           "ecc_uncorrected": 0, "remap_pending": False, "remap_failed": False,
                           "retired_pending": None} for i in range(8)]},
        "xid": {"xids": {}},
        "env": {"raylet": {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "0"},
                "workers": [{"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "0", "CUDA_VISIBLE_DEVICES": str(i)}
                            for i in range(8)], "unreadable": 0, "found_raylet": True},
        "interfaces": {"lo": "unknown", "eth0": "up", "ib0": "up"},
        "disk_logs": {"path": "/tmp/ray/session_x/logs", "free_bytes": 500 * GIB, "total_bytes": 1000 * GIB},
        "disk_tmp": {"path": "/tmp", "free_bytes": 500 * GIB, "total_bytes": 1000 * GIB},
        "time": 0.0,
    }
    for k, v in over.items():
        f[k] = v
    return f


def node(i: int, f: dict[str, Any] | None = None, **kw: Any) -> NodeFacts:
    base: dict[str, Any] = {"node_id": f"{i:02d}" + "ab" * 27, "ip": f"10.0.0.{i}", "hostname": f"gpu-{i}",
                            "is_head": i == 1, "ray_gpus": 8.0, "facts": f if f is not None else facts(),
                            "clock_offset_s": 0.0, "clock_rtt_s": 0.002}
    base.update(kw)
    return NodeFacts(**base)


def cluster(n: int = 4) -> list[NodeFacts]:
    return [node(i) for i in range(1, n + 1)]


# ---------------------------------------------------------------- small rules


def test_majority_names_the_odd_one_out():
    assert majority({"a": "1", "b": "1", "c": "2"}) == ("1", ("c",))
    assert majority({"a": "1", "b": "1"}) == ("1", ())
    assert majority({}) == (None, ())


def test_majority_tie_marks_every_node_and_unknown_takes_no_part():
    assert majority({"a": "1", "b": "2"}) == (None, ("a", "b"))
    assert majority({"a": "1", "b": "1", "c": None}) == ("1", ())
    assert majority({"a": "1", "b": "2", "c": "2", "d": None}) == ("2", ("a",))


def test_majority_keeps_types_apart():
    assert majority({"a": 1, "b": "1", "c": "1"}) == ("1", ("a",))


@pytest.mark.parametrize(("spec", "want"), [
    ("eth", ["eth0", "eth1"]),
    ("eth0", ["eth0"]),
    ("=eth", []),
    ("=eth0,ib0", ["eth0", "ib0"]),
    ("^docker,lo", ["eth0", "eth1", "ib0"]),
    ("^=eth1", ["docker0", "eth0", "ib0", "lo"]),
    ("ib0:5000", ["ib0"]),
    ("ens", []),
])
def test_nccl_socket_ifname_syntax(spec, want):
    assert nccl_ifname_matches(spec, ["lo", "eth0", "eth1", "ib0", "docker0"]) == want


def test_gloo_socket_ifname_is_exact_names():
    assert gloo_ifname_missing("eth0", ["lo", "eth0"]) == []
    assert gloo_ifname_missing("eth", ["lo", "eth0"]) == ["eth"]
    assert gloo_ifname_missing("eth0,ib1", ["lo", "eth0", "ib0"]) == ["ib1"]


def test_labels_are_ips_unless_ips_repeat():
    a = cluster(2)
    assert set(labels(a).values()) == {"10.0.0.1", "10.0.0.2"}
    same = [node(1, ip="127.0.0.1"), node(2, ip="127.0.0.1"), node(3)]
    lab = labels(same)
    assert lab[same[2].node_id] == "10.0.0.3"
    assert lab[same[0].node_id] == "127.0.0.1/01abab" and lab[same[1].node_id] == "127.0.0.1/02abab"


# ---------------------------------------------------------------- the workers' environment


def test_env_from_workers_when_the_node_runs_any():
    env = {"raylet": {"NCCL_DEBUG": "INFO"}, "workers": [{"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG": "WARN"}]}
    vals, source, split = env_values(env)
    assert vals == {"NCCL_DEBUG": "WARN"} and source == "2 workers" and split == {}


def test_env_from_the_raylet_when_no_worker_runs():
    vals, source, _ = env_values({"raylet": {"NCCL_IB_DISABLE": "1"}, "workers": []})
    assert vals == {"NCCL_IB_DISABLE": "1"} and source == "raylet"
    vals, source, _ = env_values({"raylet": None, "workers": []})
    assert vals == {} and source == "unreadable"


def test_env_workers_that_disagree_are_named():
    env = {"raylet": {}, "workers": [{"NCCL_IB_DISABLE": "1"}, {}]}
    vals, _, split = env_values(env)
    assert vals == {"NCCL_IB_DISABLE": "1 | unset"} and split == {"NCCL_IB_DISABLE": ["1", "unset"]}


def test_cuda_visible_devices_is_the_raylets():
    env = {"raylet": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, "workers": [{"CUDA_VISIBLE_DEVICES": "0"},
                                                                      {"CUDA_VISIBLE_DEVICES": "1"}]}
    vals, _, split = env_values(env)
    assert vals == {"CUDA_VISIBLE_DEVICES": "0,1,2,3"} and split == {}


# ---------------------------------------------------------------- the report


def test_equal_nodes_have_no_mismatch_and_no_problem():
    r = build_report(cluster(), now=100.0, show=value_text)
    assert r.ok and r.mismatches == () and r.problems == ()
    assert [n.is_head for n in r.nodes] == [True, False, False, False]
    assert r.nodes[0].get("gpu.count") == 8 and r.nodes[0].get("env.NCCL_SOCKET_IFNAME") == "eth0"
    assert r.nodes[0].get("iface.NCCL_SOCKET_IFNAME") == "eth0"
    assert r.nodes[0].get("env.source") == "8 workers"
    assert "CUDA_VISIBLE_DEVICES" not in " ".join(r.checks)  # the raylet has none: nothing to show
    assert doctor_summary(r).startswith("4 nodes checked: they agree")
    j = doctor_json(r)
    assert set(j) >= {"nodes", "mismatches", "problems"}
    assert set(j["nodes"][0]) >= {"node_id", "ip", "hostname", "checks"}


def test_one_node_with_another_nccl_setting_and_package_version():
    f = facts()
    f["versions"] = {**f["versions"], "transformers": "4.46.0"}
    f["env"] = copy.deepcopy(f["env"])
    f["env"]["raylet"]["NCCL_SOCKET_IFNAME"] = "lo"
    for w in f["env"]["workers"]:
        w["NCCL_SOCKET_IFNAME"] = "lo"
    nodes = [node(1), node(2), node(3, f), node(4)]
    r = build_report(nodes, now=0.0, show=value_text)
    assert [m.check for m in r.mismatches] == ["transformers", "env.NCCL_SOCKET_IFNAME"]
    assert r.problems == ()
    m = r.mismatches[1]
    assert m.majority == "eth0" and m.deviants == ("10.0.0.3",)
    assert dict(m.values)["10.0.0.3"] == "lo"
    assert "NCCL_SOCKET_IFNAME differs: eth0 on 3 node(s), but lo on 10.0.0.3" in m.problem.message
    assert "runtime_env" in (m.problem.remedy or "")
    assert r.mismatches[0].problem.remedy.startswith("install transformers==4.57.1 on every node")
    assert cell_marks(r) == {("transformers", "10.0.0.3"): "mismatch", ("env.NCCL_SOCKET_IFNAME", "10.0.0.3"): "mismatch"}
    assert doctor_json(r)["mismatches"][1]["values"] == {"10.0.0.1": "eth0", "10.0.0.2": "eth0", "10.0.0.3": "lo",
                                                      "10.0.0.4": "eth0"}


def test_a_variable_set_on_one_node_only_is_unset_elsewhere():
    f = facts()
    f["env"] = copy.deepcopy(f["env"])
    for w in f["env"]["workers"]:
        w["NCCL_P2P_DISABLE"] = "1"
    r = build_report([node(1), node(2, f), node(3)], now=0.0, show=value_text)
    (m,) = r.mismatches
    assert m.check == "env.NCCL_P2P_DISABLE" and dict(m.values) == {"10.0.0.1": "unset", "10.0.0.2": "1",
                                                                      "10.0.0.3": "unset"}


def test_gpu_rows_compare_gpu_nodes_only():
    cpu_head = facts(gpus={"error": "no NVML (NVML Shared Library Not Found)"})
    nodes = [node(1, cpu_head, ray_gpus=0.0), node(2), node(3)]
    r = build_report(nodes, now=0.0, show=value_text)
    assert r.ok, [m.problem.text for m in r.mismatches] + [p.text for p in r.problems]
    assert r.nodes[0].get("nvidia.driver") == "no NVML" and r.nodes[0].get("gpu.count") == 0
    old = facts(gpus={**facts()["gpus"], "driver": "535.54.03", "cuda": "12.2"})
    r = build_report([node(1, cpu_head, ray_gpus=0.0), node(2), node(3), node(4, old)], now=0.0, show=value_text)
    assert {m.check for m in r.mismatches} == {"nvidia.driver", "nvidia.cuda"}
    assert all(m.deviants == ("10.0.0.4",) for m in r.mismatches)
    # and the driver is too old for torch's CUDA there
    assert [p.check for p in r.problems] == ["torch.cuda"]
    assert "torch is built for CUDA 12.4 but the driver supports at most CUDA 12.2" in r.problems[0].text


def test_ray_gpus_without_nvml_is_a_problem():
    broken = facts(gpus={"error": "no NVML (Driver Not Loaded)"})
    r = build_report([node(1), node(2, broken)], now=0.0, show=value_text)
    (p,) = r.problems
    assert p.nodes == ("10.0.0.2",) and "Ray counts 8 GPUs there but no NVML (Driver Not Loaded)" in p.text


def test_gpu_health_problems():
    g = copy.deepcopy(facts()["gpus"])
    g["gpus"][3]["ecc_uncorrected"] = 2
    g["gpus"][5]["remap_pending"] = True
    g["gpus"][6]["remap_failed"] = True
    f = facts(gpus=g, xid={"xids": {"79": 1, "13": 4}})
    r = build_report([node(1), node(2, f), node(3)], now=0.0, show=value_text)
    checks = [p.check for p in r.problems]
    assert checks == ["gpu.ecc_uncorrected", "gpu.pending_repair", "gpu.pending_repair", "gpu.xid"], checks
    text = " / ".join(p.text for p in r.problems)
    assert "2 uncorrected ECC error(s)" in text and "row remapping failed on GPU 6" in text
    assert "memory repair pending on GPU 5" in text and "Xid 79 (GPU fell off the bus) ×1" in text
    assert "Xid 13" not in text  # an application's fault, shown in the table only
    assert r.nodes[1].get("gpu.xid") == "13×4, 79×1"
    assert r.nodes[1].get("gpu.pending_repair") == "GPU 5, 6"


def test_interface_that_does_not_exist():
    f = facts(interfaces={"lo": "unknown", "ens5": "up"})
    r = build_report([node(1), node(2, f)], now=0.0, show=value_text)
    (p,) = r.problems
    assert p.check == "iface.NCCL_SOCKET_IFNAME" and p.nodes == ("10.0.0.2",)
    assert "NCCL_SOCKET_IFNAME=eth0 names no interface there" in p.text and "ens5, lo" in p.text
    assert r.nodes[1].get("iface.NCCL_SOCKET_IFNAME") == "none matches"


def test_disk_and_clock_limits():
    full = facts(disk_logs={"path": "/tmp/ray/s/logs", "free_bytes": GIB // 2, "total_bytes": 100 * GIB},
                 disk_tmp={"path": "/tmp", "free_bytes": 3 * GIB, "total_bytes": 100 * GIB})
    r = build_report([node(1), node(2, full, clock_offset_s=2.5), node(3, clock_offset_s=1.2, clock_rtt_s=0.5)],
                     now=0.0, show=value_text)
    checks = [(p.check, p.nodes) for p in r.problems]
    assert ("disk.ray_logs_free_bytes", ("10.0.0.2",)) in checks
    assert ("disk.tmp_free_bytes", ("10.0.0.2",)) in checks  # 97 % used
    assert ("clock.offset_s", ("10.0.0.2",)) in checks
    assert len(checks) == 3  # 1.2 s measured over a 0.5 s round trip may be under 1 s: not flagged
    assert "+2.5 s off the head's" in " ".join(p.text for p in r.problems)


def test_a_node_that_could_not_be_checked():
    gone = node(3, None, facts=None, error=Problem("node_left", "the node left the cluster during the check",
                                                   "see `ray status`"), clock_offset_s=None)
    r = build_report([node(1), node(2), gone], now=0.0, show=value_text)
    assert r.mismatches == ()  # unknown values take no part
    (p,) = r.problems
    assert p.nodes == ("10.0.0.3",) and "10.0.0.3: could not be checked: the node left" in p.text
    col = r.nodes[2]
    assert col.get("probe") == "the node left the cluster during the check" and col.get("torch") is None
    assert doctor_json(r)["nodes"][2]["error"].startswith("the node left")


def test_shared_directory():
    ids = [n.node_id for n in cluster(3)]
    ok = {"ok": True, "error": None}
    nodes = [node(1, path_write=ok, path_read={ids[1]: "ok", ids[2]: "ok"}),
             node(2, path_write=ok, path_read={ids[0]: "ok", ids[2]: "No such file or directory"}),
             node(3, path_write={"ok": False, "error": "Permission denied"}, path_read={ids[0]: "ok"})]
    r = build_report(nodes, now=0.0, show=value_text, path="/shared")
    assert r.nodes[0].get("path.read_back") == "ok (2 other nodes)"
    assert r.nodes[1].get("path.read_back") == "10.0.0.3's file: No such file or directory"
    assert r.nodes[2].get("path.write") == "Permission denied"
    texts = [p.text for p in r.problems]
    assert any(t.startswith("10.0.0.3: cannot write to the shared directory: Permission denied") for t in texts)
    assert any(t.startswith("10.0.0.2: does not see files other nodes wrote") for t in texts)


def test_the_same_problem_on_every_node_is_one_sentence():
    bad = {"ok": False, "error": "does not exist"}
    r = build_report([node(i, path_write=bad, path_read={}) for i in (1, 2, 3)], now=0.0, show=value_text, path="/nope")
    (p,) = r.problems
    assert p.nodes == ("10.0.0.1", "10.0.0.2", "10.0.0.3")
    assert p.text.startswith("every node: cannot write to the shared directory: does not exist")
