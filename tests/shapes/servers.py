"""Rollout-server processes as verl's ``vLLMHttpServer`` / ``SGLangHttpServer`` actors run them: the engine's
processes are their children, and the server awaits the engine on its asyncio loop (its own stack shows
nothing running). ``run_*_server`` is the body of such an actor; ``*_server_main`` runs it in a plain process
titled like the Ray worker (for tests without Ray)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from shapes import set_title, spawn, touch


def start_vllm(directory: str, world: int, port: int, hang_tp: int) -> list:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    procs = [spawn("vllm.v1.engine.core.run_engine_core", directory, world, port, hang_tp)]
    while not (d / "ready.engine").exists():
        time.sleep(0.05)
    return procs


def start_sglang(directory: str, world: int, port: int, hang: bool) -> list:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    procs = [spawn("sglang.srt.managers.scheduler.run_scheduler_process", tp, world, port, directory, hang)
             for tp in range(world)]
    procs.append(spawn("sglang.srt.managers.detokenizer_manager.run_detokenizer_process"))
    for tp in range(world):
        while not (d / f"ready.s{tp}").exists():
            time.sleep(0.05)
    return procs


async def generate(directory: str, request: str, n: int = 0) -> str:
    """Hand the engine a request and await its output (the actor's coroutine, suspended)."""
    d = Path(directory)
    touch(d / f"in.{n}", request)
    while not (d / f"out.{n}").exists():
        await asyncio.sleep(0.05)
    return "done"


def vllm_server_main(directory: str, world: int, port: int, hang_tp: int) -> None:
    set_title("ray::vLLMHttpServer.generate")
    start_vllm(directory, world, port, hang_tp)
    asyncio.run(generate(directory, "update_weights"))


def sglang_server_main(directory: str, world: int, port: int, hang: bool) -> None:
    set_title("ray::SGLangHttpServer.generate")
    start_sglang(directory, world, port, hang)
    asyncio.run(generate(directory, "update_weights_from_tensor"))


async def compute_score(program: str) -> float:
    """RewardLoopWorker.compute_score: a sync scorer in the loop's default executor, as verl's naive manager."""
    from shapes.reward.sandbox import score

    return await asyncio.get_running_loop().run_in_executor(None, score, program)


def reward_main(program: str) -> None:
    set_title("ray::RewardLoopWorker.compute_score")
    asyncio.run(compute_score(program))
