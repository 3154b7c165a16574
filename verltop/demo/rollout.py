"""The demo's rollout, shaped like verl 0.9's agent-loop rollout (``verl/experimental/agent_loop``):

- ``vLLMHttpServer`` (actor ``vllm_server_0_0``, an asyncio actor, as ``vllm_async_server.py`` makes it):
  starts the engine (``engine.py``: ``VLLM::EngineCore_DP0`` with ``VLLM::Worker_TP0``/``TP1`` below it) as
  its child process and forwards ``generate`` and ``update_weights`` to it;
- ``AgentLoopWorker`` (``agent_loop_worker_{i}``, asyncio): ``generate_sequences`` runs one agent loop per
  prompt, each awaiting ``server.generate.remote(...)`` (verl's ``LLMServerClient``: Ray calls, not HTTP)
  and then ``reward_loop.compute_score.remote(...)``;
- ``RewardLoopWorker`` (``reward_loop_worker_0``, asyncio): ``compute_score`` runs the rule-based scorer in
  the loop's default executor, as verl's naive reward manager does; the scorer runs the response's "code"
  in a sandbox child process (``sandbox.py``), as ``prime_code`` runs its test cases.

The classes are plain; ``job.py`` makes them Ray actors (``ray.remote(cls)``, as verl does). Nothing heavy
is imported here: these workers never import torch.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from verltop.sources.aio import within

SERVER_NAME = "vllm_server_0_0"  # verl: f"{prefix}server_{replica_rank}_{node_rank}", prefix "vllm_"
TP_SIZE = 2
PIDS_DIR = "pids"
HUNG_FILE = "hung"
RELEASE_FILE = "release"

SANDBOX = str(Path(__file__).with_name("sandbox.py"))  # run by path, with -I -S: stdlib only
BATCH_BYTES = 1 << 20  # the output batch an agent-loop worker keeps in Ray's object store (verl: a DataProto)
MAX_NUM_SEQS = 16  # the engine's batch: requests past it wait (vLLM's max_num_seqs)


def _record_pid(state_dir: str, role: str, rank: int) -> None:
    d = Path(state_dir, PIDS_DIR)
    d.mkdir(parents=True, exist_ok=True)
    (d / str(os.getpid())).write_text(json.dumps({"role": role, "rank": rank}))


class vLLMHttpServer:
    """The rollout server: owns the engine process and answers ``generate`` for the agent loops."""

    def __init__(self, state_dir: str, seed: int = 0, tp: int = TP_SIZE, detached_engine: bool = False) -> None:
        """``detached_engine``: start the engine in a session of its own, as a launcher that calls setsid
        does. Ray ≥ 2.57 kills a dead worker's process group (``RAY_process_group_cleanup_enabled``), so an
        engine in the server's group dies with it; a detached one is left behind, holding what it holds."""
        self.state_dir = state_dir
        self.seed = seed
        self.tp = tp
        self.detached_engine = detached_engine
        self._engine: subprocess.Popen[str] | None = None
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.engine_pids: dict[str, Any] = {}
        self._gen_tokens = 0
        self.metrics_port: int | None = None

    async def launch_server(self) -> dict[str, Any]:
        """Start the engine core (which starts its TP workers) and wait until every rank is up."""
        _record_pid(self.state_dir, "rollout_server", 0)
        self._loop = asyncio.get_running_loop()
        env = dict(os.environ)
        # the engine imports this package: the same copy as ours, wherever it is installed from
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self._engine = subprocess.Popen(
            [sys.executable, "-m", "verltop.demo.engine", "core", "--tp", str(self.tp), "--dp-rank", "0",
             "--state-dir", self.state_dir, "--seed", str(self.seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env,
            start_new_session=self.detached_engine)
        ready = await asyncio.to_thread(self._engine.stdout.readline)  # type: ignore[union-attr]
        if not ready:
            raise RuntimeError(f"the engine exited while starting (rc={self._engine.poll()})")
        info = json.loads(ready)
        self.engine_pids = {"engine": self._engine.pid, "workers": info["workers"]}
        threading.Thread(target=self._read_outputs, name="engine_output_handler", daemon=True).start()
        # the OpenAI server's port, as verl's run_uvicorn binds it (the node's IP, port 0): here only /metrics
        self._http = await asyncio.start_server(self._serve_http, _node_ip(), 0)
        self.metrics_port = self._http.sockets[0].getsockname()[1]
        return {"server_pid": os.getpid(), "metrics_port": self.metrics_port, **self.engine_pids}

    def metrics_text(self) -> str:
        """vLLM's own /metrics names (V1 engine, ``vllm/v1/metrics/loggers.py``) for what the demo's engine does."""
        inflight = len(self._pending)
        running, waiting = min(inflight, MAX_NUM_SEQS), max(0, inflight - MAX_NUM_SEQS)
        labels = '{engine="0",model_name="demo"}'
        rows = [("vllm:num_requests_running", "gauge", running), ("vllm:num_requests_waiting", "gauge", waiting),
                ("vllm:kv_cache_usage_perc", "gauge", round(0.9 * running / MAX_NUM_SEQS, 4)),
                ("vllm:num_preemptions_total", "counter", 0), ("vllm:generation_tokens_total", "counter", self._gen_tokens)]
        return "".join(f"# TYPE {n.removesuffix('_total')} {t}\n{n}{labels} {float(v)}\n" for n, t, v in rows)

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await within(reader.readuntil(b"\r\n\r\n"), 5)
            ok = head.split(b"\r\n", 1)[0].split(b" ")[:2] == [b"GET", b"/metrics"]
            body = self.metrics_text().encode() if ok else b"not found\n"
            writer.write(b"HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (b"200 OK" if ok else b"404 Not Found", len(body), body))
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()

    def _read_outputs(self) -> None:
        """The output handler: engine answers back to the awaiting coroutines."""
        assert self._engine is not None and self._engine.stdout is not None and self._loop is not None
        for line in self._engine.stdout:
            msg = json.loads(line)
            fut = self._pending.pop(msg.get("id", ""), None)
            if fut is not None:
                self._loop.call_soon_threadsafe(_settle, fut, msg)
        err = RuntimeError(f"the engine exited (rc={self._engine.poll()})")
        for fut in list(self._pending.values()):
            self._loop.call_soon_threadsafe(_settle, fut, err)
        self._pending.clear()

    async def _call(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self._engine is not None and self._engine.stdin is not None and self._loop is not None
        rid = f"req-{next(self._ids)}"
        fut = self._loop.create_future()
        self._pending[rid] = fut
        self._engine.stdin.write(json.dumps({"id": rid, **req}) + "\n")
        self._engine.stdin.flush()
        msg = await fut
        if not msg.get("ok"):
            raise RuntimeError(f"engine: {msg.get('error')}")
        return msg

    async def generate(self, prompt_ids: list[int], request_id: str) -> dict[str, Any]:
        """One request through the engine's continuous batch."""
        out = await self._call({"op": "generate", "prompt_len": len(prompt_ids), "request_id": request_id})
        self._gen_tokens += int(out["tokens"])
        return {"request_id": request_id, "response_len": out["tokens"]}

    async def update_weights(self, step: int, hang_rank: int = -1) -> dict[str, Any]:
        """The trainer's new weights into every TP worker (``hang_rank``: that worker hangs in the load)."""
        await self._call({"op": "update_weights", "step": step, "hang_rank": hang_rank})
        return {"step": step}

    async def pids(self) -> dict[str, Any]:
        return {"server_pid": os.getpid(), **self.engine_pids}


def _node_ip() -> str:
    """The node's IP as Ray knows it (verl binds its servers there); ray is loaded already in a Ray worker."""
    try:
        import ray

        return ray.util.get_node_ip_address().strip("[]")
    except Exception:  # noqa: BLE001 - outside Ray (a unit test): loopback
        return "127.0.0.1"


def _settle(fut: asyncio.Future[dict[str, Any]], value: Any) -> None:
    if fut.done():
        return
    if isinstance(value, BaseException):
        fut.set_exception(value)
    else:
        fut.set_result(value)


LATE_WORKER = 1  # agent_loop_worker_1 ends every generation this much after its peer
LATE_WORKER_S = 2.0


class AgentLoopWorker:
    """Runs the agent loops of its share of the batch: generate on the server, then score."""

    def __init__(self, index: int, server: Any, reward_loop: Any, state_dir: str, seed: int = 0) -> None:
        self.index = index
        self.server = server
        self.reward_loop = reward_loop
        self.state_dir = state_dir
        self.seed = seed
        _record_pid(state_dir, "agent_loop", index)

    async def generate_sequences(self, step: int, num_prompts: int, hang_sandbox: bool = False) -> dict[str, Any]:
        """``num_prompts`` single-turn agent loops at once (verl's ``_run_agent_loop`` per sample)."""
        rng = random.Random(f"{self.seed}:{step}:{self.index}")
        loops = [self._run_agent_loop(step, i, [rng.randrange(32000) for _ in range(rng.randint(16, 64))],
                                      hang_sandbox and i == 0)
                 for i in range(num_prompts)]
        outs = await asyncio.gather(*loops)
        import ray  # as a verl agent-loop worker puts its output batch; the last one is kept (bounded)

        self.batch = ray.put(bytes(BATCH_BYTES))
        if self.index == LATE_WORKER:  # its share always holds the longest response (verl#658's long tail)
            await asyncio.sleep(LATE_WORKER_S)
        return {"worker": self.index, "responses": len(outs), "score": sum(o["score"] for o in outs) / len(outs)}

    async def _run_agent_loop(self, step: int, i: int, prompt: list[int], hang_sandbox: bool) -> dict[str, Any]:
        out = await self.server.generate.remote(prompt, f"{step}-{self.index}-{i}")
        score = await self.reward_loop.compute_score.remote(step, out["response_len"], hang_sandbox)
        return {**out, "score": score}


class RewardLoopWorker:
    """Scores responses; the rule-based scorer runs each in a sandbox child process."""

    def __init__(self, state_dir: str, seed: int = 0) -> None:
        self.state_dir = state_dir
        self.seed = seed
        _record_pid(state_dir, "reward_loop", 0)

    async def compute_score(self, step: int, response_len: int, hang: bool = False) -> float:
        loop = asyncio.get_running_loop()
        # a sync scorer goes to the default executor, as verl's naive reward manager sends it
        return await loop.run_in_executor(None, self._run_sandbox, step, response_len, hang)

    def _run_sandbox(self, step: int, response_len: int, hang: bool) -> float:
        job = {"step": step, "tokens": response_len, "hang": hang, "run_s": 0.3,
               "hung": str(Path(self.state_dir, HUNG_FILE)), "release": str(Path(self.state_dir, RELEASE_FILE))}
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-I", "-S", SANDBOX], input=json.dumps(job),
                           capture_output=True, text=True, timeout=None if hang else 60)
        if p.returncode != 0:
            raise RuntimeError(f"sandbox failed (rc={p.returncode}): {p.stderr[-300:]}")
        passed = json.loads(p.stdout)["passed"]
        return (1.0 if passed else 0.0) - 0.01 * (time.monotonic() - t0)
