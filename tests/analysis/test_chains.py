"""Wait chains from Ray's task tree and object table (shapes as Ray 2.60 answers them: a call from an async
actor has that actor's creation task as parent; a pending ref's object id starts with its task's id) and the
processes' stacks."""

from __future__ import annotations

from dataclasses import replace

from tests.analysis.helpers import RAY_TAIL, controller_in_get, row, stack
from verltop.analysis.chains import driver_task_id
from verltop.analysis.dump import analyse
from verltop.model import ChildProc, ProcessDump, RawObjectRef, RawTask, ThreadStack
from verltop.text.chains import end_text
from verltop.text.suspects import suspect_reason

JOB = "01000000"
AL, SRV, CTL = "a1" * 12 + JOB, "b2" * 12 + JOB, "c3" * 12 + JOB  # 32-hex actor ids


def task(tid16: str, name: str, actor: str, parent: str, pid: int) -> RawTask:
    return RawTask(task_id=tid16 + actor, name=name, func_name=name, state="RUNNING", actor_id=actor, node_id="n1",
                   worker_pid=pid, start_time_ms=None, parent_task_id=parent, type="ACTOR_TASK")


def idle_async() -> ProcessDump:
    return ProcessDump(1, threads=(
        ThreadStack(1, "MainThread", False, False, stack(("Worker.main_loop", "/x/ray/_private/worker.py", 1069),
                                                         ("<module>", "/x/ray/_private/workers/default_worker.py",
                                                          323)).threads[0].frames),
        ThreadStack(2, "AsyncIO Thread: default", False, False, stack(
            ("EpollSelector.select", "/usr/lib/python3.11/selectors.py", 468),
            ("BaseEventLoop._run_once", "/usr/lib/python3.11/asyncio/base_events.py", 1884),
            ("BaseEventLoop.run_forever", "/usr/lib/python3.11/asyncio/base_events.py", 607)).threads[0].frames)))


def rows():
    ctl = replace(row(CTL, None, None, "controller", task="TaskRunner.run", pid=10), job_id=JOB, actor_name=None)
    al = replace(row(AL, None, None, "agent_loop", task="AgentLoopWorker.generate_sequences", pid=20),
                 actor_name="agent_loop_worker_0", class_name="AgentLoopWorker", job_id=JOB)
    srv = replace(row(SRV, None, None, "rollout_server", task="vLLMHttpServer.generate", pid=30),
                  actor_name="vllm_server_0_0", class_name="vLLMHttpServer", job_id=JOB)
    drv = replace(row("driver:" + JOB, None, None, "driver", task=None, pid=5), actor_name="driver",
                  class_name="driver", job_id=JOB)
    return ctl, al, srv, drv


def engine(func: str = "_load_weights") -> ProcessDump:
    return stack((func, "/x/vllm/model_executor/model_loader/default_loader.py", 88),
                 ("WorkerProc.update_weights", "/x/vllm/v1/executor/multiproc_executor.py", 40),
                 ("WorkerProc.worker_busy_loop", "/x/vllm/v1/executor/multiproc_executor.py", 34))


def test_chain_from_the_driver_through_an_async_actor_to_a_child():
    ctl, al, srv, drv = rows()
    run = task("0" * 16, "TaskRunner.run", CTL, driver_task_id(JOB), 10)
    gen = task("1" * 16, "AgentLoopWorker.generate_sequences", AL, run.task_id, 20)
    # the async agent loop's call: its parent is the agent loop's creation task, not generate_sequences
    sgen = task("2" * 16, "vLLMHttpServer.generate", SRV, "f" * 16 + AL, 30)
    kid = ChildProc(SRV, 31, 30, "VLLM::Worker_TP1")
    stuck = engine()
    rep = analyse([ctl, al, srv, drv], {CTL: [controller_in_get()] * 2, AL: [idle_async()] * 2,
                                        SRV: [idle_async()] * 2, drv.actor_id: [controller_in_get()] * 2,
                                        f"{SRV}:31": [stuck, stuck]}, 0.0, children=[kid], tasks=[run, gen, sgen])
    (c,) = rep.chains
    assert [(h.actor_name, h.task, h.pid) for h in c.path] == [
        ("driver", None, 5), ("TaskRunner", "TaskRunner.run", 10), ("agent_loop_worker_0", "AgentLoopWorker.generate_sequences", 20),
        ("vllm_server_0_0", "vLLMHttpServer.generate", 30), ("vllm_server_0_0", "VLLM::Worker_TP1", 31)]
    assert c.path[0].actor_id is None
    assert (c.ends_in.pid, c.ends_in.process) == (31, "VLLM::Worker_TP1")
    assert end_text(c.ends_in).startswith("in its own code at default_loader.py:88 _load_weights; its stack did not move")
    assert [(s.actor_id, s.pid) for s in rep.suspects] == [(SRV, 31)]
    assert suspect_reason(rep.suspects[0]).startswith("end of the wait chain driver (pid 5) → TaskRunner run → agent_loop_worker_0 "
                                             "generate_sequences → vllm_server_0_0 generate → VLLM::Worker_TP1:")


def test_pending_refs_give_the_edge_the_task_tree_lacks():
    """Without a usable parent (here: none), the agent loop's reference to the server's task is the edge."""
    _ctl, al, srv, _ = rows()
    sgen = task("2" * 16, "vLLMHttpServer.generate", SRV, None, 30)
    ref = RawObjectRef(sgen.task_id + "01000000", 20, "10.0.0.1")
    busy = stack(("generate", "/app/server.py", 12), *RAY_TAIL)
    rep = analyse([al, srv], {AL: [idle_async()] * 2, SRV: [busy, busy]}, 0.0, tasks=[sgen], refs=[ref])
    (c,) = rep.chains
    assert [h.pid for h in c.path] == [20, 30] and "server.py:12 generate" in end_text(c.ends_in)
    assert [s.pid for s in rep.suspects] == [30]


def test_a_moving_end_is_no_suspect_and_idle_jobs_have_no_chain():
    ctl, al, _srv, _ = rows()
    run = task("0" * 16, "TaskRunner.run", CTL, None, 10)
    gen = task("1" * 16, "AgentLoopWorker.generate_sequences", AL, run.task_id, 20)
    a = stack(("score", "/app/r.py", 1), *RAY_TAIL)
    b = stack(("score", "/app/r.py", 2), *RAY_TAIL)
    rep = analyse([ctl, al], {CTL: [controller_in_get()] * 2, AL: [a, b]}, 0.0, tasks=[run, gen])
    (c,) = rep.chains
    assert "moves (slow, not hung)" in end_text(c.ends_in) and rep.suspects == ()
    assert analyse([ctl, al], {CTL: [idle_async()], AL: [idle_async()]}, 0.0).chains == ()


def test_a_controller_in_its_own_code_ends_its_chain_and_is_the_suspect():
    """The controller submitted update_actor (its refs are pending) and then went into the user's reward
    function: it WILL wait on the ranks, it does not NOW; its chain ends in it."""
    ctl, _al, _srv, drv = rows()
    w0 = replace(row("d4" * 12 + JOB, "wg", 0, task="WorkerDict.actor_rollout_update_actor", pid=40), job_id=JOB)
    run = task("0" * 16, "TaskRunner.run", CTL, driver_task_id(JOB), 10)
    upd = task("1" * 16, "WorkerDict.actor_rollout_update_actor", w0.actor_id, run.task_id, 40)
    ref = RawObjectRef(upd.task_id + "01000000", 10, "10.0.0.1")
    reward = stack(("my_reward_fn", "/app/reward.py", 88), ("TaskRunner.run", "/app/job.py", 92), *RAY_TAIL)
    computing = [stack(("forward", "/app/model.py", n), ("WorkerDict.actor_rollout_update_actor", "/app/w.py", 9),
                       *RAY_TAIL) for n in (1, 2)]
    rep = analyse([ctl, w0, drv], {CTL: [reward, reward], w0.actor_id: computing,
                                   drv.actor_id: [controller_in_get()] * 2}, 0.0, tasks=[run, upd], refs=[ref])
    (c,) = rep.chains
    assert [h.pid for h in c.path] == [5, 10], c
    assert end_text(c.ends_in).startswith("in its own code at reward.py:88 my_reward_fn; its stack did not move")
    assert [s.pid for s in rep.suspects] == [10]


def test_an_engine_core_reading_its_workers_through_a_comprehension_waits_on_the_one_outside():
    _ctl, _al, srv, _ = rows()
    def tp(k: int) -> ChildProc:
        return ChildProc(SRV, 31 + k, 50, f"VLLM::Worker_TP{k}")

    core = ChildProc(SRV, 50, 30, "VLLM::EngineCore_DP0")
    reads = stack(("MultiprocExecutor.get_response.<locals>.<listcomp>", "/x/vllm/v1/executor/multiproc_executor.py",
                   312), ("MultiprocExecutor.get_response", "/x/vllm/v1/executor/multiproc_executor.py", 312),
                  ("MultiprocExecutor.collective_rpc", "/x/vllm/v1/executor/multiproc_executor.py", 290),
                  ("EngineCore.collective_rpc", "/x/vllm/v1/engine/core.py", 480))
    in_ar = stack(("all_reduce", "/x/torch/distributed/distributed_c10d.py", 2800),
                  ("WorkerProc.update_weights", "/x/vllm/v1/executor/multiproc_executor.py", 44),
                  ("WorkerProc.worker_busy_loop", "/x/vllm/v1/executor/multiproc_executor.py", 34))
    stuck = engine()
    rep = analyse([srv], {SRV: [idle_async()] * 2, f"{SRV}:50": [reads, reads], f"{SRV}:31": [in_ar, in_ar],
                          f"{SRV}:32": [stuck, stuck]}, 0.0, children=[core, tp(0), tp(1)])
    ends = {c.ends_in.process for c in rep.chains}
    assert ends == {"VLLM::Worker_TP1"}, [end_text(c.ends_in) for c in rep.chains]
    assert [(s.pid, s.why[0].kind) for s in rep.suspects] == [(32, "tp")]


def _async_with_thread(frames) -> ProcessDump:
    """An async actor awaiting (its loop idle) with a thread of its own running ``frames``."""
    base = idle_async()
    return ProcessDump(1, threads=(*base.threads, ThreadStack(3, "Thread-1 (worker)", True, False, frames)))


def test_an_async_server_with_a_pipe_reader_thread_waits_on_its_engine_and_is_no_suspect():
    """The rollout server awaits its engine in update_weights while a thread of its own reads the engine's
    pipe (``for line in proc.stdout``: a read in C, its innermost Python frame its own code): the chain runs
    on through the engine core to the TP worker outside the collective, the one suspect; the server is none.
    A thread the task handed work to (an executor's) is the task's: there the chain ends in the server."""
    ctl, _al, srv, drv = rows()
    srv = replace(srv, task="vLLMHttpServer.update_weights")
    run = task("0" * 16, "TaskRunner.run", CTL, driver_task_id(JOB), 10)
    upd = task("1" * 16, "vLLMHttpServer.update_weights", SRV, run.task_id, 30)
    core = ChildProc(SRV, 50, 30, "VLLM::EngineCore_DP0")
    tps = [ChildProc(SRV, 31 + k, 50, f"VLLM::Worker_TP{k}") for k in (0, 1)]
    reads = stack(("MultiprocExecutor.get_response", "/x/vllm/v1/executor/multiproc_executor.py", 312),
                  ("MultiprocExecutor.collective_rpc", "/x/vllm/v1/executor/multiproc_executor.py", 290))
    in_ar = stack(("all_reduce", "/x/torch/distributed/distributed_c10d.py", 2800),
                  ("WorkerProc.update_weights", "/x/vllm/v1/executor/multiproc_executor.py", 44),
                  ("WorkerProc.worker_busy_loop", "/x/vllm/v1/executor/multiproc_executor.py", 34))
    reader = stack(("vLLMHttpServer._read_outputs", "/app/rollout.py", 116),
                   ("Thread.run", "/usr/lib/python3.11/threading.py", 982),
                   ("Thread._bootstrap_inner", "/usr/lib/python3.11/threading.py", 1045)).threads[0].frames
    dumps = {CTL: [controller_in_get()] * 2, drv.actor_id: [controller_in_get()] * 2,
             f"{SRV}:50": [reads, reads], f"{SRV}:31": [in_ar, in_ar], f"{SRV}:32": [engine(), engine()]}
    rep = analyse([ctl, srv, drv], {**dumps, SRV: [_async_with_thread(reader)] * 2}, 0.0,
                  children=[core, *tps], tasks=[run, upd])
    assert {c.ends_in.process for c in rep.chains} == {"VLLM::Worker_TP1"}, [end_text(c.ends_in) for c in rep.chains]
    assert [h.pid for h in rep.chains[0].path] == [5, 10, 30, 50, 32]
    assert [s.pid for s in rep.suspects] == [32], [(s.pid, suspect_reason(s)) for s in rep.suspects]
    # the same server awaiting run_in_executor(my_fn): the executor's thread is the task's work
    pool = stack(("my_fn", "/app/rollout.py", 70), ("_WorkItem.run", "/usr/lib/python3.11/concurrent/futures/thread.py", 58),
                 ("_worker", "/usr/lib/python3.11/concurrent/futures/thread.py", 83)).threads[0].frames
    rep = analyse([ctl, srv, drv], {**dumps, SRV: [_async_with_thread(pool)] * 2}, 0.0,
                  children=[core, *tps], tasks=[run, upd])
    assert 30 in {c.ends_in.pid for c in rep.chains}, [end_text(c.ends_in) for c in rep.chains]
