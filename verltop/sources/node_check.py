"""What ``verltop doctor`` reads on each node, run there inside a probe actor.

These functions are shipped to the node by value (cloudpickle): verltop need not be installed there. So they
import only the standard library (and NVML's ``pynvml`` when the node has it) and, of verltop, ``proc_stat``
(stdlib only, shipped with them), and return plain dicts of facts. Judging the facts (majorities, thresholds, sentences) is ``analysis.doctor``'s job.

Secrets: of any process's environment, only names on the allow-list below are read, and the filter runs here,
on the node: no other variable's name or value ever leaves it.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any

from verltop.sources.proc_stat import read_stat

ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_FR_")
ENV_NAMES = ("GLOO_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES")
# Python distributions whose versions are compared across nodes (distribution names, as pip knows them)
PACKAGES = ("torch", "verl", "ray", "transformers", "vllm", "sglang", "flash-attn")
# processes under the raylet that are not the job's workers
NOT_WORKERS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::IDLE", "ray::VerltopProbe")
STEP_TIMEOUT_S = 10.0  # NVML on a GPU that fell off the bus, statvfs on a hung NFS mount: never block the rest


def env_allowed(name: str) -> bool:
    """Is ``name`` on the allow-list (NCCL_*, TORCH_NCCL_*, TORCH_FR_*, GLOO_SOCKET_IFNAME, CUDA_VISIBLE_DEVICES)?"""
    return name.startswith(ENV_PREFIXES) or name in ENV_NAMES


def filter_environ(raw: bytes) -> dict[str, str]:
    """The allow-listed variables of a ``/proc/PID/environ`` blob; every other entry is dropped unread."""
    out = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if not sep:
            continue
        try:
            n = name.decode("ascii")
        except UnicodeDecodeError:
            continue
        if env_allowed(n):
            out[n] = value.decode("utf-8", "replace")
    return out


def _start(fn: Any, *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["v"] = fn(*args)
        except Exception as e:  # noqa: BLE001 - reported as a value: one failed check must not hide the others
            box["e"] = f"{type(e).__name__}: {e}"

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def _outcome(box: dict[str, Any], timeout_s: float) -> Any:
    if "v" in box:
        return box["v"]
    return {"error": box.get("e") or f"did not answer within {timeout_s:g} s"}


def _timed(fn: Any, *args: Any, timeout_s: float = STEP_TIMEOUT_S) -> Any:
    """``fn(*args)`` in a daemon thread; ``{"error": ...}`` when it raises or does not return in time."""
    t, box = _start(fn, *args)
    t.join(timeout_s)
    return _outcome(box, timeout_s)


# ---------------------------------------------------------------- versions


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    for n in (name, name.replace("-", "_")):
        try:
            return metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
        except Exception:  # noqa: BLE001 - a broken dist-info reads as absent
            return None
    return None


def _torch_build() -> dict[str, Any]:
    """torch's CUDA (from ``torch/version.py``, read, not imported) and NCCL (the ``nvidia-nccl-cu*`` wheel
    torch loads; else asked of torch in a child process, so this worker never initialises CUDA)."""
    import ast
    import importlib.util

    out: dict[str, Any] = {"version": None, "cuda": None, "nccl": None}
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return out
    path = os.path.join(next(iter(spec.submodule_search_locations)), "version.py")
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return out
    consts = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            consts[target.id] = value.value
    out["version"] = consts.get("__version__")  # with its local tag (2.11.0+cu130), which the metadata may lack
    out["cuda"] = consts.get("cuda") or "none"
    if consts.get("hip"):
        out["cuda"] = f"none (ROCm {consts['hip']})"
    if not consts.get("cuda"):
        out["nccl"] = "none"
        return out
    for major in ("13", "12", "11"):
        v = _dist_version(f"nvidia-nccl-cu{major}")
        if v:
            out["nccl"] = v
            return out
    import subprocess

    code = "import torch, sys; v = torch.cuda.nccl.version(); print('.'.join(map(str, v)) if isinstance(v, tuple) else v)"
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        out["nccl"] = p.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return out


def versions() -> dict[str, Any]:
    """Python and the compared packages (``"absent"`` when not installed), torch's CUDA and NCCL."""
    out: dict[str, Any] = {"python": sys.version.split()[0]}
    for p in PACKAGES:
        out[p] = _dist_version(p) or "absent"
    if out["torch"] != "absent":
        b = _torch_build()
        out["torch"] = b["version"] or out["torch"]
        out["torch.cuda"], out["torch.nccl"] = b["cuda"], b["nccl"]
    else:
        out["torch.cuda"] = out["torch.nccl"] = "absent"
    return out


# ---------------------------------------------------------------- GPUs


def _kmsg_xids(limit_bytes: int = 8 << 20) -> dict[str, Any]:
    """``NVRM: Xid`` lines in the kernel ring buffer (NVML only streams new Xids as events; the kernel log
    keeps the ones that already happened). ``{"xids": {code: count}}``, or why it is unreadable."""
    import errno
    import re

    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        return {"error": e.strerror or str(e)}
    xids: dict[str, int] = {}
    rx = re.compile(rb"NVRM: Xid \([^)]*\): (\d+)")
    read = 0
    try:
        while read < limit_bytes:
            try:
                rec = os.read(fd, 8192)
            except OSError as e:
                if e.errno == errno.EPIPE:  # a record was overwritten while we read: go on
                    continue
                break  # EAGAIN: the end of the buffer
            if not rec:
                break
            read += len(rec)
            m = rx.search(rec)
            if m:
                code = m.group(1).decode()
                xids[code] = xids.get(code, 0) + 1
    finally:
        os.close(fd)
    return {"xids": xids}


def gpus() -> dict[str, Any]:
    """NVIDIA driver, its CUDA, and per GPU: model, free/total memory, uncorrected ECC errors (volatile),
    rows waiting for remapping or failed remaps. ``{"error": "no NVML ..."}`` where there is none."""
    try:
        import pynvml
    except ImportError:
        try:  # Ray ships a copy: wherever a probe runs, it is there
            from ray._private.thirdparty import pynvml
        except ImportError:
            return {"error": "no NVML (nvidia-ml-py is not installed)"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return {"error": f"no NVML ({e})"}
    except OSError as e:
        return {"error": f"no NVML ({e})"}

    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    def opt(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except (pynvml.NVMLError, AttributeError):
            return None

    try:
        out: dict[str, Any] = {"driver": text(pynvml.nvmlSystemGetDriverVersion()), "cuda": None, "gpus": []}
        cv = opt(pynvml.nvmlSystemGetCudaDriverVersion_v2) or opt(pynvml.nvmlSystemGetCudaDriverVersion)
        if cv:
            out["cuda"] = f"{cv // 1000}.{cv % 1000 // 10}"
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = opt(pynvml.nvmlDeviceGetMemoryInfo, h)
            g: dict[str, Any] = {"index": i, "name": text(pynvml.nvmlDeviceGetName(h)),
                                 "mem_free_bytes": getattr(mem, "free", None), "mem_total_bytes": getattr(mem, "total", None),
                                 "ecc_uncorrected": opt(pynvml.nvmlDeviceGetTotalEccErrors, h,
                                                        pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                        pynvml.NVML_VOLATILE_ECC),
                                 "remap_pending": None, "remap_failed": None, "retired_pending": None}
            rr = opt(pynvml.nvmlDeviceGetRemappedRows, h)  # Ampere and later
            if rr is not None:
                g["remap_pending"], g["remap_failed"] = bool(rr[2]), bool(rr[3])
            else:  # before Ampere: page retirement
                rp = opt(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, h)
                g["retired_pending"] = None if rp is None else bool(rp)
            out["gpus"].append(g)
        return out
    except pynvml.NVMLError as e:
        return {"error": f"NVML failed ({e})"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


# ---------------------------------------------------------------- the workers' environment


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode(errors="replace").strip()
    except OSError:
        return ""


def _environ(pid: int) -> dict[str, str] | None:
    """The allow-listed part of a process's environment as it was started; ``None`` when not ours to read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return filter_environ(f.read())
    except OSError:
        return None


def worker_env() -> dict[str, Any]:
    """The allow-listed environment of this node's raylet and of the Ray workers it started (the job's actors
    and tasks; idle workers, agents and probes left out), read from ``/proc/PID/environ`` (same user or root).

    ``{"raylet": {name: value} | None, "workers": [{name: value}, ...], "unreadable": n, "found_raylet": bool}``.
    Values are those the processes started with (a later ``os.environ[...] =`` inside Python is not seen)."""
    me = os.getpid()
    raylet = None
    pid, hops = me, 0
    while pid > 1 and hops < 8:
        st = read_stat(pid)
        if st is None:
            break
        if st[1] == "raylet":
            raylet = pid
            break
        pid, hops = st[0], hops + 1
    if raylet is None:  # not under a raylet (an unusual container set-up): what this worker got
        return {"raylet": {k: v for k, v in os.environ.items() if env_allowed(k)}, "workers": [], "unreadable": 0,
                "found_raylet": False}
    workers, unreadable = [], 0
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        st = read_stat(int(d))
        if st is None or st[0] != raylet:
            continue
        title = _title(int(d))
        if not title.startswith("ray::") or title.startswith(NOT_WORKERS):
            continue
        env = _environ(int(d))
        if env is None:
            unreadable += 1
        else:
            workers.append(env)
    return {"raylet": _environ(raylet), "workers": workers, "unreadable": unreadable, "found_raylet": True}


# ---------------------------------------------------------------- py-spy and ptrace

CAP_SYS_PTRACE = 19
# Tests only: a node started with this variable answers as a pod without SYS_PTRACE would (no capability,
# ptrace_scope 1, py-spy refused); a real one cannot be made on a single test machine
TEST_DENY_ENV = "VERLTOP_TEST_PTRACE_DENIED"


def _job_workers() -> list[int]:
    """Pids of the job's Ray workers under this node's raylet (agents, idle workers and probes left out)."""
    me = os.getpid()
    raylet = None
    pid, hops = me, 0
    while pid > 1 and hops < 8:
        st = read_stat(pid)
        if st is None:
            break
        if st[1] == "raylet":
            raylet = pid
            break
        pid, hops = st[0], hops + 1
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        st = read_stat(int(d))
        if st is None or (raylet is not None and st[0] != raylet):
            continue
        title = _title(int(d))
        if title.startswith("ray::") and not title.startswith(NOT_WORKERS):
            out.append(int(d))
    return sorted(out)


def _uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[2])  # the effective uid
    except (OSError, ValueError, IndexError):
        pass
    return None


def pyspy_access() -> dict[str, Any]:
    """Can py-spy here read Ray's workers' stacks? Where py-spy is (beside the workers' Python or on PATH),
    ``CAP_SYS_PTRACE`` in this worker's effective set (the probe is a Ray worker like them), Yama's
    ``ptrace_scope``, the workers whose user differs from ours, and one real ``py-spy dump --nonblocking``
    (it reads memory without pausing the worker) of a job worker."""
    import shutil
    import subprocess

    deny = os.environ.get(TEST_DENY_ENV) == "1"
    # the probe's own choice when it dumps (probe_actor): PATH first, else beside the workers' Python
    exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.access(exe, os.X_OK):
        exe = ""
    cap = False
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    cap = bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope: int | None = int(f.read().strip())
    except (OSError, ValueError):
        scope = None  # no Yama: the classic rules (same user, or CAP_SYS_PTRACE)
    workers = _job_workers()
    me = os.geteuid()
    other = [p for p in workers if _uid(p) not in (None, me)]
    out: dict[str, Any] = {"pyspy": exe or None, "cap_sys_ptrace": cap, "ptrace_scope": scope, "uid": me,
                           "workers": len(workers), "other_user_workers": len(other), "tried_pid": None,
                           "tried": None}
    if deny:
        out.update(cap_sys_ptrace=False, ptrace_scope=1)
    if not exe or not workers:
        return out
    pid = workers[0]
    out["tried_pid"] = pid
    if deny:
        out["tried"] = "Permission denied (os error 13)"
        return out
    try:
        p = subprocess.run([exe, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, timeout=5.0,
                           stdin=subprocess.DEVNULL)
        err = (p.stderr or b"").decode(errors="replace").strip().splitlines()
        out["tried"] = "ok" if p.returncode == 0 else (err[-1][:200] if err else f"exit code {p.returncode}")
    except subprocess.TimeoutExpired:
        out["tried"] = "py-spy did not finish within 5 s"
    except OSError as e:
        out["tried"] = str(e)[:200]
    return out


# ---------------------------------------------------------------- network, disks


def interfaces() -> dict[str, str]:
    """Network interfaces of this node and their operstate (``up``, ``down``, ``unknown`` for lo)."""
    out = {}
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        names = [n for _, n in socket.if_nameindex()]
    for n in names:
        try:
            with open(f"/sys/class/net/{n}/operstate") as f:
                out[n] = f.read().strip()
        except OSError:
            out[n] = "unknown"
    return out


def disk(path: str) -> dict[str, Any]:
    """Free and total bytes of the file system holding ``path`` (the nearest existing parent)."""
    p = path
    while p and not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    st = os.statvfs(p or "/")
    return {"path": path, "free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize}


# ---------------------------------------------------------------- entry points (called by the probe)


def collect(session_dir: str | None, budget_s: float = 20.0) -> dict[str, Any]:
    """Everything ``doctor`` compares and checks on this node. The parts run at once, each in its own thread;
    one still running after ``budget_s`` (NVML on a GPU off the bus, statvfs on a hung NFS mount) is reported
    as such and the rest still come back."""
    logs = os.path.join(session_dir, "logs") if session_dir else None
    steps: dict[str, tuple[Any, tuple[Any, ...]]] = {
        "versions": (versions, ()), "gpus": (gpus, ()), "xid": (_kmsg_xids, ()), "env": (worker_env, ()),
        "interfaces": (interfaces, ()), "disk_tmp": (disk, ("/tmp",)), "pyspy": (pyspy_access, ()),
    }
    if logs:
        steps["disk_logs"] = (disk, (logs,))
    started = {name: _start(fn, *args) for name, (fn, args) in steps.items()}
    deadline = time.monotonic() + budget_s
    out: dict[str, Any] = {"hostname": socket.gethostname(), "pid": os.getpid()}
    for name, (t, box) in started.items():
        t.join(max(0.0, deadline - time.monotonic()))
        out[name] = _outcome(box, budget_s)
    if not logs:
        out["disk_logs"] = {"error": "Ray's session directory is unknown"}
    out["time"] = time.time()
    return out


def now() -> float:
    """This node's clock (the caller brackets the call with its own to measure the offset)."""
    return time.time()


def write_marker(directory: str, name: str, content: str) -> dict[str, Any]:
    """Create ``directory/name`` (exclusive, 0600) holding ``content``: does the directory exist, is it writable?"""

    def run() -> dict[str, Any]:
        if not os.path.isdir(directory):
            return {"ok": False, "error": "does not exist" if not os.path.exists(directory) else "not a directory"}
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as e:
            return {"ok": False, "error": e.strerror or str(e)}
        try:
            os.write(fd, content.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return {"ok": True, "error": None}

    return _timed(run)


def read_markers(directory: str, expected: dict[str, str]) -> dict[str, Any]:
    """Read back files other nodes wrote: ``{"seen": {name: "ok" | why not}}``."""

    def run() -> dict[str, Any]:
        seen = {}
        for name, content in expected.items():
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    got = f.read()
                seen[name] = "ok" if got == content else "different content"
            except OSError as e:
                seen[name] = e.strerror or str(e)
        return {"seen": seen}

    return _timed(run)


def remove_marker(directory: str, name: str) -> dict[str, Any]:
    """Delete the file this node wrote."""

    def run() -> dict[str, Any]:
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass
        except OSError as e:
            return {"ok": False, "error": e.strerror or str(e)}
        return {"ok": True}

    return _timed(run)
