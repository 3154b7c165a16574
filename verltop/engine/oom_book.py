"""The OOM verdicts of a live engine: the calls the task history saw fail with an OOM and the ranks seen dead
(their worker log read once, as a dump reads it), placed in the step timeline with their lead-up from the memory
book (``analysis.oom``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from verltop.analysis import roles as R
from verltop.analysis.deaths import classify
from verltop.analysis.history import TaskHistory
from verltop.analysis.oom import LEAD_UP_STEPS, gone_rows, oom_kind, verdicts
from verltop.model import ActorRow, RawActor, Step
from verltop.model.memory import MemoryView, OomVerdict, PhaseMemory

if TYPE_CHECKING:
    from verltop.model import Death

MAX_DEAD = 4096  # ranks whose time of death is kept


MAX_LOG_READS = 4  # dead ranks' log tails read per round


class OomBook:
    """When each rank was first seen dead (a death's verdict keeps its time from one snapshot to the next), and
    the death of each dead rank of a worker group as its worker log tells it (CUDA's OOM is written there, not
    in Ray's death cause)."""

    def __init__(self) -> None:
        self.died_at: dict[str, float] = {}
        self.deaths: dict[str, Death] = {}  # by actor id: classified with the worker log's tail
        self.read: set[str] = set()  # dead actors whose log was asked for

    def to_read(self, actors: list[RawActor]) -> list[RawActor]:
        """Dead ranks of worker groups whose log has not been read (a few per round); Ray's death cause alone
        does not say it was an OOM."""
        out = []
        for a in actors:
            if a.state != "DEAD" or a.actor_id in self.read or R.identity(a).worker_group is None:
                continue
            if oom_kind(a.death_text or a.death_cause) is not None:
                continue  # Ray's cause says it (its memory monitor): no log needed
            out.append(a)
            if len(out) >= MAX_LOG_READS:
                break
        self.read.update(a.actor_id for a in out)
        return out

    def note_death(self, a: RawActor, log: str | None) -> bool:
        """Classify ``a``'s death with its log tail; True when that is an OOM (news for the next snapshot)."""
        d = classify(a.death_text or a.death_cause, log)
        if d.kind in ("cuda_oom", "host_oom"):
            self.deaths[a.actor_id] = d
            return True
        return False

    def view(self, memory: MemoryView | None, actors: tuple[ActorRow, ...], hist: TaskHistory,
             steps: tuple[Step, ...], now: float,
             lead_up: Callable[[ActorRow, str], tuple[PhaseMemory, ...]] | None = None,
             gone: list[ActorRow] | None = None) -> MemoryView | None:
        """``memory`` with its ``oom`` verdicts; a view of its own when there is no memory book but a verdict.
        ``lead_up(row, phase)``: the rank's entries in that phase as the book has them now (the view may show
        fewer steps of a large job)."""
        gone = gone_rows(actors) if gone is None else gone
        for a in gone:
            self.died_at.setdefault(a.actor_id, now)
        if len(self.died_at) > MAX_DEAD:
            listed = {a.actor_id for a in actors}
            self.died_at = {k: v for k, v in self.died_at.items() if k in listed}
            self.deaths = {k: v for k, v in self.deaths.items() if k in listed}
            self.read &= listed
        found = verdicts(list(hist.ooms.values()), actors, steps, memory, now, deaths=self.deaths,
                         died_at=self.died_at, last_method=hist.last_method, gone=gone)
        if lead_up is not None and found:
            rows = {a.actor_id: a for a in actors}
            found = tuple(_from_book(v, rows.get(v.actor_id or ""), lead_up) for v in found)
        if memory is None:
            if not found:
                return None
            return MemoryView(oom=found, note="no memory samples: the OOM verdict has no lead-up")
        return replace(memory, oom=found)


def _from_book(v: OomVerdict, row: ActorRow | None, lead_up: Callable[[ActorRow, str], tuple[PhaseMemory, ...]]
               ) -> OomVerdict:
    if row is None or v.phase is None:
        return v
    mine = [p for p in lead_up(row, v.phase) if v.step is None or p.step <= v.step]
    return replace(v, lead_up=tuple(mine[-LEAD_UP_STEPS:])) if mine else v
