"""Ray's object store, read on demand (``verltop memory``, the TUI's ``o``): what ``ray memory --stats-only``
and ``ray memory`` show — each node's store (used, spilled, restored) and the object references every
worker holds, grouped by holder (actor, rank) and call site, largest first. Bytes throughout; unknown None."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoreNode:
    """One node's object store from its raylet's stats (``/nodes?view=summary``: ``raylet.storeStats``,
    refreshed every 15 s). ``spilled_*``/``restored_*`` are cumulative since the raylet started."""

    node_id: str
    ip: str | None
    hostname: str | None
    used_bytes: int | None
    total_bytes: int | None
    spilled_bytes: int | None
    restored_bytes: int | None
    spilled_objects: int | None = None
    restored_objects: int | None = None
    primary_copy_bytes: int | None = None  # objects whose primary copy lives here (not fetched copies)
    fallback_bytes: int | None = None  # allocated on disk when the shared memory was full
    local_objects: int | None = None


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """One row of ``/api/v0/objects?detail=1``: a reference to ``object_id`` that the worker ``pid`` on
    ``ip`` holds (its owner, or a borrower). ``size_bytes`` None when Ray does not know it (-1)."""

    object_id: str
    size_bytes: int | None
    reference_type: str | None  # LOCAL_REFERENCE, PINNED_IN_MEMORY, USED_BY_PENDING_TASK, …
    call_site: str | None  # None when not recorded ("disabled")
    task_status: str | None
    pid: int | None
    ip: str | None
    worker_type: str | None  # WORKER | DRIVER | SPILL_WORKER | RESTORE_WORKER


@dataclass(frozen=True, slots=True)
class ObjectGroup:
    """The references one process holds from one call site: who (the actor and its rank, a driver, a task
    worker: no actor), how many, and their bytes (each object counted once)."""

    worker_group: str | None
    role: str | None
    rank: int | None
    actor_name: str | None
    actor_id: str | None
    class_name: str | None
    pid: int | None
    ip: str | None
    worker_type: str | None
    call_site: str | None
    refs: int
    objects: int
    bytes: int
    unknown_size: int = 0  # references whose size Ray does not know
    reference_types: tuple[tuple[str, int], ...] = ()  # (type, count), most first


@dataclass(frozen=True, slots=True)
class ObjectStoreReport:
    """One on-demand read. ``total_refs``: references Ray counted over every raylet; ``returned_refs``:
    those that came back (the ``limit``); ``truncated``: a line saying what is missing when they differ.
    ``call_sites_recorded`` False: Ray warned that call sites are not recorded."""

    taken_at: float
    nodes: tuple[StoreNode, ...] = ()
    groups: tuple[ObjectGroup, ...] = ()
    total_refs: int | None = None
    returned_refs: int = 0
    objects: int = 0
    bytes: int = 0
    limit: int = 0
    truncated: str | None = None
    call_sites_recorded: bool | None = None
    warnings: tuple[str, ...] = ()  # Ray's own (a raylet that did not answer)
    problem: str | None = None  # why the objects could not be read (the store stats may still be there)
    elapsed_s: float | None = None
