"""SVG snapshots of every screen, drawn from real captures served by a real HTTP server, with a frozen clock.

- ``real-gpu/ray-gpu-cluster``: a Ray 2.60 cluster on 2x H200 hung in NCCL (rank 0 of worker group ``abcd`` in
  all_reduce #5 on a pegged GPU, rank 1 asleep in ``generate_sequences``, the controller in ``ray.get``),
  shown 60 s after both ranks entered ``actor_rollout_update_actor``, stall limit 30 s;
- ``demo-cpu``: ``verltop demo`` on a CPU-only cluster (no GPU), 45 s after rank 2 of its fused
  actor_rollout/critic group stopped taking part in the gradient ``all_reduce``.

The servers listen on fixed ports so that the address in the header stays the same. No Ray here.
Update only after looking at the new pictures (``pytest tests/snapshots --snapshot-update``, then read the
report or the SVGs).
"""

from __future__ import annotations

import asyncio

import pytest

from tests.captures import Replay, demo_cpu, ray_gpu_cluster
from tests.wait import pilot_wait
from verltop.analysis.stalls import StallSettings
from verltop.model import DumpReport
from verltop.sources.config import Endpoint
from verltop.ui.app import VerltopApp

GPU_PORT, CPU_PORT, GONE_PORT = 28765, 28766, 28767
GPU = ray_gpu_cluster()
FROZEN_NOW = GPU.json("capture_meta.json")["t_hang_start"] + 60  # both ranks in update_actor for 60 s
CPU = demo_cpu()
STALL = StallSettings(stall_after_s=30)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def gpu_dash():
    with GPU.dashboard(GPU_PORT) as d:
        yield d


@pytest.fixture(scope="module")
def cpu_dash():
    with CPU.dashboard(CPU_PORT) as d:
        yield d


@pytest.fixture(scope="module")
def gpu_report() -> DumpReport:
    """The hung GPU cluster's dump, taken as ``D`` takes it: the dashboard's tracebacks (two samples), the
    watchdog's lines through the log API; through today's engine."""
    async def take() -> DumpReport:
        async with Replay(GPU, stall=STALL, now=FROZEN_NOW) as r:
            return await r.dump()

    return asyncio.run(take())


def make_app(url: str, clock: Clock) -> VerltopApp:
    return VerltopApp.live(Endpoint(url, "--address", None, None), stall=STALL, use_local=False, clock=clock,
                           autostart=False)


async def _load(pilot, now: float) -> None:
    """One poll of every source, as the first seconds of a live TUI, at a frozen moment."""
    app = pilot.app
    await app.engine.poll_once()
    for s in app.engine.src.all():
        s.ok_at = now  # ages are part of the picture: freeze them too
    await app.engine.publish_now()
    await app.show_now()
    await pilot.pause()


def gpu_app() -> VerltopApp:
    return make_app(f"http://127.0.0.1:{GPU_PORT}", Clock(FROZEN_NOW))


async def gpu_loaded(pilot) -> None:
    await _load(pilot, FROZEN_NOW)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen(snap_compare, gpu_dash, size):
    """The hung GPU cluster's main screen. 80x24: the header wraps whole items onto three lines (the address
    without its scheme, nodes 1, GPUs 2 at 50 %, actors 3 with 2 stalled; CPU, MEM, phase update_actor,
    step 1; last progress 1m00s ago), the table narrows to ROLE, RANK, GPU%, GMEM, RSS, TASK, AGE, STALLED (one node: no NODE; PID,
    GPU, CPU%, STATE stepped aside), the controller's group row selected, both abcd ranks red, update_actor
    for 1m00s, "> 30s, GPU 100…" and "> 30s". 120x40: GPU, CPU%, HOST MEM, STATE come back, the header
    takes two lines. 200x50: PID and the GPU UTIL / GPU MEM bars too, nothing cut."""
    assert snap_compare(gpu_app(), terminal_size=size, run_before=gpu_loaded)


def test_main_grouped_by_node(snap_compare, gpu_dash):
    """``g`` twice: rows grouped by node, one group row for 192.0.2.2 with its 3 actors (2 stalled); the
    message line says "group by: node"."""
    async def run(pilot):
        await gpu_loaded(pilot)
        await pilot.press("g", "g")

    assert snap_compare(gpu_app(), terminal_size=(120, 40), run_before=run)


def test_details_with_log_tail(snap_compare, gpu_dash):
    """Enter on rank 0 of abcd: its facts (actor, class, ALIVE, role, group, rank 0 of ? (no WORLD_SIZE in
    that job's env), node, pid 2120, running task update_actor 1m00s, GPU #0 util 100% mem 1.5G, host CPU
    81% RSS 801.3M), why it is stalled (running 1m00s > 30s; GPU 100 % without progress), then the tail of
    its stderr: the NCCL watchdog's timeout of all_reduce SeqNum=5 and the failed collective's stack."""
    async def run(pilot):
        await gpu_loaded(pilot)
        await pilot.press("j", "j", "j", "enter")
        await _log_loaded(pilot)

    assert snap_compare(gpu_app(), terminal_size=(120, 40), run_before=run)


async def _log_loaded(pilot) -> None:
    log = pilot.app.screen.query_one("#log")
    await pilot_wait(pilot, lambda: "loading" not in str(log.render()), 5, "the log to load", step=0.05)
    await pilot.pause()


async def _open_report(pilot, report: DumpReport) -> None:
    from verltop.ui.screens.stacks import StackScreen

    await gpu_loaded(pilot)
    await pilot.app.push_screen(StackScreen(pilot.app.snapshot, report=report))
    await pilot.pause()


def test_stack_screen_with_suspects(snap_compare, gpu_dash, gpu_report):
    """A finished dump opened as it is (``StackScreen(snap, report=...)``): "2/2 ranks dumped, 1/1 other
    process, 2 samples" (the controller is no rank);
    the suspects box names abcd:1 — not in all_reduce with rank 0, in generate_sequences at
    ray_driver.py:55, stack did not move, never reached collective #5 (last enqueued #4), the controller
    waits on it in ray.get at ray_driver.py:92; the rank table with the suspect first (▶ abcd), rank 0
    "cuda_sync (GPU) all_reduce#5" at ray_driver.py:69, the controller in ray.get, all stuck; the merged
    stack tree below with abcd:1's branch in red."""
    async def run(pilot):
        await _open_report(pilot, gpu_report)

    assert snap_compare(gpu_app(), terminal_size=(200, 50), run_before=run)


def test_stack_screen_at_80x24(snap_compare, gpu_dash, gpu_report):
    """The same dump on a fresh SSH terminal: the chain and the suspect boxes keep three lines each and scroll
    (the reason wraps under itself), the rank table keeps GROUP, RANK, ROLE, WAITS IN, CALLING FRAME and
    MOTION whole (no sideways scrolling: cells wrap, the frame's function under its file:line), the merged
    tree below with lines of its own."""
    async def run(pilot):
        await _open_report(pilot, gpu_report)

    assert snap_compare(gpu_app(), terminal_size=(80, 24), run_before=run)


def test_rank_full_stack(snap_compare, gpu_dash, gpu_report):
    """Enter on the suspect in the stack screen: abcd:1's header (name, pid 2125, node, task), what its
    watchdog line says ("NCCL (watchdog_log): last enqueued 4  last completed 4"), "stack unchanged across
    samples: stuck", then every thread of its last sample, the task thread first: MainThread (idle, in
    generate_sequences) and the PythonGCThread; files named from their package on."""
    async def run(pilot):
        await _open_report(pilot, gpu_report)
        await pilot.press("enter")
        await pilot.pause()

    assert snap_compare(gpu_app(), terminal_size=(120, 40), run_before=run)


def test_help_screen(snap_compare, gpu_dash):
    """``?``: the help box over the main screen, generated from the keymap: the main screen's keys (q, ?, d,
    D, /, s, g, p, l / Enter, j / ↓, k / ↑, Esc, H, PgUp, PgDn, Home, End) with their tooltips, then the stack
    screen's (Esc, Enter, w, r, f, ...); the rest (other screens, what the columns mean) scrolls."""
    async def run(pilot):
        await gpu_loaded(pilot)
        await pilot.press("question_mark")

    assert snap_compare(gpu_app(), terminal_size=(120, 40), run_before=run)


def test_dashboard_gone_after_the_first_load(snap_compare):
    """The dashboard answered once, then went away (its server stopped) and 25 s passed: the last data stays
    on screen (ages now 1m25s); the header turns yellow with "actors data 25s old (stale)" and a line for
    the sources that fail alike: "actors, tasks, nodes: dashboard not reachable at http://127.0.0.1:28767:
    connection refused; is Ray running? use --address or RAY_DASHBOARD_ADDRESS", wrapped, not cut."""
    dash = GPU.dashboard(GONE_PORT)
    clock = Clock(FROZEN_NOW)

    async def run(pilot):
        with dash:
            await _load(pilot, FROZEN_NOW)
        clock.now = FROZEN_NOW + 25
        await pilot.app.engine.poll_once(seed=False)
        await pilot.app.engine.publish_now()
        await pilot.app.show_now()
        pilot.app.screen.tick(clock.now)
        await pilot.pause()

    assert snap_compare(make_app(f"http://127.0.0.1:{GONE_PORT}", clock), terminal_size=(120, 40), run_before=run)


def cpu_app() -> VerltopApp:
    return make_app(f"http://127.0.0.1:{CPU_PORT}", Clock(CPU.at))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_cluster_without_gpu(snap_compare, cpu_dash, size):
    """``verltop demo`` hung on a CPU-only cluster: "GPUs 0", no GPU column at all, 9 actors in four groups
    (controller, MAPnUg rm, kxZQHd actor_rollout+critic, qQLeW1 ref); the four kxZQHd ranks red, running
    update_actor for 46 s, 22× their median (and over 30 s); the idle ref and rm ranks without a task."""
    async def run(pilot):
        await _load(pilot, CPU.at)

    assert snap_compare(cpu_app(), terminal_size=size, run_before=run)
