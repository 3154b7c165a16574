"""Real renders of the live demo for screenshots/: starts `verltop demo`'s job, drives the TUI with Pilot.

    python scripts/screenshots.py [--out screenshots]

Writes SVGs (Textual's own export) of: the running job, the step timeline (healthy, then with a rank that
finishes update_actor late), the job after the injected hang (stalled rows),
the stack screen after `d`, a rank's full stack, an actor's details, and the help screen; and PNGs of them
when `rsvg-convert` is installed (Debian: librsvg2-bin).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZE = (170, 44)


async def shoot(address: str, handle, out: Path) -> list[Path]:
    from verltop.sources.config import resolve
    from verltop.ui.app import VerltopApp
    from verltop.ui.screens.stacks import StackScreen
    from verltop.ui.widgets.actor_table import ActorTable

    shots: list[Path] = []
    app = VerltopApp.live(resolve(address))

    def save(name: str) -> None:
        p = out / f"{name}.svg"
        p.write_text(app.export_screenshot(title=f"verltop — {name}"))
        shots.append(p)
        print(f"  {p}", flush=True)

    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(ActorTable)
        for _ in range(600):
            await pilot.pause(0.1)
            if table.row_count > 8 and app.snapshot and app.snapshot.phase:
                break
        await pilot.pause(6)
        save("main-running")
        await pilot.press("question_mark")
        await pilot.pause(0.3)
        save("help")
        await pilot.press("escape")
        await timeline_shots(pilot, app, handle, save)
        handle.request_hang()
        for _ in range(1200):  # until the waiting ranks are marked stalled
            await pilot.pause(0.1)
            snap = app.snapshot
            if snap and sum(1 for a in snap.actors if a.stalled) >= 3:
                break
        await pilot.pause(3)
        group = next(a.worker_group for a in app.snapshot.actors if a.stalled)
        first = next(i for i, k in enumerate(table.keys)
                     if any(a.actor_id == k and a.worker_group == group and a.rank == 0 for a in app.snapshot.actors))
        table.move_cursor(first)
        await pilot.pause(0.5)
        save("main-hung")
        await pilot.press("d")
        scr = app.screen
        assert isinstance(scr, StackScreen)
        for _ in range(300):
            await pilot.pause(0.1)
            if scr.report is not None:
                break
        await pilot.pause(0.5)
        save("stacks")
        await pilot.press("enter")  # the suspect is the first row
        await pilot.pause(0.5)
        save("rank-stack")
        await pilot.press("escape", "escape")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(2.5)
        save("details")
    return shots


async def timeline_shots(pilot, app, handle, save) -> None:
    """`t` on the healthy job (steps made exact from Ray's task events), then on a rank that finishes
    update_actor late (its peers done, the skew growing); the late rank is released before going on."""
    from verltop.ui.screens.timeline import TimelineScreen

    await pilot.press("t")
    screen = app.screen
    assert isinstance(screen, TimelineScreen)
    for _ in range(900):
        await pilot.pause(0.1)
        if sum(1 for s in screen.steps if s.exact and not s.running) >= 4:
            break
    save("timeline")
    step = handle.progress().get("step", 0)
    handle.request_hang(kind="late")
    for _ in range(900):
        await pilot.pause(0.1)
        if handle.hung():
            break
    await pilot.pause(40)  # past three median steps: the stuck step's short phases are read exactly too
    save("timeline-late-rank")
    handle.release_hang()
    for _ in range(900):
        await pilot.pause(0.1)
        if not handle.hung() and handle.progress().get("step", 0) > step + 1:
            break
    await pilot.press("escape")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "screenshots"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from verltop.demo.cluster import start_demo

    print("starting the demo cluster…", flush=True)
    t0 = time.time()
    h = start_demo(hang_after=None)
    print(f"demo up in {time.time() - t0:.0f} s at {h.address}", flush=True)
    try:
        if h.token:
            os.environ["RAY_AUTH_TOKEN"] = h.token
        shots = asyncio.run(shoot(h.address, h, out))
    finally:
        h.stop()
    if shutil.which("rsvg-convert"):
        for svg in shots:
            subprocess.run(["rsvg-convert", "-w", "1700", str(svg), "-o", str(svg.with_suffix(".png"))], check=False)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
