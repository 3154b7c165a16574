"""``verltop doctor``'s judgement, pure: each node's raw facts (read there by ``sources.node_check``) become
check values; values that differ between nodes become mismatches (the majority is right, the rest are red);
values over a limit become problems, each a sentence with its fix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from verltop import fmt
from verltop.model import CheckValue, DoctorNode, DoctorReport, Finding, Mismatch, Problem

VERSIONS = ("python", "torch", "torch.cuda", "torch.nccl", "verl", "ray", "transformers", "vllm", "sglang",
            "flash-attn")
GPU_COMPARED = ("nvidia.driver", "nvidia.cuda", "gpu.model", "gpu.count")  # among nodes that have GPUs
IFACE_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
RAYLET_ONLY = ("CUDA_VISIBLE_DEVICES",)  # per worker by design (Ray hands each its GPUs): the node's is the raylet's
CLOCK_LIMIT_S = 1.0
DISK_MIN_FREE_BYTES = 1 << 30
DISK_MAX_USED = 0.95  # Ray's local_fs_capacity_threshold: above it, object creation and spilling fail
# Xids that point at the hardware (the others are usually an application's fault and stay in the log)
HW_XIDS = {"48": "double-bit ECC error", "61": "internal micro-controller breakpoint",
           "62": "internal micro-controller halt", "63": "ECC page retirement or row remapping",
           "64": "ECC page retirement or row remapper failure", "74": "NVLink error", "79": "GPU fell off the bus",
           "92": "high single-bit ECC error rate", "94": "contained ECC error", "95": "uncontained ECC error",
           "119": "GSP RPC timeout", "120": "GSP error"}
UNSET = "unset"
ABSENT = "absent"


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the engine gathered for one node; ``facts`` is ``node_check.collect()``'s answer."""

    node_id: str
    ip: str | None
    hostname: str | None
    is_head: bool = False
    ray_gpus: float = 0.0
    facts: Mapping[str, Any] | None = None
    error: Problem | None = None
    clock_offset_s: float | None = None  # against the head, corrected for the round trip
    clock_rtt_s: float | None = None
    path_write: Mapping[str, Any] | None = None  # node_check.write_marker()
    path_read: Mapping[str, str] | None = None  # writer's node id -> "ok" or why not
    notes: tuple[str, ...] = field(default=())


# ---------------------------------------------------------------- small rules


def labels(nodes: list[NodeFacts]) -> dict[str, str]:
    """Column names: the IP, or IP/node-id start where several nodes share an IP (raylets on one host)."""
    ips = Counter(n.ip for n in nodes)
    return {n.node_id: (n.ip or n.node_id[:8]) if n.ip and ips[n.ip] == 1 else f"{n.ip or '?'}/{n.node_id[:6]}"
            for n in nodes}


def majority(values: Mapping[str, CheckValue]) -> tuple[CheckValue, tuple[str, ...]]:
    """The value most nodes have (``None`` when the top is tied) and the nodes that differ from it (all of
    them when tied). Unknown values (``None``) take no part."""
    known = {k: v for k, v in values.items() if v is not None}
    counts = Counter(_key(v) for v in known.values())
    if len(counts) <= 1:
        return (next(iter(known.values())) if known else None), ()
    (top, n), (_, n2) = counts.most_common(2)
    if n == n2:
        return None, tuple(sorted(known))
    return next(v for v in known.values() if _key(v) == top), tuple(sorted(k for k, v in known.items()
                                                                          if _key(v) != top))


def _key(v: CheckValue) -> tuple[str, str]:
    return (type(v).__name__, str(v))  # 1 and "1" and True are different values


def nccl_ifname_matches(spec: str, interfaces: list[str]) -> list[str]:
    """The interfaces NCCL would consider for ``NCCL_SOCKET_IFNAME=spec``: a comma list of prefixes,
    ``=`` for exact names, a leading ``^`` to exclude (``^docker,lo``, ``^=eth1``); ``:port`` suffixes ignored."""
    s = spec.strip()
    exclude = s.startswith("^")
    s = s[1:] if exclude else s
    exact = s.startswith("=")
    s = s[1:] if exact else s
    items = [i.split(":")[0].strip() for i in s.split(",") if i.split(":")[0].strip()]

    def hit(name: str) -> bool:
        return any(name == i if exact else name.startswith(i) for i in items)

    return [n for n in sorted(interfaces) if hit(n) != exclude]


def gloo_ifname_missing(spec: str, interfaces: list[str]) -> list[str]:
    """``GLOO_SOCKET_IFNAME`` names exact interfaces (comma list); the ones this node lacks."""
    return [i.strip() for i in spec.split(",") if i.strip() and i.strip() not in interfaces]


def _ok(part: Any) -> bool:
    return isinstance(part, Mapping) and "error" not in part


# ---------------------------------------------------------------- one node's values


def env_values(env: Mapping[str, Any]) -> tuple[dict[str, str | None], str, dict[str, list[str]]]:
    """A node's allow-listed variables: from its job workers when it runs any (idle workers left out), else
    from its raylet (what every worker inherits). Returns (values, source, {name: values the workers
    disagree on})."""
    workers = list(env.get("workers") or [])
    raylet = env.get("raylet")
    names = set(raylet or {}) | {k for w in workers for k in w if k not in RAYLET_ONLY}
    out: dict[str, str | None] = {}
    split: dict[str, list[str]] = {}
    for name in names:
        if name in RAYLET_ONLY or not workers:
            out[name] = None if raylet is None else raylet.get(name, UNSET)
            continue
        vals = sorted({w.get(name, UNSET) for w in workers})
        out[name] = vals[0] if len(vals) == 1 else " | ".join(vals)
        if len(vals) > 1:
            split[name] = vals
    if workers:
        source = f"{len(workers)} worker{'s' if len(workers) > 1 else ''}"
    elif raylet is not None:
        source = "raylet" if env.get("found_raylet", True) else "probe"
    else:
        source = "unreadable"
    return out, source, split


def _gpu_values(g: Mapping[str, Any], xid: Mapping[str, Any]) -> dict[str, CheckValue]:
    if not _ok(g):
        err = str(g.get("error", "")) if isinstance(g, Mapping) else ""
        return {"nvidia.driver": "no NVML" if "no NVML" in err else (err or None), "nvidia.cuda": None,
                "gpu.model": None, "gpu.count": 0 if "no NVML" in err else None, "gpu.memory_free_min_bytes": None,
                "gpu.ecc_uncorrected": None, "gpu.pending_repair": None, "gpu.xid": _xid_value(xid)}
    gpus = list(g.get("gpus") or [])
    models = Counter(str(x.get("name")) for x in gpus)
    free = [x["mem_free_bytes"] for x in gpus if x.get("mem_free_bytes") is not None]
    ecc = [x["ecc_uncorrected"] for x in gpus if x.get("ecc_uncorrected") is not None]
    repair = [str(x["index"]) for x in gpus if x.get("remap_pending") or x.get("remap_failed") or x.get("retired_pending")]
    return {"nvidia.driver": g.get("driver"), "nvidia.cuda": g.get("cuda"),
            "gpu.model": " + ".join(f"{m} ×{n}" if len(models) > 1 else m for m, n in sorted(models.items())) or None,
            "gpu.count": len(gpus), "gpu.memory_free_min_bytes": min(free) if free else None,
            "gpu.ecc_uncorrected": sum(ecc) if ecc else None,
            "gpu.pending_repair": ("GPU " + ", ".join(repair)) if repair else "none", "gpu.xid": _xid_value(xid)}


def _xid_value(xid: Any) -> CheckValue:
    if not _ok(xid):
        return None
    counts = xid.get("xids") or {}
    if not counts:
        return "none"
    return ", ".join(f"{c}×{n}" for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], int(kv[0]))))


def node_values(n: NodeFacts) -> dict[str, CheckValue]:
    """Every check's value on one node (``None`` where it could not be read)."""
    f = n.facts or {}
    out: dict[str, CheckValue] = {"probe": "ok" if n.error is None else n.error.message,
                                  "hostname": f.get("hostname") or n.hostname}
    v = f.get("versions")
    for k in VERSIONS:
        out[k] = v.get(k) if _ok(v) else None
    out.update(_gpu_values(f.get("gpus") or {"error": ""}, f.get("xid") or {}) if n.facts else
               dict.fromkeys((*GPU_COMPARED, "gpu.memory_free_min_bytes", "gpu.ecc_uncorrected",
                              "gpu.pending_repair", "gpu.xid")))
    env = f.get("env")
    if _ok(env):
        vals, source, _ = env_values(env)
        out["env.source"] = source
        out.update({f"env.{k}": val for k, val in vals.items()})
    else:
        out["env.source"] = None
    ifaces = f.get("interfaces")
    for var in IFACE_VARS:
        spec = out.get(f"env.{var}")
        if spec is None or spec == UNSET or not _ok(ifaces):
            continue
        names = list(ifaces)
        parts = []
        for one in str(spec).split(" | "):
            if one == UNSET:
                continue
            if var == "NCCL_SOCKET_IFNAME":
                parts.append(",".join(nccl_ifname_matches(one, names)) or "none matches")
            else:
                miss = gloo_ifname_missing(one, names)
                parts.append(f"missing {','.join(miss)}" if miss else one)
        out[f"iface.{var}"] = " | ".join(parts) or None
    for key, part in (("disk.ray_logs_free_bytes", "disk_logs"), ("disk.tmp_free_bytes", "disk_tmp")):
        d = f.get(part)
        out[key] = d.get("free_bytes") if _ok(d) else None
    out["clock.offset_s"] = None if n.clock_offset_s is None else round(n.clock_offset_s, 3)
    if n.path_write is not None:
        out["path.write"] = "ok" if n.path_write.get("ok") else str(n.path_write.get("error") or "failed")
    return out


# ---------------------------------------------------------------- across nodes


def _row_order(names: set[str]) -> tuple[str, ...]:
    head = ["probe", "hostname", *VERSIONS, *GPU_COMPARED, "gpu.memory_free_min_bytes", "gpu.ecc_uncorrected",
            "gpu.pending_repair", "gpu.xid", "env.source"]
    env = sorted(n for n in names if n.startswith("env.") and n != "env.source")
    tail = [f"iface.{v}" for v in IFACE_VARS] + ["disk.ray_logs_free_bytes", "disk.tmp_free_bytes", "clock.offset_s",
                                                   "path.write", "path.read_back"]
    return tuple(n for n in [*head, *env, *tail] if n in names)


def compared(check: str) -> bool:
    """Checks that must be equal on every node (the rest are judged against limits, node by node)."""
    return check in VERSIONS or check in GPU_COMPARED or (check.startswith("env.") and check != "env.source")


def _mismatch_problem(check: str, vals: Mapping[str, CheckValue], top: CheckValue, deviants: tuple[str, ...]
                      ) -> Problem:
    def show(v: CheckValue) -> str:
        return value_text(check, v)

    if top is None:
        by: dict[str, list[str]] = {}
        for k, v in vals.items():
            if v is not None:
                by.setdefault(show(v), []).append(k)
        what = "; ".join(f"{v} on {', '.join(sorted(ks))}" for v, ks in sorted(by.items()))
        msg = f"{check} differs between nodes (no majority): {what}"
    else:
        others = {k: show(vals[k]) for k in deviants}
        rest = "; ".join(f"{v} on {', '.join(sorted(k for k in others if others[k] == v))}"
                         for v in sorted(set(others.values())))
        msg = f"{check} differs: {show(top)} on {len(vals) - len(deviants)} node(s), but {rest}"
    if check.startswith("env."):
        var = check[4:]
        fix = (f"set {var} the same on every node: in the environment that runs `ray start` there, or for the job "
               f"in runtime_env={{'env_vars': {{'{var}': ...}}}}")
    elif check == "python":
        fix = "run the same Python on every node (the same image or virtualenv)"
    elif check in ("nvidia.driver", "nvidia.cuda"):
        fix = "install the same NVIDIA driver on every node"
    elif check in ("gpu.model", "gpu.count"):
        fix = "check `nvidia-smi -L` on those nodes: a missing GPU fell off the bus or is hidden; verl's " \
              "resource pools expect equal nodes"
    elif top == ABSENT:
        fix = f"install {check} on every node or on none (the same version everywhere)"
    elif top is not None:
        fix = f"install {check}=={top} on every node: version drift makes workers fail at start or hang"
    else:
        fix = f"install the same {check} version on every node"
    return Problem("mismatch", msg, fix)


def build_report(nodes: list[NodeFacts], now: float, path: str | None = None, elapsed_s: float | None = None,
                 notes: tuple[str, ...] = ()) -> DoctorReport:
    """Every node's checks, the mismatches between nodes, and the problems, each with its fix."""
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
    problems = _group([(lab[n.node_id], c, p) for n in nodes for c, p in _node_problems(n, values[n.node_id])],
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
                                       _mismatch_problem(check, known, top, deviants)))
    return DoctorReport(now, out_nodes, rows, tuple(mismatches), tuple(problems),
                        tuple(dict.fromkeys((*notes, *(x for n in nodes for x in n.notes)))), path, elapsed_s)


def _group(found: list[tuple[str, str | None, Problem]], n_nodes: int) -> list[Finding]:
    """The same problem on several nodes is one sentence naming them (or "every node")."""
    by: dict[tuple[str | None, str, str | None, str], list[str]] = {}
    for label, check, p in found:
        by.setdefault((check, p.message, p.remedy, p.kind), []).append(label)
    out = []
    for (check, message, remedy, kind), labs in by.items():
        who = "every node" if len(labs) == n_nodes and n_nodes > 1 else ", ".join(labs)
        out.append(Finding(check, tuple(labs), Problem(kind, f"{who}: {message}", remedy)))
    return out


def _read_back(n: NodeFacts, lab: Mapping[str, str]) -> CheckValue:
    if n.path_read is None:
        return None
    bad = {lab.get(w, w[:8]): why for w, why in n.path_read.items() if why != "ok"}
    if not bad:
        return f"ok ({len(n.path_read)} other node{'s' if len(n.path_read) != 1 else ''})" if n.path_read else "ok"
    return "; ".join(f"{who}'s file: {why}" for who, why in sorted(bad.items()))


def _node_problems(n: NodeFacts, v: Mapping[str, CheckValue]) -> list[tuple[str | None, Problem]]:
    """One node's problems, as (check, problem) with the sentence not yet naming the node."""
    out: list[tuple[str | None, Problem]] = []

    def add(check: str | None, message: str, remedy: str | None, kind: str = "doctor") -> None:
        out.append((check, Problem(kind, message, remedy)))

    if n.error is not None:
        add("probe", f"could not be checked: {n.error.message}", n.error.remedy, n.error.kind)
        return out
    f = n.facts or {}
    for part, what in (("versions", "versions"), ("env", "the workers' environment"), ("interfaces", "interfaces")):
        if isinstance(f.get(part), Mapping) and "error" in f[part]:
            add(part, f"could not read {what}: {f[part]['error']}", None)
    env = f.get("env")
    if _ok(env):
        for name, vals in sorted(env_values(env)[2].items()):
            add(f"env.{name}", f"its Ray workers disagree on {name}: {', '.join(vals)}",
                "start every worker with the same value (runtime_env env_vars of the job, or the raylet's environment)")
    _gpu_problems(n, v, f, add)
    for var in IFACE_VARS:
        got = v.get(f"iface.{var}")
        if isinstance(got, str) and ("none matches" in got or "missing" in got):
            add(f"iface.{var}", f"{var}={v.get(f'env.{var}')} names no interface there ({got}; it has "
                f"{', '.join(sorted(f.get('interfaces') or {})) or 'none'})",
                f"set {var} to an interface that exists on that node (see `ip -br addr`)")
    for key, part, what in (("disk.ray_logs_free_bytes", "disk_logs", "Ray's log directory"),
                            ("disk.tmp_free_bytes", "disk_tmp", "/tmp")):
        d = f.get(part)
        if not _ok(d) or not d.get("total_bytes"):
            continue
        free, total = d["free_bytes"], d["total_bytes"]
        if free < DISK_MIN_FREE_BYTES or 1 - free / total > DISK_MAX_USED:
            add(key, f"{what} ({d.get('path')}) has only {fmt.size(free)} free of {fmt.size(total)}",
                "free space there: Ray fails to write logs and to create or spill objects on a full disk")
    off, rtt = n.clock_offset_s, n.clock_rtt_s or 0.0
    if off is not None and abs(off) - rtt / 2 > CLOCK_LIMIT_S:
        add("clock.offset_s", f"its clock is {off:+.1f} s off the head's",
            "sync the clocks (chrony/NTP): logs, timeouts and verltop's ages compare times across nodes")
    if n.path_write is not None and not n.path_write.get("ok"):
        add("path.write", f"cannot write to the shared directory: {v.get('path.write')}",
            "create it, mount the shared file system there, and give the Ray user write access")
    rb = v.get("path.read_back")
    if isinstance(rb, str) and not rb.startswith("ok"):
        add("path.read_back", f"does not see files other nodes wrote to the shared directory ({rb})",
            "the directory is not the same file system on every node: mount the shared storage there")
    return out


def _gpu_problems(n: NodeFacts, v: Mapping[str, CheckValue], f: Mapping[str, Any], add: Any) -> None:
    g = f.get("gpus")
    if n.ray_gpus > 0 and not _ok(g):
        err = str((g or {}).get("error", "NVML failed"))
        add("nvidia.driver", f"Ray counts {n.ray_gpus:g} GPUs there but {err}",
            "pip install nvidia-ml-py in the Python of the Ray workers there" if "not installed" in err else
            "check the NVIDIA driver on that node (`nvidia-smi`); reboot or reinstall it")
    if not _ok(g):
        return
    if v.get("gpu.ecc_uncorrected"):
        add("gpu.ecc_uncorrected", f"{v['gpu.ecc_uncorrected']} uncorrected ECC error(s) since the driver loaded",
            "drain the node, see `nvidia-smi -q -d ECC`, reset the GPU (or replace it when they come back)")
    bad = [x for x in g.get("gpus") or [] if x.get("remap_failed")]
    if bad:
        add("gpu.pending_repair", f"row remapping failed on GPU {', '.join(str(x['index']) for x in bad)}",
            "the GPU must be replaced: take the node out of the job")
    pend = [x for x in g.get("gpus") or [] if (x.get("remap_pending") or x.get("retired_pending"))
            and not x.get("remap_failed")]
    if pend:
        add("gpu.pending_repair", f"memory repair pending on GPU {', '.join(str(x['index']) for x in pend)}",
            "reset the GPU (`nvidia-smi -r`, or reboot) before the run")
    xid = (f.get("xid") or {}).get("xids") if _ok(f.get("xid")) else None
    hw = {c: k for c, k in (xid or {}).items() if c in HW_XIDS}
    if hw:
        what = ", ".join(f"Xid {c} ({HW_XIDS[c]}) ×{k}" for c, k in sorted(hw.items(), key=lambda kv: int(kv[0])))
        add("gpu.xid", f"the kernel log shows {what}", "drain the node and check the GPU (`nvidia-smi -q`, "
            "`dmesg | grep Xid`); these Xids point at the hardware")
    tc, dc = v.get("torch.cuda"), v.get("nvidia.cuda")
    if isinstance(tc, str) and isinstance(dc, str) and _version(tc) and _version(dc) and _version(tc) > _version(dc):
        add("torch.cuda", f"torch is built for CUDA {tc} but the driver supports at most CUDA {dc}",
            f"upgrade the NVIDIA driver, or install a torch build for CUDA ≤ {dc}")


def _version(s: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in s.split(".")[:2])
    except ValueError:
        return None


# ---------------------------------------------------------------- text of a value


def value_text(check: str, v: CheckValue) -> str:
    """A value as the table shows it: sizes in bytes as ``76.0G``, the clock offset as ``+0.003s``."""
    if v is None:
        return "-"
    if check.endswith("_bytes") and isinstance(v, int | float):
        return fmt.size(v)
    if check == "clock.offset_s" and isinstance(v, int | float):
        return f"{round(v, 3) or 0.0:+.3f}s"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


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


def summary_text(r: DoctorReport) -> str:
    """One line: how many nodes, mismatches and problems (and how long it took)."""
    took = f" in {r.elapsed_s:.1f} s" if r.elapsed_s is not None else ""
    n = len(r.nodes)
    if r.ok:
        return f"{n} node{'s' if n != 1 else ''} checked{took}: they agree and no problem was found"
    return (f"{n} node{'s' if n != 1 else ''} checked{took}: {len(r.mismatches)} mismatch"
            f"{'es' if len(r.mismatches) != 1 else ''}, {len(r.problems)} problem{'s' if len(r.problems) != 1 else ''}")
