"""What each rank waits in: a torch.distributed collective, a Ray wait, or the GPU.

Gloo collectives, ``barrier`` and ``work.wait()`` block inside their own Python frame. NCCL collectives
return at once; the rank then blocks at the next GPU-touching line (``y.sum().item()``), its thread
``active``, natively in ``cuLaunchKernel``/``cudaStreamSynchronize``, its GPU reading 100 %. That is op
``cuda_sync``; the watchdog log or a Flight Recorder dump names the collective itself.
"""

from __future__ import annotations

import re
from functools import lru_cache

from verltop.model import BlockedOn, CollectiveInfo, Frame, ThreadStack

COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "all_gather_coalesced", "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
    "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list", "reduce", "gather",
    "gather_object", "scatter", "scatter_object_list", "barrier", "monitored_barrier", "send", "recv",
    "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list",
})

# torch.distributed waits that are not collectives by name
_DIST_WAITS = {"wait": "wait", "_wait": "wait", "get_future": "wait"}

_RAY_WAITS = {"get": "ray.get", "get_objects": "ray.get", "wait": "ray.wait"}

_NATIVE_GPU_WAIT = re.compile(
    r"cuLaunchKernel|cudaLaunchKernel|cuStreamSynchronize|cudaStreamSynchronize|cudaDeviceSynchronize|"
    r"cuCtxSynchronize|cudaMemcpy|cuMemcpy|_local_scalar_dense|ProcessGroupNCCL::barrier|ProcessGroupNCCL::|"
    r"Work::wait|WorkNCCL::wait|ncclGroupEnd|ncclAllReduce|ncclBroadcast|ncclAllGather|ncclReduceScatter"
)
_NATIVE_FILE = re.compile(r"\.so(\.\d+)*$|\[vdso\]|^\?\?$")

# Wrapper code: frames a user does not care about when we name "where it waits".
_WRAPPER_FILES = re.compile(
    r"(^|/)(torch|ray|_pytest|importlib|concurrent|asyncio|threading\.py|functools\.py|contextlib\.py)(/|$)|"
    r"(^|/)verl/(single_controller|utils/(debug|profiler|py_functional|ray_utils))/|"
    r"(^|/)site-packages/(torch|ray)/|c10d_logger\.py|tracing_helper\.py|function_manager\.py"
)

# Frames that mean "this thread is idle, waiting for work" (py-spy idle heuristics plus Ray's loop).
_IDLE_FUNCS = {"select", "poll", "epoll_wait", "wait", "sleep", "_wait_for_tstate_lock", "acquire"}


@lru_cache(maxsize=65536)
def leaf(name: str) -> str:
    """Python 3.11+ qualified names: ``Condition.wait`` → ``wait``, ``f.<locals>.g`` → ``g``."""
    return name.rsplit(".", 1)[-1]


# Stacks of thousands of ranks repeat the same frames: classify each distinct frame once.
@lru_cache(maxsize=65536)
def is_native(f: Frame) -> bool:
    return bool(_NATIVE_FILE.search(f.file)) or (f.line is None and not f.file.endswith(".py"))


@lru_cache(maxsize=65536)
def is_wrapper(f: Frame) -> bool:
    return bool(_WRAPPER_FILES.search(f.file))


@lru_cache(maxsize=65536)
def _is_torch_dist(f: Frame) -> bool:
    return "torch/distributed/" in f.file or f.file.startswith("distributed_c10d")


def _is_ray_worker(f: Frame) -> bool:
    return f.file.endswith("ray/_private/worker.py") or (f.file == "worker.py" and "ray" in (f.module or ""))


# Stacks of thousands of ranks repeat the same frames too (thread ids differ, frames do not): what is worked
# out of a whole stack is cached by its frames (a tuple of tuples: hashed in C).
@lru_cache(maxsize=8192)
def py_frames(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """The Python frames of a stack (native ones left out)."""
    return tuple(f for f in frames if not is_native(f))


@lru_cache(maxsize=8192)
def _has_dist(frames: tuple[Frame, ...]) -> bool:
    return any(_is_torch_dist(f) for f in frames)


@lru_cache(maxsize=8192)
def _has_executor(frames: tuple[Frame, ...]) -> bool:
    return any("actor_method_executor" in f.func or "function_executor" in f.func for f in frames)


def task_thread(threads: tuple[ThreadStack, ...]) -> ThreadStack | None:
    """The thread running the Ray task: the one with a Ray executor or c10d frame, else MainThread."""
    main = next((t for t in threads if t.name == "MainThread"), None)
    for has in (_has_dist, _has_executor):
        if main is not None and has(main.frames):
            return main
        hit = next((t for t in threads if has(t.frames)), None)
        if hit is not None:
            return hit
    if main is not None:
        return main
    return next((t for t in threads if t.frames), threads[0] if threads else None)


def caller_frame(frames: tuple[Frame, ...], start: int) -> str | None:
    """First frame at or after ``start`` (outward) that is user code, as ``file.py:123 func``."""
    for f in frames[start:]:
        if not is_native(f) and not is_wrapper(f):
            return f.short()
    py = [f for f in frames[start:] if not is_native(f)]
    return py[0].short() if py else None


def blocked_on(t: ThreadStack | None, gpu_util_percent: float | None = None,
               gpu_busy_percent: float = 90.0) -> BlockedOn | None:
    """The collective / wait the thread sits in, or None when it is doing something else."""
    if t is None or not t.frames:
        return None
    busy_gpu = gpu_util_percent is not None and gpu_util_percent >= gpu_busy_percent
    return blocked_frames(t.frames, bool(t.active and busy_gpu))


@lru_cache(maxsize=8192)
def blocked_frames(frames: tuple[Frame, ...], active_on_busy_gpu: bool) -> BlockedOn | None:
    """``blocked_on`` of a stack: ``active_on_busy_gpu``, its thread is active on a GPU at work."""
    evidence = tuple(dict.fromkeys(f.func for f in frames if is_native(f) and _NATIVE_GPU_WAIT.search(f.func)))
    for i, f in enumerate(frames):
        if is_native(f):
            continue
        name = leaf(f.func)
        if _is_torch_dist(f):
            if name in COLLECTIVES:
                return BlockedOn(name, caller_frame(frames, i + 1), evidence, gpu_wait=bool(evidence))
            if name in _DIST_WAITS:
                return BlockedOn("wait", caller_frame(frames, i + 1), evidence, gpu_wait=bool(evidence))
        if _is_ray_worker(f) and name in _RAY_WAITS:
            return BlockedOn(_RAY_WAITS[name], caller_frame(frames, i + 1), evidence)
        if name == "synchronize" and "torch/cuda" in f.file:
            return BlockedOn("cuda_sync", caller_frame(frames, i + 1), evidence, gpu_wait=True)
        if not is_wrapper(f):
            # first user frame, innermost: the rank is in its own code. With native GPU-wait frames under
            # it, or an active thread on a pegged GPU, it waits on the GPU (an NCCL collective, most likely).
            if evidence or (active_on_busy_gpu and name not in _IDLE_FUNCS):
                return BlockedOn("cuda_sync", f.short(), evidence, gpu_wait=True)
            return None
    return None


def calling_frame(b: BlockedOn | None, frames: tuple[Frame, ...]) -> str | None:
    """Where a rank is, in one phrase: the frame that calls its wait, else its innermost Python frame (a
    native dump's innermost ``libc.so.6 clock_nanosleep`` says nothing), else its innermost frame."""
    if b is not None and b.frame:
        return b.frame
    f = next((f for f in frames if not is_native(f)), frames[0] if frames else None)
    return f.short() if f else None


def collective_pending(c: CollectiveInfo | None) -> bool:
    """Does the watchdog/Flight Recorder say this collective is still unfinished? Unknown counts as pending.

    A Flight Recorder dump of a rank waiting on its own GPU work names its last collective too, completed
    (``last_completed >= seq``): that collective is history, not what the rank waits in."""
    if c is None:
        return False
    return c.seq is None or c.last_completed is None or c.last_completed < c.seq


def stack_key(frames: tuple[Frame, ...]) -> tuple[tuple[str, str, int | None], ...]:
    """Identity of a stack for "did it move": Python frames with their lines."""
    return py_frames(frames)
