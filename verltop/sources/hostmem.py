"""This machine's memory as Ray's memory monitor sees it: the node's total and used memory, or the
container's cgroup limit and usage where that limit is lower (KubeRay pods), and the kill threshold
``RAY_memory_usage_threshold`` (0.95 unless set in verltop's environment: the raylet's own is not readable).

Ray's monitor counts a cgroup's usage less its inactive file cache (``memory.stat``), as this does."""

from __future__ import annotations

import os

DEFAULT_THRESHOLD = 0.95
_CG = "/sys/fs/cgroup"


def memory_threshold(env: dict[str, str] | None = None) -> float:
    """``RAY_memory_usage_threshold`` where set to a fraction in (0, 1], else Ray's default 0.95."""
    raw = (os.environ if env is None else env).get("RAY_memory_usage_threshold")
    try:
        v = float(raw) if raw else DEFAULT_THRESHOLD
    except ValueError:
        return DEFAULT_THRESHOLD
    return v if 0 < v <= 1 else DEFAULT_THRESHOLD


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            s = f.read().strip()
    except OSError:
        return None
    if not s or s == "max":
        return None
    try:
        return int(s)
    except ValueError:
        return None


def _inactive_file(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def cgroup_memory(root: str = _CG) -> tuple[int | None, int | None]:
    """(limit, usage less inactive file cache) of this process's cgroup, v2 or v1; (None, None) without a
    limit (v1 reports "no limit" as a huge number)."""
    if os.path.exists(os.path.join(root, "memory.max")):  # v2
        limit = _read_int(os.path.join(root, "memory.max"))
        cur = _read_int(os.path.join(root, "memory.current"))
        if limit is None or cur is None:
            return None, None
        return limit, max(0, cur - _inactive_file(os.path.join(root, "memory.stat"), "inactive_file "))
    v1 = os.path.join(root, "memory")
    limit = _read_int(os.path.join(v1, "memory.limit_in_bytes"))
    cur = _read_int(os.path.join(v1, "memory.usage_in_bytes"))
    if limit is None or cur is None or limit >= 1 << 60:
        return None, None
    return limit, max(0, cur - _inactive_file(os.path.join(v1, "memory.stat"), "total_inactive_file "))


def host_memory(root: str = _CG) -> tuple[int, int, str] | None:
    """(total, used, source): the node's (total less available), or the cgroup's where its limit is lower
    (source "cgroup")."""
    try:
        import psutil

        vm = psutil.virtual_memory()
    except (ImportError, OSError):
        return None
    total, used = int(vm.total), int(vm.total - vm.available)
    limit, usage = cgroup_memory(root)
    if limit is not None and usage is not None and limit < total:
        return limit, usage, "cgroup"
    return total, used, "ray_memory_threshold"
