"""The memory screen (``m``) and the object-store screen (``o``): state after each key, on a hand-made memory
view (four ranks of actor_rollout over eight steps; rank 1 keeps +150 MiB of host memory in update_actor every
step while its peers stay flat; rank 3's update_actor got too few samples; a colocated engine holds GPU memory
while the trainer runs; rank 2 ran out of GPU memory) and on the real Ray 2.60 object-store answers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.sources.test_ray_objects import actors, doc
from tests.ui.test_process_rows import OneSnapshot
from tests.wait import wait_until_async
from verltop.analysis.object_store import object_store_report
from verltop.model import (
    EngineHold,
    Headroom,
    MemoryGrowth,
    MemoryView,
    ObjectStoreReport,
    OomVerdict,
    PhaseMemory,
    Snapshot,
)
from verltop.sources import object_store as O
from verltop.ui.app import VerltopApp

MIB, GIB = 1 << 20, 1 << 30
PHASES = (("gen", 3), ("old_log_prob", 2), ("update_actor", 2), ("weight_sync", 1))
NOW = 1764921600.0


def memory_view() -> MemoryView:
    rows = []
    for step in range(3, 11):
        for rank in range(4):
            for phase, n in PHASES:
                base = (2 + rank * 0.1) * GIB
                leak = 150 * MIB * (step - 3) if rank == 1 else 0
                if phase == "update_actor":
                    leak += 150 * MIB if rank == 1 else 0
                samples = 1 if (rank == 3 and phase == "update_actor") else n * 3
                gpu = int((30 + (8 if phase == "update_actor" else 0)) * GIB)
                rows.append(PhaseMemory("wgA", "actor_rollout", rank, f"wgAWorkerDict_0:{rank}", f"a{rank}", step, phase,
                                        gpu, int(base + leak), samples, gpu, gpu, int(base + leak - 150 * MIB if
                                        phase == "update_actor" and rank == 1 else base + leak), int(base + leak)))
    g = MemoryGrowth("wgA", "actor_rollout", 1, "wgAWorkerDict_0:1", "a1", "update_actor", "host", 150 * MIB, 7,
                     0.0)
    heads = tuple(Headroom("wgA", "actor_rollout", r, f"wgAWorkerDict_0:{r}", f"a{r}", "host",
                           int((2 + r * 0.1) * GIB + (1200 * MIB if r == 1 else 0)), int(21.7 * GIB),
                           "ray_memory_threshold", 9.0 if r == 1 else None) for r in range(4))
    heads += (Headroom("wgA", "actor_rollout", 2, "wgAWorkerDict_0:2", "a2", "gpu", int(78 * GIB), int(79 * GIB),
                       "gpu_total", None),)
    hold = EngineHold("vllm_server_0_0", "s0", "update_actor", 12 * GIB, sleep_state=1.0, kv_cache_usage=0.0)
    oom = OomVerdict("wgA", "actor_rollout", 2, "wgAWorkerDict_0:2", "a2", 4242, "gpu", "task_error", NOW - 5, 10,
                     "update_actor", "actor_rollout_update_actor",
                     "CUDA out of memory. Tried to allocate 2.00 GiB")
    return MemoryView(by_phase=tuple(rows), growth=(g,), headroom=heads, engine_holds=(hold,), oom=(oom,),
                      verl_peaks=(("actor/perf/max_memory_allocated_gb", 41.23),
                                  ("actor/perf/max_memory_reserved_gb", 44.5),
                                  ("perf/cpu_memory_used_gb", 180.2)))


def memory_snapshot() -> Snapshot:
    from tests.snapshots.test_more_screens import tree_snapshot

    return replace(tree_snapshot(), memory=memory_view(), taken_at=NOW)


def store_report() -> ObjectStoreReport:
    refs, held, _, recorded, warnings = O.objects(doc("off_objects_detail.json"))
    return object_store_report(NOW, refs, held, recorded, actors("off"),
                               O.store_nodes(doc("off_nodes_view_summary.json")), 10000, warnings, elapsed_s=0.4)


class WithObjects(OneSnapshot):
    """One snapshot, and the object store as the real captures answered (counted)."""

    def __init__(self, snap: Snapshot, report: ObjectStoreReport | None = None) -> None:
        super().__init__(snap)
        self.report = report or store_report()
        self.object_reads = 0

    async def object_store(self, limit: int = 10000, timeout_s: float = 30.0) -> ObjectStoreReport:
        self.object_reads += 1
        return self.report


async def _open(pilot, key: str, name: str) -> None:
    await wait_until_async(lambda: pilot.app.snapshot is not None, 10, "the snapshot shown", step=0.05)
    await pilot.press(key)
    await wait_until_async(lambda: pilot.app.screen.__class__.__name__ == name, 10, name, step=0.05)
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_memory_screen_rows_and_findings(size):
    from verltop.ui.widgets.memory_findings import MemoryFindings
    from verltop.ui.widgets.memory_table import MemoryTable

    app = VerltopApp(WithObjects(memory_snapshot()))
    async with app.run_test(size=size) as pilot:
        await _open(pilot, "m", "MemoryScreen")
        t = pilot.app.screen.query_one(MemoryTable)
        assert t.row_count == 16  # 4 ranks × 4 phases, the last step each
        keys = [r.key.value for r in t.ordered_rows]
        assert keys[:4] == ["a0|gen", "a0|old_log_prob", "a0|update_actor", "a0|weight_sync"]
        assert t.get_cell("a3|update_actor", "samples").plain == "1"
        assert t.get_cell("a1|update_actor", "rss").plain == "3.3G"
        flat = " ".join(pilot.app.screen.query_one(MemoryFindings)._shown.plain.split())
        assert "OOM: rank 2 of wgA (pid 4242) ran out of GPU memory in update_actor at step 10" in flat
        assert "GROWS rank 1 of wgA: +150 MiB host per step in update_actor over 7 steps; peers flat" in flat
        assert "LOW rank 1 of wgA: host peak 3.3 GiB of 21.7 GiB" in flat and "full in 9 steps at its growth" in flat
        assert "vllm_server_0_0 holds 12.0 GiB of GPU memory during update_actor (asleep; KV cache 0%)" in flat
        assert "actor/perf/max_memory_allocated_gb 41.23 GB — lifetime peak, max over ranks" in flat
        # the cursor stays on its row while a new snapshot updates the cells in place
        await pilot.press("j", "j")
        before = t.cursor_row
        pilot.app.screen.show_snapshot(replace(memory_snapshot(), taken_at=NOW + 2))
        await pilot.pause()
        assert t.cursor_row == before and t.row_count == 16
        await pilot.press("escape")
        assert pilot.app.screen.__class__.__name__ == "MainScreen"


def test_main_screen_marks_low_headroom_and_growth():
    from verltop.text.memory_rows import memory_marks

    marks = memory_marks(memory_view())
    assert marks == {"a1": "host full in 9 steps", "a2": "GPU 1% free"}
    v = replace(memory_view(), headroom=())
    assert memory_marks(v) == {"a1": "host +150 MiB/step update_actor"}
    assert memory_marks(None) == {}


async def test_memory_screen_without_history_says_why():
    from tests.snapshots.test_more_screens import tree_snapshot
    from verltop.ui.widgets.memory_findings import NO_MEMORY, MemoryFindings

    app = VerltopApp(WithObjects(tree_snapshot()))
    async with app.run_test(size=(80, 24)) as pilot:
        await _open(pilot, "m", "MemoryScreen")
        assert " ".join(pilot.app.screen.query_one(MemoryFindings)._shown.plain.split()) == NO_MEMORY


async def test_object_store_read_on_demand_only():
    from verltop.ui.widgets.object_groups import ObjectGroups

    eng = WithObjects(memory_snapshot())
    app = VerltopApp(eng)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until_async(lambda: pilot.app.snapshot is not None, 10, "the snapshot shown", step=0.05)
        assert eng.object_reads == 0  # never on a poll
        await pilot.press("m", "o")
        await wait_until_async(lambda: eng.object_reads == 1 and pilot.app.screen.query(ObjectGroups)
                               and pilot.app.screen.query_one(ObjectGroups).row_count == 3, 10, "the groups",
                               step=0.05)
        t = pilot.app.screen.query_one(ObjectGroups)
        first = t.get_row_at(0)
        assert first[3].plain.startswith("actor_rol") and first[0].plain == "12.0M"
        await pilot.press("j")
        await pilot.press("r")
        await wait_until_async(lambda: eng.object_reads == 2, 10, "the second read", step=0.05)
        await pilot.pause()
        assert t.cursor_row == 1 and t.row_count == 3
        await pilot.press("escape")
        assert pilot.app.screen.__class__.__name__ == "MemoryScreen"


class Phases(WithObjects):
    """A live engine that publishes the memory by phase only while a view asks for it, as the Monitor does."""

    def __init__(self, snap: Snapshot) -> None:
        super().__init__(snap)
        self.asked_phases: list[bool] = []
        self.full = snap

    def show_memory_phases(self, on: bool) -> None:
        self.asked_phases.append(on)
        m = self.full.memory
        self.snap = replace(self.full, memory=m if on else replace(m, by_phase=(), by_phase_skipped=True))
        if self.latest is not None:
            self._publish(self.snap)


async def test_the_memory_by_phase_is_worked_out_while_its_screen_is_open():
    from verltop.ui.widgets.memory_table import MemoryTable

    eng = Phases(memory_snapshot())
    app = VerltopApp(eng)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until_async(lambda: eng.asked_phases, 10, "the main screen's word on phases", step=0.05)
        assert eng.asked_phases == [False]  # the main screen shows none
        await wait_until_async(lambda: pilot.app.snapshot is not None and pilot.app.snapshot.memory.by_phase_skipped,
                               10, "a snapshot without phases shown", step=0.05)
        await _open(pilot, "m", "MemoryScreen")
        assert eng.asked_phases == [False, True]
        t = pilot.app.screen.query_one(MemoryTable)
        await wait_until_async(lambda: t.row_count == 16, 10, "the phases' rows", step=0.05)
        await pilot.press("escape")
        await wait_until_async(lambda: eng.asked_phases[-1] is False, 10, "phases off again", step=0.05)
    # a recording of the session keeps every snapshot's phases: the app asks for them throughout
    eng = Phases(memory_snapshot())
    async with VerltopApp(eng, memory_phases=True).run_test(size=(80, 24)) as pilot:
        await _open(pilot, "m", "MemoryScreen")
        await pilot.press("escape")
        await wait_until_async(lambda: len(eng.asked_phases) == 3, 10, "three words on phases", step=0.05)
    assert eng.asked_phases == [True, True, True]


async def test_the_memory_screen_says_the_phases_are_being_worked_out():
    snap = memory_snapshot()
    skipped = replace(snap, memory=replace(snap.memory, by_phase=(), by_phase_skipped=True))
    app = VerltopApp(WithObjects(skipped))
    async with app.run_test(size=(200, 50)) as pilot:
        await _open(pilot, "m", "MemoryScreen")
        assert "working out each phase's memory" in pilot.app.screen.header(True).plain
