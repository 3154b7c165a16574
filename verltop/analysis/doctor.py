"""``verltop doctor``'s judgement, pure: each node's raw facts (read there by ``sources.node_check``) become
check values (``doctor_values``); values that differ between nodes become mismatches (the majority is right,
the rest are red); values over a limit become problems (``doctor_problems``), each a sentence with its fix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from verltop.analysis.doctor_problems import group, mismatch_problem, node_problems
from verltop.analysis.doctor_values import (
    GPU_COMPARED,
    IFACE_VARS,
    UNSET,
    VERSIONS,
    NodeFacts,
    env_values,
    gloo_ifname_missing,
    labels,
    majority,
    nccl_ifname_matches,
    node_values,
)
from verltop.model import CheckValue, DoctorNode, DoctorReport, Mismatch

__all__ = ["NodeFacts", "build_report", "cell_marks", "compared", "env_values", "gloo_ifname_missing", "labels",
           "majority", "nccl_ifname_matches", "node_values"]


def _row_order(names: set[str]) -> tuple[str, ...]:
    head = ["probe", "hostname", *VERSIONS, *GPU_COMPARED, "gpu.memory_free_min_bytes", "gpu.ecc_uncorrected",
            "gpu.pending_repair", "gpu.xid", "env.source"]
    env = sorted(n for n in names if n.startswith("env.") and n != "env.source")
    tail = [f"iface.{v}" for v in IFACE_VARS] + ["disk.ray_logs_free_bytes", "disk.tmp_free_bytes", "pyspy", "ptrace",
                                                   "clock.offset_s", "path.write", "path.read_back"]
    return tuple(n for n in [*head, *env, *tail] if n in names)


def compared(check: str) -> bool:
    """Checks that must be equal on every node (the rest are judged against limits, node by node)."""
    return check in VERSIONS or check in GPU_COMPARED or (check.startswith("env.") and check != "env.source")


def build_report(nodes: list[NodeFacts], now: float, show: Callable[[str, CheckValue], str], path: str | None = None,
                 elapsed_s: float | None = None, notes: tuple[str, ...] = ()) -> DoctorReport:
    """Every node's checks, the mismatches between nodes, and the problems, each with its fix. ``show``
    writes a check's value in the sentences (``verltop.text.doctor.value_text``: analysis makes no cells)."""
    lab = labels(nodes)
    values = {n.node_id: node_values(n) for n in nodes}
    if path is not None:
        for n in nodes:
            values[n.node_id]["path.read_back"] = _read_back(n, lab)
    names: set[str] = {k for v in values.values() for k in v}
    # a variable set on some nodes is "unset" (a value) where the node's environment was read but lacks it
    for n in nodes:
        v = values[n.node_id]
        for k in names:
            if k.startswith("env.") and k not in v and v.get("env.source") not in (None, "unreadable"):
                v[k] = UNSET
    # rows nobody could fill say nothing (GPU details on a CPU-only cluster)
    rows = tuple(r for r in _row_order(names) if r == "probe" or any(values[n.node_id].get(r) is not None
                                                                      for n in nodes))
    nodes = sorted(nodes, key=lambda n: (not n.is_head, lab[n.node_id]))
    problems = group([(lab[n.node_id], c, p) for n in nodes for c, p in node_problems(n, values[n.node_id], show)],
                      len(nodes))
    out_nodes = tuple(DoctorNode(n.node_id, n.ip, n.hostname, lab[n.node_id], n.is_head,
                                 tuple((k, values[n.node_id].get(k)) for k in rows), n.error) for n in nodes)
    mismatches = []
    for check in rows:
        if not compared(check):
            continue
        pool = nodes
        if check in GPU_COMPARED:  # a CPU-only head is not a drift
            pool = [n for n in nodes if (values[n.node_id].get("gpu.count") or 0) > 0]
        vals = {lab[n.node_id]: values[n.node_id].get(check) for n in pool}
        top, deviants = majority(vals)
        if deviants:
            known = {k: v for k, v in vals.items() if v is not None}
            mismatches.append(Mismatch(check, tuple(sorted(known.items())), top, deviants,
                                       mismatch_problem(check, known, top, deviants, show)))
    return DoctorReport(now, out_nodes, rows, tuple(mismatches), tuple(problems),
                        tuple(dict.fromkeys((*notes, *(x for n in nodes for x in n.notes)))), path, elapsed_s)


def _read_back(n: NodeFacts, lab: Mapping[str, str]) -> CheckValue:
    if n.path_read is None:
        return None
    bad = {lab.get(w, w[:8]): why for w, why in n.path_read.items() if why != "ok"}
    if not bad:
        return f"ok ({len(n.path_read)} other node{'s' if len(n.path_read) != 1 else ''})" if n.path_read else "ok"
    return "; ".join(f"{who}'s file: {why}" for who, why in sorted(bad.items()))


def cell_marks(r: DoctorReport) -> dict[tuple[str, str], str]:
    """(check, node label) -> ``"mismatch"`` (differs from the majority) or ``"problem"`` (over a limit)."""
    out: dict[tuple[str, str], str] = {}
    for p in r.problems:
        for label in p.nodes:
            out[(p.check or "probe", label)] = "problem"
    for m in r.mismatches:
        for label in m.deviants:
            out[(m.check, label)] = "mismatch"
    return out
