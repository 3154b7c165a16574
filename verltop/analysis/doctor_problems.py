"""The doctor's judgement of one node's values against their limits, and the sentences of mismatches: each
problem is a sentence with its fix. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from verltop.analysis.doctor_values import (
    ABSENT,
    CLOCK_LIMIT_S,
    DISK_MAX_USED,
    DISK_MIN_FREE_BYTES,
    HW_XIDS,
    IFACE_VARS,
    NodeFacts,
    env_values,
    ok,
    ptrace_block,
)
from verltop.model import CheckValue, Finding, Problem


def mismatch_problem(check: str, vals: Mapping[str, CheckValue], top: CheckValue, deviants: tuple[str, ...],
                     show_value: Callable[[str, CheckValue], str]) -> Problem:
    def show(v: CheckValue) -> str:
        return show_value(check, v)

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


def group(found: list[tuple[str, str | None, Problem]], n_nodes: int) -> list[Finding]:
    """The same problem on several nodes is one sentence naming them (or "every node")."""
    by: dict[tuple[str | None, str, str | None, str], list[str]] = {}
    for label, check, p in found:
        by.setdefault((check, p.message, p.remedy, p.kind), []).append(label)
    out = []
    for (check, message, remedy, kind), labs in by.items():
        who = "every node" if len(labs) == n_nodes and n_nodes > 1 else ", ".join(labs)
        out.append(Finding(check, tuple(labs), Problem(kind, f"{who}: {message}", remedy)))
    return out


def node_problems(n: NodeFacts, v: Mapping[str, CheckValue], show: Callable[[str, CheckValue], str]
                  ) -> list[tuple[str | None, Problem]]:
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
    if ok(env):
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
        if not ok(d) or not d.get("total_bytes"):
            continue
        free, total = d["free_bytes"], d["total_bytes"]
        if free < DISK_MIN_FREE_BYTES or 1 - free / total > DISK_MAX_USED:
            add(key, f"{what} ({d.get('path')}) has only {show(key, free)} free of {show(key, total)}",
                "free space there: Ray fails to write logs and to create or spill objects on a full disk")
    _pyspy_problems(f.get("pyspy"), add)
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


# where py-spy may not attach, the fix by the reason (doctor_values.ptrace_block)
PTRACE_FIXES = {
    "no_cap": "give the Ray containers the SYS_PTRACE capability (securityContext.capabilities.add: "
              "[\"SYS_PTRACE\"] in the KubeRay head and worker group templates; see docs/kuberay.md), or "
              "dump from an ephemeral debug container (`kubectl debug -it POD --profile=sysadmin "
              "--target=ray-worker`)",
    "scope3": "kernel.yama.ptrace_scope=3 forbids ptrace until the node reboots: boot it with 1 or lower and "
              "give the Ray containers SYS_PTRACE",
    "other_user": "run the Ray workers and the raylet as one user, or give the Ray containers SYS_PTRACE",
    "refused": "see py-spy's message; run `py-spy dump --pid PID` by hand there (as the Ray user)",
}


def _pyspy_problems(p: Any, add: Any) -> None:
    if not ok(p):
        return
    if not p.get("pyspy"):
        add("pyspy", "py-spy is not installed beside the Ray workers' Python: verltop cannot dump its ranks",
            "pip install py-spy in the Ray image (it ships with ray[default]) of that node")
        return
    block = ptrace_block(p)
    if block is not None:
        why = f" ({p['tried']})" if p.get("tried") else ""
        add("pyspy", f"py-spy may not read the Ray workers' stacks there{why}: dumps of its ranks fail",
            PTRACE_FIXES[block])


def _gpu_problems(n: NodeFacts, v: Mapping[str, CheckValue], f: Mapping[str, Any], add: Any) -> None:
    g = f.get("gpus")
    if n.ray_gpus > 0 and not ok(g):
        err = str((g or {}).get("error", "NVML failed"))
        add("nvidia.driver", f"Ray counts {n.ray_gpus:g} GPUs there but {err}",
            "pip install nvidia-ml-py in the Python of the Ray workers there" if "not installed" in err else
            "check the NVIDIA driver on that node (`nvidia-smi`); reboot or reinstall it")
    if not ok(g):
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
    xid = (f.get("xid") or {}).get("xids") if ok(f.get("xid")) else None
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
