"""The demo's inference engine, shaped like vLLM's multiprocess engine that verl's ``vLLMHttpServer`` starts.

    python -m verltop.demo.engine core --tp 2 --dp-rank 0 --state-dir DIR        (the server starts this)
    python -m verltop.demo.engine worker --rank R --world 2 --rendezvous F ...   (the engine core starts these)

The process tree is vLLM's (``distributed_executor_backend="mp"``)::

    ray::vLLMHttpServer                 the Ray actor (rollout.py)
     └─ VLLM::EngineCore_DP0            this module, ``core``: requests in, batches out
         ├─ VLLM::Worker_TP0            this module, ``worker``: one tensor-parallel rank each
         └─ VLLM::Worker_TP1

Titles are set with ``setproctitle`` as vLLM does (``VLLM::`` + name); without the package the processes keep
their command line. The engine core reads requests from its stdin in a thread (vLLM's
``process_input_sockets``) into a queue its busy loop waits on; every engine step is a ``collective_rpc`` that
writes one message to each worker's stdin (vLLM's shared-memory broadcast queue) and reads one answer from
each (``get_response``). Workers run every rpc in ``worker_busy_loop`` and meet in a real gloo
``all_reduce`` (the TP all-reduce of a forward pass), as vLLM's ranks meet in NCCL.

The TP hang: ``update_weights`` with ``hang_rank=r`` makes worker r stop inside ``_load_weights_bucket``
(until the demo's release file appears) while the other ranks wait for it in ``all_reduce``, the engine core
in ``get_response``, the server in ``await``, and the controller in ``ray.get``.

This module imports nothing heavy at the top: the engine core never imports torch; workers do.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

# File names in the demo's state directory (the same as workers.py / cluster.py).
HUNG_FILE = "hung"
RELEASE_FILE = "release"
PIDS_DIR = "pids"

STEP_S = 0.12  # one engine step (a decode step of the whole batch)
DUTY = 0.15  # the share of a step a worker computes; it sleeps the rest (2 cores for the whole demo)
WEIGHT_BUCKETS = 4
HIDDEN = 96


def set_title(title: str) -> None:
    """``setproctitle`` as vLLM's ``set_process_title`` does (a no-op without the package)."""
    try:
        from setproctitle import setproctitle
    except ImportError:
        return
    setproctitle(title)


def die_with_parent() -> None:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)``, as verl's worker extension sets for vLLM's workers."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def record_pid(state_dir: str, role: str, rank: int) -> None:
    d = Path(state_dir, PIDS_DIR)
    d.mkdir(parents=True, exist_ok=True)
    (d / str(os.getpid())).write_text(json.dumps({"role": role, "rank": rank}))


def _send(out: IO[str], lock: threading.Lock, msg: dict[str, Any]) -> None:
    with lock:
        out.write(json.dumps(msg) + "\n")
        out.flush()


# ------------------------------------------------------------------------------------------------ workers


class Worker:
    """One tensor-parallel rank: a slice of a tiny model, and a gloo group with its TP peers."""

    def __init__(self, rank: int, world: int, rendezvous: str, state_dir: str, seed: int) -> None:
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        from verltop.demo.rendezvous import join_gloo

        torch.set_num_threads(1)
        self.torch, self.dist = torch, dist
        self.rank, self.world, self.state_dir = rank, world, Path(state_dir)
        join_gloo(rank, world, "127.0.0.1", Path(rendezvous), timedelta(hours=2))
        torch.manual_seed(seed + rank)
        self.weight = torch.randn(HIDDEN, HIDDEN) / HIDDEN**0.5
        self.rng = random.Random(seed * 100 + rank)
        # on a machine with GPUs, VERLTOP_DEMO_GPU_MB makes each rank hold (rank + 1) x that much GPU memory,
        # as a real engine's KV cache does (how verltop's GPU attribution to child processes was checked)
        mb = int(os.environ.get("VERLTOP_DEMO_GPU_MB") or 0)
        self.kv_cache = None
        if mb and torch.cuda.is_available():
            dev = torch.device("cuda", rank % torch.cuda.device_count())
            self.kv_cache = torch.ones((rank + 1) * mb * (1 << 20), dtype=torch.uint8, device=dev)

    def _burst(self, seconds: float) -> Any:
        """Compute for ``DUTY`` of ``seconds`` in one burst, sleep the rest."""
        t0 = time.monotonic()
        x = self.torch.randn(16, HIDDEN)
        while time.monotonic() - t0 < seconds * DUTY:
            x = self.torch.tanh(x @ self.weight)
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
        return x

    def execute_model(self, num_seqs: int) -> dict[str, Any]:
        """One decode step for the batch: this rank's slice, then the TP all-reduce of its activations."""
        x = self._burst(STEP_S)
        partial = x.sum(dim=0)
        self.dist.all_reduce(partial)  # the TP all-reduce every forward pass ends in
        return {"rank": self.rank, "num_seqs": num_seqs, "norm": float(partial.norm())}

    def update_weights(self, step: int, hang_rank: int = -1) -> dict[str, Any]:
        """Load the trainer's new weights bucket by bucket, then check that every rank has them."""
        for bucket in range(WEIGHT_BUCKETS):
            self._load_weights_bucket(step, bucket, hang=self.rank == hang_rank and bucket == 1)
        checksum = self.weight.sum().reshape(1)
        self.dist.all_reduce(checksum)
        return {"rank": self.rank, "step": step}

    def _load_weights_bucket(self, step: int, bucket: int, hang: bool) -> None:
        if hang:
            _stuck(self.state_dir, step, self.rank, "tp1" if self.rank == 1 else f"tp{self.rank}")
        self._burst(0.05)
        with self.torch.no_grad():
            self.weight.mul_(0.999).add_(self.torch.randn(HIDDEN, HIDDEN) * 1e-4)


def _stuck(state_dir: Path, step: int, rank: int, target: str) -> None:
    """Where a hung TP worker sits: writes the ``hung`` marker, sleeps until the release file appears."""
    hung = state_dir / HUNG_FILE
    release = state_dir / RELEASE_FILE
    hung.write_text(json.dumps({"step": step, "rank": rank, "pid": os.getpid(), "since": time.time(),
                                "target": target}))
    while not release.exists():
        time.sleep(0.5)
    release.unlink(missing_ok=True)
    hung.unlink(missing_ok=True)


def worker_busy_loop(w: Worker, inp: IO[str], out: IO[str]) -> None:
    """Run every rpc the engine core broadcasts; answer each (vLLM's ``WorkerProc.worker_busy_loop``)."""
    lock = threading.Lock()
    for line in inp:
        msg = json.loads(line)
        try:
            result = getattr(w, msg["method"])(*msg.get("args", ()))
            _send(out, lock, {"ok": True, "result": result})
        except Exception as e:  # noqa: BLE001 - the engine core reports it with the rank
            _send(out, lock, {"ok": False, "error": f"{e.__class__.__name__}: {e}"})


def worker_main(a: argparse.Namespace) -> int:
    die_with_parent()
    set_title(f"VLLM::Worker_TP{a.rank}" if a.world > 1 else "VLLM::Worker")
    record_pid(a.state_dir, "tp_worker", a.rank)
    w = Worker(a.rank, a.world, a.rendezvous, a.state_dir, a.seed)
    out = sys.stdout
    sys.stdout = sys.stderr  # the pipe is the protocol
    _send(out, threading.Lock(), {"ok": True, "ready": a.rank})
    worker_busy_loop(w, sys.stdin, out)
    return 0


# -------------------------------------------------------------------------------------------- engine core


class MultiprocExecutor:
    """The TP workers, started as children of the engine core, and the rpc that reaches all of them."""

    def __init__(self, tp: int, state_dir: str, seed: int) -> None:
        # the TP group's store port comes from its rank 0, through this file (see rendezvous.py)
        note = Path(state_dir, "rendezvous", f"engine-{os.getpid()}")
        self.procs = [
            subprocess.Popen([sys.executable, "-m", "verltop.demo.engine", "worker", "--rank", str(r),
                              "--world", str(tp), "--rendezvous", str(note), "--state-dir", state_dir, "--seed", str(seed)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
            for r in range(tp)
        ]
        for r in range(tp):
            ready = self.get_response(r)
            if not ready.get("ok"):
                raise RuntimeError(f"TP worker {r} failed to start: {ready}")

    def collective_rpc(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` on every worker; waits for every answer."""
        line = json.dumps({"method": method, "args": args}) + "\n"
        for p in self.procs:  # the broadcast: one message per worker
            assert p.stdin is not None
            p.stdin.write(line)
            p.stdin.flush()
        out = []
        for r in range(len(self.procs)):
            msg = self.get_response(r)
            if not msg.get("ok"):
                raise RuntimeError(f"TP worker {r}: {msg.get('error')}")
            out.append(msg["result"])
        return out

    def get_response(self, rank: int) -> dict[str, Any]:
        p = self.procs[rank]
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"TP worker {rank} exited (rc={p.poll()})")
        return json.loads(line)


class EngineCore:
    """Requests in, a batch per step, results out (vLLM's ``EngineCoreProc``, much reduced)."""

    def __init__(self, executor: MultiprocExecutor, out: IO[str], seed: int) -> None:
        self.executor = executor
        self.out = out
        self.lock = threading.Lock()
        self.input_queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.running: dict[str, int] = {}  # request id -> tokens still to generate
        self.rng = random.Random(seed)

    def process_input_sockets(self, inp: IO[str]) -> None:
        """The input thread: requests from the server into the busy loop's queue."""
        for line in inp:
            self.input_queue.put(json.loads(line))
        self.input_queue.put(None)  # the server is gone; a real engine would now leak (see README)

    def _handle(self, req: dict[str, Any]) -> None:
        op = req["op"]
        if op == "generate":
            self.running[req["id"]] = int(req.get("max_tokens") or self.rng.randint(10, 18))
        elif op == "update_weights":
            try:
                self.executor.collective_rpc("update_weights", req["step"], req.get("hang_rank", -1))
                _send(self.out, self.lock, {"id": req["id"], "ok": True})
            except RuntimeError as e:
                _send(self.out, self.lock, {"id": req["id"], "ok": False, "error": str(e)})

    def _process_input_queue(self) -> bool:
        """Wait for work when idle, else take what has arrived; False once the server is gone."""
        block = not self.running
        while True:
            try:
                req = self.input_queue.get(block=block)
            except queue.Empty:
                return True
            if req is None:
                return False
            self._handle(req)
            block = False

    def step(self) -> None:
        """One decode step of every running request."""
        self.executor.collective_rpc("execute_model", len(self.running))
        for rid in list(self.running):
            self.running[rid] -= 1
            if self.running[rid] <= 0:
                del self.running[rid]
                _send(self.out, self.lock, {"id": rid, "ok": True, "tokens": self.rng.randint(64, 512)})

    def run_busy_loop(self) -> None:
        while self._process_input_queue():
            if self.running:
                self.step()
        # the server is gone: stay, holding what a real engine holds, until killed — as a leaked vLLM
        # engine does (its TP workers die with it: PR_SET_PDEATHSIG)
        while True:
            time.sleep(3600)


def core_main(a: argparse.Namespace) -> int:
    set_title(f"VLLM::EngineCore_DP{a.dp_rank}")
    record_pid(a.state_dir, "engine_core", a.dp_rank)
    out = sys.stdout
    sys.stdout = sys.stderr
    executor = MultiprocExecutor(a.tp, a.state_dir, a.seed)
    core = EngineCore(executor, out, a.seed)
    threading.Thread(target=core.process_input_sockets, args=(sys.stdin,), name="process_input_sockets",
                     daemon=True).start()
    _send(out, core.lock, {"ready": True, "workers": [p.pid for p in executor.procs]})
    core.run_busy_loop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verltop.demo.engine")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("core")
    c.add_argument("--tp", type=int, default=2)
    c.add_argument("--dp-rank", type=int, default=0)
    w = sub.add_parser("worker")
    w.add_argument("--rank", type=int, required=True)
    w.add_argument("--world", type=int, required=True)
    w.add_argument("--rendezvous", required=True, help="where rank 0 writes its store's port")
    for p in (c, w):
        p.add_argument("--state-dir", required=True)
        p.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    return core_main(a) if a.cmd == "core" else worker_main(a)


if __name__ == "__main__":
    sys.exit(main())
