"""The waiter frames of vLLM 0.24 / SGLang 0.5.12 / Ray 2.60 processes, as py-spy prints them (CPython 3.11
qualified names; paths as installed in site-packages), and the process titles they set."""

from __future__ import annotations

import pytest

from verltop.analysis.waiters import parse_title, process_activity, thread_activity
from verltop.model import Frame, ThreadStack

SP = "/usr/lib/python3.12/site-packages/"
LIB = "/usr/lib/python3.12/"


def th(*frames: tuple[str, str, int], name: str = "MainThread") -> ThreadStack:
    return ThreadStack(1, name, True, False, tuple(Frame(f, p, ln) for f, p, ln in frames))


WORKER_TAIL = (("WorkerProc.worker_busy_loop", SP + "vllm/v1/executor/multiproc_executor.py", 871),
               ("WorkerProc.worker_main", SP + "vllm/v1/executor/multiproc_executor.py", 839),
               ("BaseProcess.run", LIB + "multiprocessing/process.py", 108))
WORKER_IDLE = th(("SpinCondition.wait", SP + "vllm/distributed/utils.py", 120),
                 ("MessageQueue.acquire_read", SP + "vllm/distributed/device_communicators/shm_broadcast.py", 560),
                 ("__enter__", LIB + "contextlib.py", 137),
                 ("MessageQueue.dequeue", SP + "vllm/distributed/device_communicators/shm_broadcast.py", 610),
                 *WORKER_TAIL)
WORKER_LOADING = th(("DefaultModelLoader._load_weights_bucket", SP + "vllm/model_executor/model_loader/loader.py", 88),
                    ("Worker.update_weights_from_ipc", SP + "verl/workers/rollout/vllm_rollout/utils.py", 140),
                    ("WorkerProc.execute_method", SP + "vllm/v1/executor/multiproc_executor.py", 900),
                    *WORKER_TAIL)
ENGINE_WAITS = th(("SpinCondition.wait", SP + "vllm/distributed/utils.py", 120),
                  ("MessageQueue.acquire_read", SP + "vllm/distributed/device_communicators/shm_broadcast.py", 560),
                  ("MessageQueue.dequeue", SP + "vllm/distributed/device_communicators/shm_broadcast.py", 610),
                  ("MultiprocExecutor.get_response", SP + "vllm/v1/executor/multiproc_executor.py", 310),
                  ("MultiprocExecutor.collective_rpc", SP + "vllm/v1/executor/multiproc_executor.py", 290),
                  ("EngineCore.collective_rpc", SP + "vllm/v1/engine/core.py", 480),
                  ("EngineCoreProc._handle_client_request", SP + "vllm/v1/engine/core.py", 900),
                  ("EngineCoreProc.run_busy_loop", SP + "vllm/v1/engine/core.py", 820))
ENGINE_IDLE = th(("Condition.wait", LIB + "threading.py", 327), ("Queue.get", LIB + "queue.py", 171),
                 ("EngineCoreProc._process_input_queue", SP + "vllm/v1/engine/core.py", 840),
                 ("EngineCoreProc.run_busy_loop", SP + "vllm/v1/engine/core.py", 820))
SGLANG_TP1 = th(("broadcast", SP + "torch/distributed/distributed_c10d.py", 2800),
                ("broadcast_pyobj", SP + "sglang/srt/utils/common.py", 1100),
                ("Scheduler.recv_requests", SP + "sglang/srt/managers/scheduler.py", 1200),
                ("Scheduler.event_loop_normal", SP + "sglang/srt/managers/scheduler.py", 900))
RAY_IDLE = th(("Worker.main_loop", SP + "ray/_private/worker.py", 1069),
              ("<module>", SP + "ray/_private/workers/default_worker.py", 323))
ASYNC_IDLE = th(("EpollSelector.select", LIB + "selectors.py", 468),
                ("BaseEventLoop._run_once", LIB + "asyncio/base_events.py", 1884),
                ("BaseEventLoop.run_forever", LIB + "asyncio/base_events.py", 607),
                ("Thread.run", LIB + "threading.py", 982), name="AsyncIO Thread: default")
EXECUTOR_IDLE = th(("_worker", LIB + "concurrent/futures/thread.py", 81), ("Thread.run", LIB + "threading.py", 982),
                   name="ThreadPoolExecutor-0_0")
SANDBOX_CALL = th(("SocketIO.readinto", LIB + "socket.py", 706),
                  ("HTTPResponse._read_status", LIB + "http/client.py", 287),
                  ("HTTPConnectionPool._make_request", SP + "urllib3/connectionpool.py", 534),
                  ("HTTPAdapter.send", SP + "requests/adapters.py", 667),
                  ("Session.request", SP + "requests/sessions.py", 589),
                  ("post", SP + "requests/api.py", 115),
                  ("call_sandbox_api", SP + "verl/utils/reward_score/sandbox_fusion/utils.py", 124),
                  ("_worker", LIB + "concurrent/futures/thread.py", 58), name="ThreadPoolExecutor-0_1")
RAY_GET = th(("Worker.get_objects", SP + "ray/_private/worker.py", 1007), ("get", SP + "ray/_private/worker.py", 3009),
             ("TaskRunner.run", "/job/main_ppo.py", 92),
             ("actor_method_executor", SP + "ray/_private/function_manager.py", 740))


@pytest.mark.parametrize(("t", "kind", "what"), [
    (WORKER_IDLE, "idle", "worker_busy_loop"),
    (WORKER_LOADING, "busy", "execute_method"),
    (ENGINE_WAITS, "children", "get_response"),
    (ENGINE_IDLE, "idle", "_process_input_queue"),
    (SGLANG_TP1, "idle", "recv_requests"),
    (RAY_IDLE, "idle", "main_loop"),
    (ASYNC_IDLE, "idle", "select"),
    (EXECUTOR_IDLE, "idle", "_worker"),
    (SANDBOX_CALL, "http", "requests.post"),
    (RAY_GET, "ray_wait", "ray.get"),
    (th(("Socket.recv_pyobj", SP + "zmq/sugar/socket.py", 990),
        ("vLLMColocateWorkerExtension.receive_weights", SP + "verl/workers/rollout/vllm_rollout/utils.py", 160),
        *WORKER_TAIL), "ipc", "receive_weights → recv_pyobj"),
])
def test_thread_activity(t, kind, what):
    a = thread_activity(t)
    assert (a.kind, a.what) == (kind, what), a


def test_where_a_worker_is_at_work_and_what_a_call_waits_on():
    assert thread_activity(WORKER_LOADING).frame == "loader.py:88 DefaultModelLoader._load_weights_bucket"
    assert thread_activity(SANDBOX_CALL).frame == "utils.py:124 call_sandbox_api"


def test_process_activity_prefers_the_thread_that_says_something():
    # an async reward worker: its loop idle, an executor thread inside a sandbox call
    a = process_activity((RAY_IDLE, ASYNC_IDLE, EXECUTOR_IDLE, SANDBOX_CALL))
    assert (a.kind, a.thread) == ("http", "ThreadPoolExecutor-0_1")
    assert process_activity((RAY_IDLE, ASYNC_IDLE, EXECUTOR_IDLE)).kind == "idle"
    assert process_activity((RAY_GET, EXECUTOR_IDLE)).kind == "ray_wait"
    assert process_activity((WORKER_IDLE,), "python -c from multiprocessing.resource_tracker import main;main(8)"
                            ).kind == "idle"


@pytest.mark.parametrize(("title", "kind", "tags"), [
    ("VLLM::Worker_TP1", "vllm_worker", (("TP", 1),)),
    ("VLLM::Worker_DP1_TP0_EP1", "vllm_worker", (("DP", 1), ("TP", 0), ("EP", 1))),
    ("VLLM::Worker", "vllm_worker", ()),
    ("VLLM::EngineCore_DP0", "vllm_engine", (("DP", 0),)),
    ("MYPFX::EngineCore", "vllm_engine", ()),
    ("sglang::scheduler_TP0", "sglang_scheduler", (("TP", 0),)),
    ("sglang::scheduler_DP1_TP0_EP0", "sglang_scheduler", (("DP", 1), ("TP", 0), ("EP", 0))),
    ("sglang::detokenizer", "sglang_other", ()),
    ("ray::vLLMHttpServer.generate", "ray", ()),
    ("/usr/bin/python3", "other", ()),
])
def test_titles(title, kind, tags):
    t = parse_title(title)
    assert (t.kind, t.tags) == (kind, tags)


# the engine core reads its workers' answers through a comprehension over a C-level read: the comprehension is
# the innermost Python frame, and it belongs to the wait (collective_rpc), not to code of its own
ENGINE_READS = th(("MultiprocExecutor.get_response.<locals>.<listcomp>",
                   SP + "vllm/v1/executor/multiproc_executor.py", 312),
                  ("MultiprocExecutor.get_response", SP + "vllm/v1/executor/multiproc_executor.py", 312),
                  ("MultiprocExecutor.collective_rpc", SP + "vllm/v1/executor/multiproc_executor.py", 290),
                  ("EngineCore.collective_rpc", SP + "vllm/v1/engine/core.py", 480),
                  ("EngineCoreProc.run_busy_loop", SP + "vllm/v1/engine/core.py", 820))
ENGINE_LAMBDA = th(("<genexpr>", "/app/engine.py", 40), ("<lambda>", "/app/engine.py", 40),
                   ("collective_rpc", "/app/engine.py", 41), ("run_busy_loop", "/app/engine.py", 60))
OWN_GENEXPR = th(("<genexpr>", "/app/reward.py", 88), ("_verify", "/app/reward.py", 90),
                 ("my_reward_fn", "/app/reward.py", 99))


def test_comprehensions_and_lambdas_inside_a_wait_belong_to_it():
    a = thread_activity(ENGINE_READS)
    assert (a.kind, a.what) == ("children", "get_response"), a
    assert (thread_activity(ENGINE_LAMBDA).kind, thread_activity(ENGINE_LAMBDA).what) == ("children", "collective_rpc")
    # a generator in the user's own code is code of its own
    assert thread_activity(OWN_GENEXPR).kind == "busy"
