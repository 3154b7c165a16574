"""The doctor's facts turned into values, pure: each node's raw answer (``sources.node_check.collect``) becomes
one value per check; the small rules they need (majority, NCCL's interface syntax, the workers' environment)
live here too. ``analysis.doctor`` compares the values across nodes; ``analysis.doctor_problems`` judges them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from verltop.model import CheckValue, Problem

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


def ok(part: Any) -> bool:
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
    if not ok(g):
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
    if not ok(xid):
        return None
    counts = xid.get("xids") or {}
    if not counts:
        return "none"
    return ", ".join(f"{c}×{n}" for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], int(kv[0]))))


def ptrace_block(p: Mapping[str, Any]) -> str | None:
    """Why py-spy there cannot read the workers' stacks, as a reason kind (``None``: it can, or it is unknown):
    ``scope3`` (Yama forbids ptrace), ``no_cap`` (CAP_SYS_PTRACE missing where Yama or another user needs
    it), ``other_user``, or ``refused`` (py-spy was refused for a reason none of the facts explain)."""
    tried, scope, cap = p.get("tried"), p.get("ptrace_scope"), bool(p.get("cap_sys_ptrace"))
    if tried == "ok":
        return None
    if scope == 3:
        return "scope3"
    if not cap and scope in (1, 2):
        return "no_cap"
    if not cap and p.get("other_user_workers"):
        return "other_user"
    if tried is None:
        return None
    low = str(tried).lower()
    if "permission" in low or "not permitted" in low:
        return "no_cap" if not cap else "refused"
    return "refused"


def pyspy_value(p: Any) -> CheckValue:
    """The ``pyspy`` row: ``ok``, ``not found``, or ``cannot attach (why)``."""
    if not ok(p):
        return None
    if not p.get("pyspy"):
        return "not found"
    block = ptrace_block(p)
    if block is None:
        return "ok" if p.get("tried") == "ok" else "ok (no worker to try)" if p.get("tried") is None else \
            f"failed: {p['tried']}"
    why = {"scope3": "ptrace_scope 3", "no_cap": f"no CAP_SYS_PTRACE, ptrace_scope {p.get('ptrace_scope')}",
           "other_user": "workers run as another user"}.get(block, str(p.get("tried")))
    return f"cannot attach ({why})"


def ptrace_value(p: Any) -> CheckValue:
    """The ``ptrace`` row: the capability and Yama's scope (``no Yama`` where the kernel has none)."""
    if not ok(p):
        return None
    scope = p.get("ptrace_scope")
    cap = "CAP_SYS_PTRACE" if p.get("cap_sys_ptrace") else "no CAP_SYS_PTRACE"
    return f"{cap}, {'no Yama' if scope is None else f'ptrace_scope {scope}'}"


def node_values(n: NodeFacts) -> dict[str, CheckValue]:
    """Every check's value on one node (``None`` where it could not be read)."""
    f = n.facts or {}
    out: dict[str, CheckValue] = {"probe": "ok" if n.error is None else n.error.message,
                                  "hostname": f.get("hostname") or n.hostname}
    v = f.get("versions")
    for k in VERSIONS:
        out[k] = v.get(k) if ok(v) else None
    out.update(_gpu_values(f.get("gpus") or {"error": ""}, f.get("xid") or {}) if n.facts else
               dict.fromkeys((*GPU_COMPARED, "gpu.memory_free_min_bytes", "gpu.ecc_uncorrected",
                              "gpu.pending_repair", "gpu.xid")))
    env = f.get("env")
    if ok(env):
        vals, source, _ = env_values(env)
        out["env.source"] = source
        out.update({f"env.{k}": val for k, val in vals.items()})
    else:
        out["env.source"] = None
    ifaces = f.get("interfaces")
    for var in IFACE_VARS:
        spec = out.get(f"env.{var}")
        if spec is None or spec == UNSET or not ok(ifaces):
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
        out[key] = d.get("free_bytes") if ok(d) else None
    out["pyspy"], out["ptrace"] = pyspy_value(f.get("pyspy")), ptrace_value(f.get("pyspy"))
    out["clock.offset_s"] = None if n.clock_offset_s is None else round(n.clock_offset_s, 3)
    if n.path_write is not None:
        out["path.write"] = "ok" if n.path_write.get("ok") else str(n.path_write.get("error") or "failed")
    return out
