"""What a process is doing, from all of its threads: idle, waiting on something (Ray tasks, its child
processes, its collective peers, an HTTP server) or in code of its own. Pure.

The waiter frames of verl 0.9's engines (vLLM 0.12-0.24, SGLang 0.5.8-0.5.12) are matched by function name
and file suffix, innermost first (py-spy before CPython 3.11 prints no class names):

- vLLM TP worker idle: ``worker_busy_loop → dequeue/acquire_read → spin/wait/sched_yield`` in
  ``shm_broadcast.py`` / ``distributed/utils.py``; anything else under ``worker_busy_loop`` is work;
- vLLM engine core waiting on its workers: ``collective_rpc`` / ``get_response`` → the same wait frames;
  idle: ``_process_input_queue → get``;
- SGLang scheduler idle: anything under ``recv_requests`` (ranks > 0 block in ``broadcast_pyobj`` there);
  detokenizer idle: ``event_loop → recv_pyobj``;
- Ray: ``Worker.main_loop`` (an idle sync actor), the asyncio loop's ``select`` (an async actor awaiting:
  its coroutines are invisible), an executor thread's ``_worker`` queue wait; ``get_objects`` is ``ray.get``;
- a child process waited for: ``subprocess`` ``wait``/``communicate``, ``multiprocessing`` ``join``;
- an HTTP call in flight: frames of ``requests``/``urllib3``/``http.client``/``aiohttp``/``httpx`` innermost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from verltop.analysis.collectives import (
    COLLECTIVES,
    blocked_frames,
    caller_frame,
    leaf,
    py_frames,
    task_thread,
)
from verltop.model import BlockedOn, Frame, ThreadStack

# kinds, most telling first when a process has several non-idle threads
KINDS = ("collective", "children", "ray_wait", "http", "ipc", "busy", "idle", "unknown")

# verl's weight sync over zmq (vllm_rollout/utils.py): the worker waits on the trainer, and the trainer on it
_IPC_WAITS = {"receive_weights": "the trainer's weights", "async_send_weights": "the rollout workers' receipt"}
_IPC_RECV = {"recv_pyobj", "recv", "recv_multipart", "_recv", "poll", "recv_bytes", "recv_string"}

_WAIT_PRIMITIVES = {"select", "poll", "epoll_wait", "wait", "_wait_for_tstate_lock", "acquire", "get", "recv",
                    "recv_bytes", "_recv_bytes", "_recv", "recv_into", "recv_multipart", "recv_pyobj", "recv_string",
                    "accept", "read", "readline", "dequeue", "acquire_read", "spin", "sched_yield", "_run_once",
                    "run_forever", "main_loop", "_poll", "wait_for", "sleep", "_worker", "run", "_bootstrap_inner",
                    "_bootstrap", "serve_forever", "readinto", "_read_exactly"}
_SHM_WAIT = re.compile(r"(shm_broadcast|distributed/utils|contextlib|threading|selectors|zmq/.*)\.py$|"
                       r"(^|/)zmq/")
_RUNTIME = re.compile(
    r"(^|/)lib/python3\.\d+/(?!site-packages|dist-packages)|^<frozen |(^|/)(ray|zmq|uvloop|grpc|concurrent|asyncio|"
    r"threading\.py|selectors\.py|queue\.py|socketserver\.py|tornado|aiohttp|uvicorn|starlette|anyio)(/|$)")
_HTTP = re.compile(r"(^|/)(requests|urllib3|aiohttp|httpx|httpcore|urllib)/|(^|/)http/client\.py$|(^|/)socket\.py$|"
                   r"(^|/)ssl\.py$")
_SUBPROCESS = re.compile(r"(^|/)subprocess\.py$|(^|/)multiprocessing/(popen_\w+|process|pool|connection)\.py$|"
                         r"(^|/)asyncio/subprocess\.py$")
_PLUMBING_TITLE = re.compile(r"multiprocessing\.(resource_tracker|forkserver)|^ray::IDLE")


@dataclass(frozen=True, slots=True)
class Activity:
    """What one process does: ``kind`` (see KINDS) with ``what`` it waits in (``all_reduce``, ``ray.get``,
    ``collective_rpc``, ``requests.post``...) and ``frame`` (``file.py:88 func``) where."""

    kind: str
    what: str | None = None
    frame: str | None = None
    thread: str | None = None

    @property
    def waits(self) -> bool:
        return self.kind in ("collective", "children", "ray_wait", "http", "ipc")


IDLE = Activity("idle")


def _has(frames: tuple[Frame, ...], names: set[str] | frozenset[str], file_rx: re.Pattern[str] | None = None
         ) -> int | None:
    for i, f in enumerate(frames):
        if leaf(f.func) in names and (file_rx is None or file_rx.search(f.file)):
            return i
    return None


def _py(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    return py_frames(frames)


@lru_cache(maxsize=65536)
def _runtime(f: Frame) -> bool:
    return bool(_RUNTIME.search(f.file))


# frames a wait function runs its wait through, in its own file: ``[p.stdout.readline() for p in procs]`` (the
# read is C, so the comprehension is the innermost Python frame), a generator, a lambda
_ANON = frozenset({"<listcomp>", "<genexpr>", "<lambda>", "<dictcomp>", "<setcomp>"})


def anon(f: Frame) -> bool:
    """A comprehension, generator expression or lambda frame: part of the function that runs it."""
    return leaf(f.func) in _ANON


def _innermost_waits(frames: tuple[Frame, ...], upto: int) -> bool:
    """Are the frames inside ``frames[upto]`` wait primitives of the runtime (shm, zmq, threading...), or the
    wait function's own comprehensions and lambdas?"""
    inner = frames[:upto]  # none: the frame itself waits (in C: a queue's get, a sleep between polls)
    return all(leaf(f.func) in _WAIT_PRIMITIVES or _SHM_WAIT.search(f.file) or anon(f) for f in inner)


_UNKNOWN = BlockedOn("?", None)  # "not worked out yet" (None means "in no wait")


def thread_activity(t: ThreadStack, b: BlockedOn | None = _UNKNOWN) -> Activity:
    """One thread: what it waits in, or where its own code is. ``b``: its ``blocked_on`` (without GPU
    figures) when the caller has it."""
    return _thread_activity(t.frames, t.name, b)


@lru_cache(maxsize=8192)
def _thread_activity(all_frames: tuple[Frame, ...], name: str | None, b: BlockedOn | None) -> Activity:
    frames = _py(all_frames)
    if not frames:
        return Activity("idle", thread=name)
    # SGLang: a scheduler between batches (ranks > 0 block in broadcast_pyobj inside recv_requests)
    if _has(frames, {"recv_requests"}) is not None:
        return Activity("idle", "recv_requests", thread=name)
    if _has(frames, {"event_loop"}) is not None and leaf(frames[0].func) in ("recv_pyobj", "recv", "poll"):
        return Activity("idle", "event_loop", thread=name)
    if b is _UNKNOWN:
        b = blocked_frames(all_frames, False)  # no GPU figures: whether the thread is active does not count
    if b is not None and (b.op in COLLECTIVES or b.op == "wait"):
        return Activity("collective", b.op, b.frame, name)
    i = _has(frames, set(_IPC_WAITS))
    if i is not None and leaf(frames[0].func) in _IPC_RECV:
        return Activity("ipc", f"{leaf(frames[i].func)} → {leaf(frames[0].func)}", frames[i].short(), name)
    # vLLM TP worker: idle in its busy loop's queue, or at work in a method under it
    i = _has(frames, {"worker_busy_loop"})
    if i is not None:
        if i == 0 or _innermost_waits(frames, i):
            return Activity("idle", "worker_busy_loop", thread=name)
        return Activity("busy", leaf(frames[i - 1].func), caller_frame(frames, 0), name)
    # vLLM engine core: waits on its workers' answers, or idle on its input queue
    i = _has(frames, {"collective_rpc", "get_response"})
    if i is not None and _innermost_waits(frames, i):
        return Activity("children", leaf(frames[i].func), frames[i].short(), name)
    i = _has(frames, {"_process_input_queue", "process_input_sockets", "process_output_sockets",
                      "monitor_workers", "monitor_engine_liveness"})
    if i is not None and _innermost_waits(frames, i):
        return Activity("idle", leaf(frames[i].func), thread=name)
    if b is not None and b.op in ("ray.get", "ray.wait"):
        return Activity("ray_wait", b.op, b.frame, name)
    k = _outermost_run(frames, _SUBPROCESS)
    if k is not None:
        return Activity("children", f"{_module(frames[k])}.{leaf(frames[k].func)}", caller_frame(frames, k + 1), name)
    k = _outermost_run(frames, _HTTP)
    if k is not None:
        return Activity("http", f"{_module(frames[k])}.{leaf(frames[k].func)}", caller_frame(frames, k + 1), name)
    if _idle(frames) or _loop_idle(frames):
        return Activity("idle", leaf(frames[0].func), thread=name)
    return Activity("busy", None, caller_frame(frames, 0), name)


def _outermost_run(frames: tuple[Frame, ...], rx: re.Pattern[str]) -> int | None:
    """When the innermost frames (past runtime waits such as ``select``) are in files ``rx`` matches, the index
    of the outermost of them: the call the code made (``requests.post``, ``subprocess.run``)."""
    k = 0
    while k < len(frames) and not rx.search(frames[k].file) and leaf(frames[k].func) in _WAIT_PRIMITIVES \
            and _runtime(frames[k]):
        k += 1
    if k == len(frames) or not rx.search(frames[k].file):
        return None
    while k + 1 < len(frames) and rx.search(frames[k + 1].file):
        k += 1
    return k


def _module(f: Frame) -> str:
    """``.../requests/api.py`` → ``requests``; ``.../subprocess.py`` → ``subprocess``."""
    parts = f.file.replace("\\", "/").split("/")
    for p in ("requests", "urllib3", "aiohttp", "httpx", "httpcore", "multiprocessing"):
        if p in parts:
            return p
    return parts[-1].removesuffix(".py")


def _idle(frames: tuple[Frame, ...]) -> bool:
    """No code of its own: every frame is the interpreter's or a runtime's (Ray's loop, asyncio, an executor
    waiting for work), and the innermost is a wait."""
    if any("actor_method_executor" in f.func or "function_executor" in f.func for f in frames):
        return False  # a Ray task runs on this thread: whatever it waits in is the task's wait
    return leaf(frames[0].func) in _WAIT_PRIMITIVES and all(_runtime(f) for f in frames)


def _loop_idle(frames: tuple[Frame, ...]) -> bool:
    """An asyncio loop waiting in its selector: every coroutine on it is suspended (awaiting), whoever
    started the loop."""
    i = _has(frames, {"_run_once"})
    return i is not None and "asyncio" in frames[i].file and all(leaf(f.func) in _WAIT_PRIMITIVES for f in frames[:i])


def process_activity(threads: tuple[ThreadStack, ...], title: str | None = None,
                     main: ThreadStack | None = None, main_blocked: BlockedOn | None = _UNKNOWN) -> Activity:
    """The whole process: the task thread's activity when it is not idle, else the most telling other one.
    ``main`` and ``main_blocked``: its task thread and what that waits in, when the caller has them."""
    if title and _PLUMBING_TITLE.search(title):
        return Activity("idle", "plumbing")
    if not threads:
        return Activity("idle")
    if main is None or main not in threads:
        main, main_blocked = task_thread(threads), _UNKNOWN
    acts = [thread_activity(t, main_blocked if t is main else _UNKNOWN) for t in threads]
    if main is not None:
        m = acts[threads.index(main)]
        if m.kind != "idle":
            return m
    live = [a for a in acts if a.kind != "idle"]
    if not live:
        return acts[threads.index(main)] if main is not None else IDLE
    return min(live, key=lambda a: KINDS.index(a.kind))


# ---------------------------------------------------------------- process titles

_VLLM_WORKER = re.compile(r"^(\w+)::Worker((?:_(?:DP|PP|PCP|TP|DCP|EP)\d+)*)$")
_VLLM_ENGINE = re.compile(r"^(\w+)::EngineCore(?:_DP(\d+))?$")
_SGLANG_SCHED = re.compile(r"^sglang::scheduler((?:_(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)$")
_TAG = re.compile(r"_([A-Z_]+?)(\d+)")


@dataclass(frozen=True, slots=True)
class Title:
    """A process title, parsed: ``kind`` (vllm_engine, vllm_worker, sglang_scheduler, sglang_other,
    plumbing, ray, other) and its parallel ranks (``{"TP": 1, "DP": 0}``)."""

    kind: str
    tags: tuple[tuple[str, int], ...] = ()

    def tag(self, name: str) -> int | None:
        return next((v for k, v in self.tags if k == name), None)


@lru_cache(maxsize=4096)
def parse_title(title: str | None) -> Title:
    t = (title or "").strip()
    if m := _VLLM_WORKER.match(t):
        return Title("vllm_worker", tuple((k, int(v)) for k, v in _TAG.findall(m.group(2))))
    if m := _VLLM_ENGINE.match(t):
        return Title("vllm_engine", (("DP", int(m.group(2))),) if m.group(2) else ())
    if m := _SGLANG_SCHED.match(t):
        return Title("sglang_scheduler", tuple((k, int(v)) for k, v in _TAG.findall(m.group(1))))
    if t.startswith("sglang::"):
        return Title("sglang_other")
    if _PLUMBING_TITLE.search(t):
        return Title("plumbing")
    if t.startswith("ray::"):
        return Title("ray")
    return Title("other")
