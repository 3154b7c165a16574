"""SVG snapshots of the memory screen (``m``) and the object-store screen (``o``) at 80x24 and a wide size, on
the hand-made memory view of tests/ui/test_memory_screen.py and the real Ray 2.60 object-store answers.
Update only after looking at the new picture (``pytest tests/snapshots --snapshot-update``)."""

from __future__ import annotations

import pytest

from tests.snapshots.test_more_screens import settle
from tests.ui.test_memory_screen import WithObjects, memory_snapshot
from verltop.ui.app import VerltopApp


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
def test_memory_screen(snap_compare, size):
    """The OOM verdict in red, rank 1's update_actor growth in yellow (its row too), the low headroom with its
    steps left, the engine's hold, verl's lifetime peaks; the table per rank and phase (rank 3's update_actor
    has N=1 in yellow) with the last steps' trend."""

    async def run(pilot):
        await settle(pilot, lambda: pilot.app.snapshot is not None, "the snapshot shown")
        await pilot.press("m")
        await settle(pilot, lambda: pilot.app.screen.__class__.__name__ == "MemoryScreen", "the memory screen")
        await pilot.pause()

    assert snap_compare(VerltopApp(WithObjects(memory_snapshot())), terminal_size=size, run_before=run)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_object_store_screen(snap_compare, size):
    """The store per node, the three holders largest first (rank 1 of actor_rollout, holder_1, the driver) and
    the note that call sites are not recorded."""

    async def run(pilot):
        from verltop.ui.widgets.object_groups import ObjectGroups

        await settle(pilot, lambda: pilot.app.snapshot is not None, "the snapshot shown")
        await pilot.press("o")
        await settle(pilot, lambda: bool(pilot.app.screen.query(ObjectGroups))
                     and pilot.app.screen.query_one(ObjectGroups).row_count == 3, "the groups")
        await pilot.pause()

    assert snap_compare(VerltopApp(WithObjects(memory_snapshot())), terminal_size=size, run_before=run)
