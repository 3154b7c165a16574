#!/usr/bin/env python3
"""Drive verltop's TUI headless (Textual's Pilot) against the live cluster and save its screens.

usage: device_tui_capture.py OUTDIR [WIDTH HEIGHT [TAG]]

Writes ``tui_main.{svg,txt}`` (main screen, rows filled), ``tui_stacks.{svg,txt}`` (``D``: every rank's stack,
once the dump finished) and ``tui_stacks_fr.{svg,txt}`` (after ``f``: a Flight Recorder dump through the
debug-info pipe), plus ``tui_meta.json`` with timings (``TAG`` in place of ``tui`` when given). Works where
no tmux is; the dashboard address and token come from the usual places (``RAY_DASHBOARD_ADDRESS``, ``~/.ray/auth_token``).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import time


def screen_text(app) -> str:
    """The current screen as plain text, as ``App.export_screenshot`` renders it."""
    from rich.console import Console

    w, h = app.size
    console = Console(width=w, height=h, file=io.StringIO(), force_terminal=True, color_system="truecolor",
                      record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text(styles=False)


def save(app, out: str, name: str) -> None:
    with open(os.path.join(out, f"{name}.svg"), "w") as f:
        f.write(app.export_screenshot(title=f"verltop {name}"))
    with open(os.path.join(out, f"{name}.txt"), "w") as f:
        f.write(screen_text(app))


async def main(out: str, size: tuple[int, int], tag: str = "tui") -> dict:
    from verltop.sources.config import resolve
    from verltop.ui.app import VerltopApp
    from verltop.ui.widgets.actor_table import ActorTable

    meta: dict = {"size": size}
    t0 = time.monotonic()
    from verltop.analysis.stalls import StallSettings

    stall = StallSettings(stall_after_s=float(os.environ.get("VT_TUI_STALL_AFTER", "300")))
    meta["stall_after_s"] = stall.stall_after_s
    app = VerltopApp.live(resolve(None), stall=stall, use_local=True)
    async with app.run_test(size=size) as pilot:
        table = app.screen.query_one(ActorTable)
        for _ in range(300):
            await pilot.pause(0.1)
            if table.row_count >= 4 and app.engine.snapshots_built >= 2:
                break
        await pilot.pause(3.0)  # a second local sample: CPU % needs an interval
        meta["main_rows"] = table.row_count
        meta["main_ready_s"] = round(time.monotonic() - t0, 2)
        save(app, out, f"{tag}_main")
        await pilot.press("D")
        t1 = time.monotonic()
        for _ in range(600):
            await pilot.pause(0.1)
            if type(app.screen).__name__ == "StackScreen" and getattr(app.screen, "report", None) is not None:
                break
        stacks = app.screen
        meta["stack_screen"] = type(stacks).__name__
        meta["dump_s"] = round(time.monotonic() - t1, 2)
        meta["first_rank_ms"] = getattr(stacks, "first_rank_ms", None)
        await pilot.pause(0.5)
        save(app, out, f"{tag}_stacks")
        rep = getattr(stacks, "report", None)
        if rep is not None:
            meta["suspects"] = [s.reason for s in rep.suspects]
            meta["ops"] = {r.actor.actor_name: (r.blocked_on.op if r.blocked_on else None) for r in rep.ranks}
            await pilot.press("f")
            t2 = time.monotonic()
            for _ in range(300):
                await pilot.pause(0.1)
                busy = any(w.group == "fr" and not w.is_finished for w in app.workers)
                if stacks.report is not rep or (not busy and time.monotonic() - t2 > 0.5):
                    break
            meta["fr_s"] = round(time.monotonic() - t2, 2)
            await pilot.pause(0.5)
            save(app, out, f"{tag}_stacks_fr")
            r2 = stacks.report
            meta["fr_collectives"] = {r.actor.actor_name: r.collective.to_json() for r in r2.ranks if r.collective}
            meta["fr_suspects"] = [s.reason for s in r2.suspects]
            meta["fr_notes"] = list(r2.notes)
        await pilot.press("escape")
        await pilot.pause(0.3)
        await pilot.press("q")
    return meta


if __name__ == "__main__":
    out = sys.argv[1]
    size = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (200, 40)
    tag = sys.argv[4] if len(sys.argv) > 4 else "tui"
    meta = asyncio.run(main(out, size, tag))
    with open(os.path.join(out, f"{tag}_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))
