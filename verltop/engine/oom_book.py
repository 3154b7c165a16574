"""The OOM verdicts of a live engine: the calls the task history saw fail with an OOM and the ranks seen dead,
placed in the step timeline with their lead-up from the memory book (``analysis.oom``)."""

from __future__ import annotations

from dataclasses import replace

from verltop.analysis.history import TaskHistory
from verltop.analysis.oom import verdicts
from verltop.model import ActorRow, Step
from verltop.model.memory import MemoryView

MAX_DEAD = 4096  # ranks whose time of death is kept


class OomBook:
    """When each rank was first seen dead (a death's verdict keeps its time from one snapshot to the next)."""

    def __init__(self) -> None:
        self.died_at: dict[str, float] = {}

    def view(self, memory: MemoryView | None, actors: tuple[ActorRow, ...], hist: TaskHistory,
             steps: tuple[Step, ...], now: float) -> MemoryView | None:
        """``memory`` with its ``oom`` verdicts; a view of its own when there is no memory book but a verdict."""
        for a in actors:
            if a.state in ("DEAD", "RESTARTING"):
                self.died_at.setdefault(a.actor_id, now)
        if len(self.died_at) > MAX_DEAD:
            alive = {a.actor_id for a in actors}
            self.died_at = {k: v for k, v in self.died_at.items() if k in alive}
        found = verdicts(list(hist.ooms.values()), actors, steps, memory, now, died_at=self.died_at,
                         last_method=hist.last_method)
        if memory is None:
            if not found:
                return None
            return MemoryView(oom=found, note="no memory samples: the OOM verdict has no lead-up")
        return replace(memory, oom=found)
