"""NCCL RAS: the state of every communicator as NCCL's RAS thread reports it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RasRank:
    """One rank of a communicator as NCCL's RAS reports it (answering, or missing)."""

    rank: int | None
    host: str | None
    pid: int | None
    cuda_dev: int | None
    counts: tuple[tuple[str, int], ...] = ()  # collective type → operations enqueued ("AllReduce", 6)
    missing: bool = False  # listed under missing ranks: its process did not answer
    unresponsive: bool | None = None
    considered_dead: bool | None = None
    abort: bool | None = None  # the communicator was aborted in this rank
    async_error: int | None = None

    def count(self, op: str) -> int | None:
        for k, v in self.counts:
            if k == op:
                return v
        return None


@dataclass(frozen=True, slots=True)
class RasComm:
    """One NCCL communicator: its ranks that answered and the ones that did not."""

    hash: str
    size: int | None
    ranks: tuple[RasRank, ...]
    missing: tuple[RasRank, ...] = ()


@dataclass(frozen=True, slots=True)
class RasReport:
    """One RAS status answer (all communicators of every NCCL process of the job that one RAS thread knows)."""

    nccl_version: str | None
    comms: tuple[RasComm, ...]
    missing_processes: tuple[tuple[int | None, str | None], ...] = ()  # (pid, host) of job processes not answering
    source: str = "json"  # "json" | "text"


@dataclass(frozen=True, slots=True)
class RasFinding:
    """One fact about one rank of one communicator."""

    kind: str  # "behind" | "mismatch" | "missing" | "aborted"
    comm: str  # communicator hash
    comm_size: int | None
    rank: int | None
    pid: int | None
    host: str | None
    op: str | None = None  # RAS's type name, e.g. "AllReduce"
    count: int | None = None  # operations of that type this rank enqueued
    peers_count: int | None = None  # the most its peers enqueued
    peers: tuple[int, ...] = ()  # ranks that are ahead (they wait in the collective)
    dead: bool | None = None
    peer_op: str | None = None  # "mismatch": what the others issued instead
