"""A job that cannot start, on a real local Ray cluster: verl resource pools that cannot be placed, an actor
whose runtime env cannot be built, and a pool that waits for resources another job holds.

Run as ``python pending_job.py host`` by ``test_pending_live.py`` (never in the pytest process): it starts a
single-node cluster (``num_cpus=2``, dashboard on a free port, token auth with the token from
``RAY_AUTH_TOKEN``), answers ``{"ok": true, "dashboard": ..., "gcs": ...}`` and then one JSON line per
command read from stdin:

- ``infeasible``: a verl-like controller actor (class ``TaskRunner``, ``num_cpus=0``) whose ``run`` builds a
  verl ``RayWorkerGroup`` on ``RayResourcePool([2], use_gpu=False, max_colocate_count=10, name_prefix="big")``:
  2 bundles × {CPU: 10} on a 2-CPU node, so it blocks in verl's ``get_placement_groups``
  (``ray.get(pg.ready())``) for good, as verl's trainer does;
- ``broken_env``: an actor with ``runtime_env={"conda": <an env that does not exist>}`` (this machine has no
  conda: Ray fails the env in ~2 s, the actor is DEAD);
- ``hold``: a live 2-worker verl group on ``RayResourcePool([2], max_colocate_count=1, name_prefix="hold")``:
  both CPUs reserved;
- ``job2``: a second driver (``python pending_job.py job2``, its own Ray job) asks for the same kind of
  pool (``name_prefix="job2"``) and blocks, in its main thread, until it is placed; ``release``: the host kills its workers and
  removes its placement group; ``wait_job2``: until job 2's workers are up;
- ``stop``: job 2 exits, the cluster shuts down.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register


class PendingWorker(Worker):
    """A verl worker that does nothing but exist."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def ping(self) -> int:
        return os.getpid()


class TaskRunner:
    """verl's controller, in short: it builds the worker group, and waits in ``ray.get`` for its pool."""

    def run(self) -> int:
        _, wg = _group("big", [2], 10)
        return len(wg.worker_names)


class BrokenEnv:
    def ping(self) -> int:
        return os.getpid()


def _group(prefix: str, counts: list[int], colocate: int) -> Any:
    import ray
    from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    pool = RayResourcePool(process_on_nodes=counts, use_gpu=False, max_colocate_count=colocate, name_prefix=prefix)
    wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(PendingWorker)),
                        name_prefix=f"{prefix}wg")
    return pool, wg


class Host:
    def __init__(self) -> None:
        import ray

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ctx = ray.init(address="local", num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1",
                       dashboard_port=port, logging_level="WARNING", log_to_driver=False)
        self.dashboard = f"http://127.0.0.1:{port}"
        self.gcs = ctx.address_info["gcs_address"]
        self.keep: list[Any] = []
        self.hold: tuple[Any, Any] | None = None
        self.job2: subprocess.Popen | None = None
        self.flag = Path(os.environ.get("TMPDIR", "/tmp"), f"verltop-pending-job2-{os.getpid()}")

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        import ray

        op = cmd["cmd"]
        if op == "infeasible":
            runner = ray.remote(num_cpus=0)(TaskRunner).options(name="task_runner").remote()
            self.keep += [runner, runner.run.remote()]
            return {}
        if op == "broken_env":
            a = ray.remote(BrokenEnv).options(name="broken_env_actor",
                                              runtime_env={"conda": "verltop_no_such_env"}).remote()
            self.keep.append(a)
            return {"actor_id": a._actor_id.hex()}
        if op == "hold":
            self.hold = _group("hold", [2], 1)
            self.hold[1].ping()  # verl returns before its workers run; wait until they do
            return {"workers": self.hold[1].worker_names}
        if op == "job2":
            for p in (self.flag, self.flag.with_suffix(".exit")):
                p.unlink(missing_ok=True)
            env = dict(os.environ, PENDING_GCS=self.gcs, PENDING_FLAG=str(self.flag))
            self.job2 = subprocess.Popen([sys.executable, __file__, "job2"], env=env, stdout=sys.stderr)
            return {"pid": self.job2.pid}
        if op == "release":
            assert self.hold is not None
            pool, wg = self.hold
            for w in wg.workers:
                ray.kill(w)
            for pg in pool.pgs:
                ray.util.remove_placement_group(pg)
            return {}
        if op == "wait_job2":
            deadline = time.monotonic() + cmd.get("timeout", 60)
            while not self.flag.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            return {"ready": self.flag.exists()}
        raise ValueError(f"unknown command {op!r}")

    def stop(self) -> None:
        import ray

        if self.job2 is not None:
            self.flag.with_suffix(".exit").write_text("")
            try:
                self.job2.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.job2.kill()
                self.job2.wait()
        for p in (self.flag, self.flag.with_suffix(".exit")):
            p.unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            ray.shutdown()


def job2_main() -> int:
    import ray

    ray.init(address=os.environ["PENDING_GCS"], logging_level="WARNING", log_to_driver=False)
    flag = Path(os.environ["PENDING_FLAG"])
    _, wg = _group("job2", [2], 1)  # blocks until its placement group is placed
    wg.ping()
    flag.write_text("ready")
    while not flag.with_suffix(".exit").exists():
        time.sleep(0.3)
    ray.shutdown()
    return 0


def host_main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol owns stdout; Ray's chatter goes to stderr
    os.dup2(2, 1)
    t0 = time.monotonic()
    try:
        host = Host()
    except BaseException:
        proto.write(json.dumps({"ok": False, "error": traceback.format_exc()}) + "\n")
        raise
    proto.write(json.dumps({"ok": True, "dashboard": host.dashboard, "gcs": host.gcs,
                            "startup_s": round(time.monotonic() - t0, 1)}) + "\n")
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            if cmd["cmd"] == "stop":
                break
            try:
                reply = {"ok": True, **host.handle(cmd)}
            except Exception:  # noqa: BLE001 - the test sees the traceback
                reply = {"ok": False, "error": traceback.format_exc()}
            proto.write(json.dumps(reply) + "\n")
    finally:
        host.stop()
        proto.write(json.dumps({"ok": True, "stopped": True}) + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["host"]:
        sys.exit(host_main())
    if sys.argv[1:2] == ["job2"]:
        sys.exit(job2_main())
    sys.exit(f"usage: {sys.argv[0]} host | job2")
