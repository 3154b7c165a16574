"""Finished tasks: the one-off seed of the task history, and the roles of idle colocated groups."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace

from verltop.analysis import roles as R
from verltop.analysis.snapshot_build import failed_task_rows, group_key
from verltop.engine.polling import PollState
from verltop.model import RawActor
from verltop.sources import dashboard as D
from verltop.sources.watchdog import TAIL_LINES

log = logging.getLogger("verltop.engine")


class HistoryPolls(PollState):
    """Finished tasks: the history's seed and the roles of colocated groups."""

    async def seed_roles(self, actor_ids: Sequence[str] = ()) -> None:
        """Method names of finished tasks (no times): which roles idle colocated workers host. With
        ``actor_ids`` (the actor ids of one worker group, rank 0 first), one read filtered in GCS by its first
        actor, whose methods the whole group runs; else every actor's finished tasks (a slower read)."""
        r = await D.fetch_finished_tasks(self.client, timeout_s=self.iv.timeout_s, detail=False,
                                         actor_id=actor_ids[0] if actor_ids else None)
        if not r.ok or not r.value:
            return
        await self._hist_ready()
        for t in r.value:
            method = R.method_of(t.func_name) or t.name
            if not t.actor_id or method == "__init__":
                continue
            for aid in actor_ids or (t.actor_id,):
                self.hist.remember_method(aid, method)

    async def _poll_roles(self) -> None:
        """Which roles a colocated group hosts is learnt from the methods its ranks run; a short method (an RM
        scoring a batch in a second) can start and finish between two polls and never be seen running. For
        groups whose methods are still unknown, ask Ray for one rank's finished tasks (a GCS-side filter: a
        small read), a few groups per cycle."""
        by_group: dict[str, list[RawActor]] = {}
        for a in self.src.actors.value or []:
            ident = R.identity(a)
            if a.state == "ALIVE" and ident.base_role == "colocated":
                by_group.setdefault(group_key(ident, a.class_name), []).append(a)
        unknown = [ms[0] for ms in by_group.values() if not any(self.hist.methods_by_actor.get(m.actor_id) for m in ms)]
        for a in unknown[:4]:
            r = await D.fetch_finished_tasks(self.client, limit=200, timeout_s=self.iv.timeout_s, detail=False,
                                             actor_id=a.actor_id)
            methods = [R.method_of(t.func_name) or t.name for t in (r.value or []) if r.ok]
            methods = [m for m in methods if m != "__init__"]
            if methods:
                await self._hist_ready()
                for m in methods:
                    self.hist.remember_method(a.actor_id, m)
                self._dirty.set()

    async def _seed_with_retries(self, tries: int = 3, pause_s: float = 20.0) -> None:
        """The seed, again if the dashboard did not answer it (it is the one read of finished tasks that
        names every method the job runs: stall medians and the step timeline start from it)."""
        for i in range(tries):
            await self._guarded(self._seed_history, self.src.tasks)
            if self.seeded:
                return
            if i + 1 < tries:
                await asyncio.sleep(pause_s)

    async def _actors_listed(self, tries: int = 50) -> None:
        """Wait (``tries`` × 20 ms at most) for the actor list: finished and failed calls are keyed by worker
        group."""
        for _ in range(tries):
            if self.src.actors.value is not None or self.src.actors.error:
                break
            await asyncio.sleep(0.02)

    async def read_failures(self, name: str | None = None) -> list[str]:
        """FAILED calls (of task ``name``) into the history: peers whose collective timed out waiting for a
        straggler. The task ids of those not seen before."""
        r = await D.fetch_failed_tasks(self.client, timeout_s=self.iv.timeout_s, name=name)
        if not r.ok or not r.value:
            return []
        await self._actors_listed(int(self.iv.timeout_s / 0.02))  # without them the failures say nothing
        await self._hist_ready()
        new = self.hist.note_failed(failed_task_rows(r.value, self._actor_map()))
        if new:
            self._dirty.set()
        return new

    async def _poll_deaths(self) -> None:
        """Dead ranks' worker logs, read once each (a few per round): an OOM written there becomes a verdict."""
        dead = self.oom_book.to_read(self.src.actors.value or [])
        if not dead:
            return
        rs = await asyncio.gather(*(D.fetch_log_tail(self.client, a.actor_id, "err", TAIL_LINES, 5.0) for a in dead))
        if any(self.oom_book.note_death(a, r.value if r.ok else None) for a, r in zip(dead, rs, strict=True)):
            self._dirty.set()

    async def _seed_history(self) -> None:
        failures = asyncio.create_task(self.read_failures())
        try:
            await self._seed_finished()
        finally:
            await failures

    async def _seed_finished(self) -> None:
        r = await D.fetch_finished_runs(self.client, limit=2000, timeout_s=15.0)
        if not r.ok or not r.value or not r.value[0]:
            return
        seed, total = r.value
        r = replace(r, value=seed)
        await self._actors_listed()
        actors = self._actor_map()  # shared: read only
        rows = []
        for t in r.value:
            if not (t.start_time_ms and t.end_time_ms and t.actor_id in actors):
                continue
            a = actors[t.actor_id]
            method = R.method_of(t.func_name) or t.name
            if method == "__init__":
                continue
            rows.append((t.task_id, t.actor_id, group_key(R.identity(a), a.class_name), method,
                         t.start_time_ms / 1000, t.end_time_ms / 1000))
        await self._hist_ready()
        self.hist.seed(rows)
        self.timeline.add_finished(r.value, actors)
        self.timeline.tracker.estimate_rows((t.name for t in r.value), total)
        if total is not None and total <= len(seed):  # the whole history: no call of its methods is unseen
            self.timeline.tracker.new_names.clear()
        self.work.note(r.value, actors)
        self.seeded = True
        self._dirty.set()
