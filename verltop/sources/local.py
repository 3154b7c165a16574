"""This machine: psutil per Ray worker process, NVML per GPU and per GPU process, and the actors' process
trees (``procfs.ProcReader``).

Blocking calls: run them in a thread (``asyncio.to_thread``). Failures are values: a vanished pid is
left out, NVML missing or failing gives ``gpus=None`` with a one-line reason.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from verltop.convert import one_line
from verltop.model import Gpu, Problem, ProcStat, ProcTree
from verltop.sources.netaddr import proc_net_addresses
from verltop.sources.proc_stat import read_stat
from verltop.sources.procfs import ProcReader


@dataclass(frozen=True, slots=True)
class LocalSample:
    taken_at: float
    procs: dict[int, ProcStat]
    gpus: tuple[Gpu, ...] | None
    gpu_error: str | None
    tree: ProcTree | None = None  # the descendants of the Ray workers in ``procs``
    # each Ray worker's title now (``ray::WorkerDict.actor_rollout_update_actor`` while that call runs, Ray's
    # setproctitle): the call each process runs at this very sample, finer than the 2 s tasks poll
    titles: dict[int, str] | None = None


def local_addresses(fqdn: bool = True) -> set[str]:
    """IPs and names by which Ray may list this host; ``fqdn=False`` leaves out ``this_fqdn()`` (a DNS
    lookup: ask for it only when a node's name has to be compared)."""
    out = {"127.0.0.1", "localhost"}
    try:
        out.add(socket.gethostname())
    except OSError:
        pass
    if fqdn and this_fqdn():
        out.add(this_fqdn())  # type: ignore[arg-type]
    ips = proc_net_addresses()
    if ips is not None:
        return out | ips
    try:  # no /proc/net (not Linux): psutil knows every interface
        import psutil

        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6):
                    out.add(a.address.split("%")[0])
    except (ImportError, OSError):
        pass
    return out


@functools.lru_cache(maxsize=1)
def this_fqdn() -> str | None:
    try:
        return socket.getfqdn()
    except OSError:
        return None


def ns_pid(pid: int) -> int | None:
    """The pid as seen inside its own (innermost) pid namespace, from ``NSpid`` in /proc/PID/status.

    NVML reports host pids; Ray inside a container reports container pids. Run on the host, this maps
    one to the other.
    """
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    parts = line.split()[1:]
                    return int(parts[-1]) if len(parts) > 1 else None
    except (OSError, ValueError):
        return None
    return None


class LocalSampler:
    """Keeps psutil.Process objects between samples so ``cpu_percent`` measures the interval."""

    def __init__(self, use_nvml: bool | None = True, tree_every_s: float = 2.0) -> None:
        """``use_nvml=None``: only where an NVIDIA device exists (a CPU-only head node does not import pynvml
        for an init that must fail)."""
        self._procs: dict[int, Any] = {}
        self._nvml: Any = None
        self._nvml_error: str | None = None
        self._no_device = use_nvml is None and not has_nvidia_device()
        self._use_nvml = not self._no_device if use_nvml is None else use_nvml
        self._nvml_tried = False
        self._last_util_ts = 0
        self._reader = ProcReader(max_fds=_fd_budget())
        # the tree is read at the pace snapshots are built (2 s), not every local poll: half the cost
        self.tree_every_s = tree_every_s
        self._tree: ProcTree | None = None

    # ---------------------------------------------------------- processes

    def sample_procs(self, pids: set[int]) -> dict[int, ProcStat]:
        """CPU % (since the previous sample) and RSS of each pid that is a Ray worker here."""
        import psutil

        out: dict[int, ProcStat] = {}
        for pid in list(self._procs):
            if pid not in pids:
                del self._procs[pid]
        for pid in pids:
            p = self._procs.get(pid)
            try:
                if p is None:
                    # pid reuse, or a remote node's pid that happens to exist here: only Ray workers count
                    if not is_actor_process(pid):
                        continue
                    p = psutil.Process(pid)
                    title = process_title(pid)
                    p.cpu_percent(None)  # prime; the next call measures the interval
                    self._procs[pid] = p
                    out[pid] = ProcStat(pid, None, p.memory_info().rss, p.create_time(), title)
                    continue
                with p.oneshot():
                    cpu = p.cpu_percent(None)
                    rss = p.memory_info().rss
                    ct = p.create_time()
                out[pid] = ProcStat(pid, cpu, rss, ct, None)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError, IndexError):
                self._procs.pop(pid, None)
        return out

    # ---------------------------------------------------------- GPUs

    @property
    def use_nvml(self) -> bool:
        return self._use_nvml

    @property
    def nvml_open(self) -> bool:
        """Is there an NVML session to shut down?"""
        return self._nvml is not None

    def _init_nvml(self) -> Any:
        if self._nvml is not None or self._nvml_tried:
            return self._nvml
        self._nvml_tried = True
        if not self._use_nvml:
            self._nvml_error = "no NVML: no NVIDIA device on this machine" if self._no_device else "NVML disabled"
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
        except ImportError:
            self._nvml_error = "no NVML (nvidia-ml-py not installed)"
        except Exception as e:  # noqa: BLE001 - pynvml raises NVMLError subclasses and OSError alike
            self._nvml_error = f"no NVML: {_nvml_msg(e)}"
        return self._nvml

    def sample_gpus(self, wanted_pids: set[int] | None = None) -> tuple[tuple[Gpu, ...] | None, str | None]:
        nv = self._init_nvml()
        if nv is None:
            return None, self._nvml_error
        try:
            n = nv.nvmlDeviceGetCount()
        except Exception as e:  # noqa: BLE001
            return None, f"NVML failed: {_nvml_msg(e)}"
        gpus = []
        for i in range(n):
            try:
                gpus.append(self._one_gpu(nv, i, wanted_pids or set()))
            except Exception as e:  # noqa: BLE001 - one bad GPU must not hide the others
                gpus.append(Gpu(index=i, name=f"error: {_nvml_msg(e)}", util_percent=None,
                                mem_used_bytes=None, mem_total_bytes=None))
        return tuple(gpus), None

    def _one_gpu(self, nv: Any, i: int, wanted: set[int]) -> Gpu:
        h = nv.nvmlDeviceGetHandleByIndex(i)
        name = nv.nvmlDeviceGetName(h)
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        try:
            util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
        except Exception:  # noqa: BLE001 - not supported on some devices (MIG)
            util = None
        procs: dict[int, int | None] = {}
        for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                for p in getattr(nv, getter)(h):
                    used = getattr(p, "usedGpuMemory", None)
                    procs[int(p.pid)] = int(used) if isinstance(used, int) else None
            except Exception:  # noqa: BLE001 - either list may be unsupported
                continue
        sm: dict[int, float] = {}
        try:
            for s in nv.nvmlDeviceGetProcessUtilization(h, self._last_util_ts):
                sm[int(s.pid)] = float(s.smUtil)
        except Exception:  # noqa: BLE001 - NVML_ERROR_NOT_FOUND when no samples yet
            pass
        out = []
        for pid, used in procs.items():
            mapped = pid
            if wanted and pid not in wanted:
                inner = ns_pid(pid)
                if inner is not None and inner in wanted:
                    mapped = inner
            out.append((mapped, used, sm.get(pid)))
        power = None
        try:
            power = nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # milliwatts
        except Exception:  # noqa: BLE001 - not supported on some boards and in MIG mode
            pass
        uuid = None
        try:
            uuid = nv.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        except Exception:  # noqa: BLE001
            pass
        return Gpu(index=i, name=name, util_percent=util, mem_used_bytes=int(mem.used),
                   mem_total_bytes=int(mem.total), uuid=uuid, processes=tuple(out), power_w=power)

    def sample_tree(self, roots: set[int], gpus: tuple[Gpu, ...] | None = None) -> ProcTree:
        """The descendants of ``roots`` (Ray workers here), and the loose processes: left behind by a root
        that died, an engine's title with no live Ray worker above it, or GPU memory under no root."""
        extra = {pid for g in gpus or () for pid, _, _ in g.processes} - roots
        try:
            plain = self._reader.read(sorted(roots), sorted(extra))
        except OSError as e:  # no /proc (not Linux), or it cannot be listed
            return ProcTree(time.time(), tuple(sorted(roots)),
                            error=Problem("processes", f"cannot read processes: {one_line(e, 120)}"))
        return tree_from_plain(plain, roots)

    def sample(self, pids: set[int], tree_now: bool = False, procs: bool = True, titles: bool = False
               ) -> LocalSample:
        """Processes, GPUs, and the tree (every ``tree_every_s``, when the roots change, or ``tree_now``);
        ``procs=False``: no CPU % or RSS (a dump shows none, and skips psutil's import); ``titles``: each
        worker's title now (one read of /proc/PID/cmdline each)."""
        stats = self.sample_procs(pids) if procs else {}
        names = {pid: t for pid in stats if (t := process_title(pid)) is not None} if titles else None
        # NVML's pids may be the host's: map the known descendants' too (their GPU memory is their actor's)
        kids = {p.pid for p in self._tree.procs} if self._tree is not None else set()
        gpus, err = self.sample_gpus(pids | kids)
        self._last_util_ts = int(time.time() * 1e6) - 1_000_000
        roots = set(stats) if procs else {p for p in pids if is_actor_process(p)}
        tree = self._tree
        if (tree_now or tree is None or set(tree.roots) != roots
                or time.time() - tree.taken_at >= self.tree_every_s - 0.05):
            tree = self._tree = self.sample_tree(roots, gpus)
        return LocalSample(time.time(), stats, gpus, err, tree, names)

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
            self._nvml = None


def _fd_budget(want: int = 2048) -> int:
    """How many descendants' stat files the reader may keep open: a quarter of the open-file limit, raised
    first to the hard limit where that is low (1024 is a common soft limit; 2048 stat files are ~2 MB)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < 4 * want and (hard == resource.RLIM_INFINITY or hard > soft):
            new = 4 * want if hard == resource.RLIM_INFINITY else min(hard, 4 * want)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        return max(16, min(want, (soft if soft != resource.RLIM_INFINITY else 4 * want) // 4))
    except (ImportError, ValueError, OSError):
        return 64


def tree_from_plain(plain: dict[str, Any], roots: set[int] | list[int], node_id: str | None = None) -> ProcTree:
    """``ProcReader.read``'s plain answer (here, or from a probe on ``node_id``) as a ``ProcTree``."""

    def stat(r: Any) -> ProcStat:
        pid, ppid, title, cpu, rss, ct = r
        return ProcStat(pid=pid, cpu_percent=cpu, rss_bytes=rss, create_time_s=ct, title=title, ppid=ppid)

    return ProcTree(taken_at=float(plain["taken_at"]), roots=tuple(sorted(roots)),
                    procs=tuple(stat(r) for r in plain["procs"]), loose=tuple(stat(r) for r in plain["loose"]),
                    left_by=tuple((int(a), int(b)) for a, b in plain["left_by"]), node_id=node_id)


def has_nvidia_device() -> bool:
    """Could NVML work here at all? The driver's device nodes (or WSL's GPU device) exist. Saves
    importing pynvml and a failing nvmlInit on a CPU-only machine."""
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/dxg"))


def _nvml_msg(e: Exception) -> str:
    s = str(e) or e.__class__.__name__
    if "Shared Library" in s or "libnvidia-ml" in s:
        return "NVIDIA driver library not found (no GPU here)"
    return " ".join(s.split())[:120]


def process_title(pid: int) -> str | None:
    """The first word of ``/proc/PID/cmdline`` (Ray workers: ``ray::Class.method``; setproctitle's title)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read(4096).split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return None


def is_actor_process(pid: int, class_name: str | None = None) -> bool:
    """Is ``pid`` here a Ray worker (of ``class_name``, when given)? The one check against pid reuse and
    against another host's pid that happens to exist on this machine."""
    title = process_title(pid)
    if title is None or not title.startswith("ray::"):
        return False
    return class_name is None or title.startswith("ray::" + class_name.rsplit(".", 1)[-1])


def process_exited(pid: int) -> bool:
    """Gone, or a zombie (killed, not yet reaped by its raylet): nothing left to read."""
    return read_stat(pid) is None
