from __future__ import annotations

from verltop.model import ActorRow, Frame, ProcessDump, ThreadStack


def row(actor_id: str, group: str | None = "wg", rank: int | None = 0, role: str = "actor_rollout",
        state: str = "ALIVE", task: str | None = "actor_rollout_update_actor", gpu: float | None = None,
        pid: int = 100, death: str | None = None) -> ActorRow:
    return ActorRow(
        actor_id=actor_id, actor_name=f"{group}WorkerDict_0:{rank}" if group else actor_id,
        class_name="create_colocated_worker_cls.<locals>.WorkerDict" if group else "TaskRunner",
        pid=pid, node_id="n1", node_ip="10.0.0.1", state=state, worker_group=group, rank=rank, world_size=4,
        role=role, roles=(role,), task=task, task_id="t" + actor_id, task_running_s=100.0,
        gpu_index=None, gpu_util_percent=gpu, gpu_mem_bytes=None, gpu_mem_total_bytes=None, cpu_percent=None,
        rss_bytes=None, host_mem_total_bytes=None, death_cause=death,
    )


def stack(*frames: tuple[str, str, int], active: bool = True, name: str = "MainThread") -> ProcessDump:
    fr = tuple(Frame(f, file, line) for f, file, line in frames)
    return ProcessDump(1, threads=(ThreadStack(1, name, active, False, fr),))


RAY_TAIL = (("actor_method_executor", "/x/ray/_private/function_manager.py", 740),
            ("Worker.main_loop", "/x/ray/_private/worker.py", 1069),
            ("<module>", "/x/ray/_private/workers/default_worker.py", 323))


def in_collective(op: str, line: int = 120) -> ProcessDump:
    return stack((op, "/x/torch/distributed/distributed_c10d.py", 2800),
                 ("_exception_logger.<locals>.wrapper", "/x/torch/distributed/c10d_logger.py", 83),
                 ("WorkerDict.actor_rollout_update_actor", "/app/workers.py", line), *RAY_TAIL)


def sleeping(func: str = "generate_sequences", line: int = 55) -> ProcessDump:
    return stack((func, "/app/workers.py", line),
                 ("WorkerDict.actor_rollout_update_actor", "/app/workers.py", 118), *RAY_TAIL, active=False)


def controller_in_get() -> ProcessDump:
    return stack(("Worker.get_objects", "/x/ray/_private/worker.py", 1007),
                 ("get", "/x/ray/_private/worker.py", 3009),
                 ("wrapper", "/x/ray/_private/client_mode_hook.py", 104),
                 ("TaskRunner.run", "/app/job.py", 92), *RAY_TAIL, active=False)
