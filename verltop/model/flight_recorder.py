"""One rank's NCCL Flight Recorder dump, parsed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class FrEntry:
    """One collective of one rank's Flight Recorder dump."""

    pg: str
    seq: int
    op: str | None
    profiling_name: str | None
    input_sizes: Any
    state: str | None


@dataclass(frozen=True, slots=True)
class FrRank:
    """One rank's Flight Recorder state for one process group."""

    rank: int
    last_enqueued: int | None
    last_completed: int | None
    entries: tuple[FrEntry, ...]
