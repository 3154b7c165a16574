"""Real renders of the live demo for screenshots/: starts `verltop demo`'s job, drives the TUI with Pilot.

    python -m scripts.screenshots [--out screenshots]     # from the repository root; starts a Ray cluster

Writes SVGs (Textual's own export) of: the running job, the step timeline (healthy, then with a rank that
finishes update_actor late), the job after the injected hang (stalled rows with
their reasons), the stack screen after `d` (suspects), a rank's full stack, an actor's details and the help
screen, at 160x30, and the hung job at 80x24 (a fresh SSH terminal); and PNGs of them when `rsvg-convert` is
installed (Debian: librsvg2-bin).

rsvg-convert drops the no-break spaces that start a <text> element, so each cell would be drawn one space
to the left of its column ("ALIVErun"): ``fix_svg`` moves such a text right by the width of those spaces
and removes them (and the trailing ones) before converting.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SIZE = (160, 30)
SMALL = (80, 24)
NBSP = "\u00a0"
_TEXT = re.compile(r'(<text\b[^>]*?\bx=")([\d.]+)("[^>]*?\btextLength=")([\d.]+)("[^>]*>)(.*?)(</text>)', re.S)


def fix_svg(svg: str) -> str:
    """Leading and trailing no-break spaces of each <text> become an offset and a shorter textLength."""

    def one(m: re.Match) -> str:
        x, length, body = float(m.group(2)), float(m.group(4)), m.group(6)
        text = html.unescape(body)
        if not text or "<" in body:
            return m.group(0)
        lead = len(text) - len(text.lstrip(NBSP))
        trail = len(text) - len(text.rstrip(NBSP))
        if lead == len(text):
            return ""  # only spaces: the background is its own <rect>
        if not (lead or trail):
            return m.group(0)
        cw = length / len(text)
        kept = text[lead : len(text) - trail]
        out = html.escape(kept, quote=False).replace(NBSP, "&#160;")
        return (f"{m.group(1)}{x + lead * cw:.1f}{m.group(3)}{len(kept) * cw:.1f}{m.group(5)}{out}{m.group(7)}")

    return _TEXT.sub(one, svg)


async def shoot(address: str, handle: Any, out: Path) -> list[Path]:
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
        for _ in range(300):  # idle colocated groups are named once their finished tasks are read
            await pilot.pause(0.1)
            if all(a.role != "other" for a in app.snapshot.actors):
                break
        await pilot.pause(2)
        save("main-running")
        await pilot.press("question_mark")
        await pilot.pause(0.3)
        save("help")
        await pilot.press("escape")
        await timeline_shots(pilot, app, handle, save)
        for _ in range(1800):  # a few steps first: the stall rules compare with the step's usual length
            if handle.progress().get("step", 0) >= 4:
                break
            await pilot.pause(0.1)
        handle.request_hang()
        for _ in range(1800):  # until the waiting ranks are marked stalled
            await pilot.pause(0.1)
            snap = app.snapshot
            if snap and sum(1 for a in snap.actors if a.stalled) >= 3:
                break
        else:
            raise RuntimeError(f"no stalled rows 3 min after the hang (progress {handle.progress()})")
        await pilot.pause(3)
        group = next(a.worker_group for a in app.snapshot.actors if a.stalled)
        first = next(i for i, k in enumerate(table.keys)
                     if any(a.actor_id == k and a.worker_group == group and a.rank == 0 for a in app.snapshot.actors))
        table.move_cursor(first)
        await pilot.pause(0.5)
        save("main-hung")
        await pilot.resize_terminal(*SMALL)
        await pilot.pause(1.0)
        save("main-hung-80x24")
        await pilot.resize_terminal(*SIZE)
        await pilot.pause(1.0)
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
    handle.request_hang("late")
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


def to_png(svg: Path, width: int) -> None:
    fixed = svg.with_suffix(".fixed.svg")
    fixed.write_text(fix_svg(svg.read_text()))
    try:
        subprocess.run(["rsvg-convert", "-w", str(width), str(fixed), "-o", str(svg.with_suffix(".png"))], check=True)
    finally:
        fixed.unlink()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "screenshots"))
    ap.add_argument("--png-only", action="store_true", help="only convert the SVGs already in --out")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.png_only:
        shots = sorted(out.glob("*.svg"))
    else:
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
            to_png(svg, 1400 if "80x24" not in svg.name else 960)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
