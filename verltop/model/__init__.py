"""Plain, frozen dataclasses that every layer passes around, one module per domain.

Units are in the names (`_bytes`, `_s`, `_percent`, `_ms`); unknown is ``None``. Raw rows come from the
sources (``Raw*``); the analysis layer turns them into ``ActorRow`` and ``Snapshot``. The model holds data
only: the JSON contracts are made from it in ``verltop.text.contract``, its sentences in ``verltop.text``.
Every name is re-exported here, so ``from verltop.model import X`` works for all of them; each domain's module is
imported on the first use of one of its names: half of a one-shot command's import was Python building
dataclasses (~0.5 ms each) that it never used (a snapshot needs no stacks, doctor or object-store types).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verltop.model.doctor import CheckValue, DoctorNode, DoctorReport, Finding, Mismatch
    from verltop.model.flight_recorder import FrEntry, FrRank
    from verltop.model.memory import (
        LIMIT_SOURCES,
        MEMORY_KINDS,
        OOM_HOWS,
        EngineHold,
        Headroom,
        MemoryGrowth,
        MemoryView,
        OomVerdict,
        PhaseMemory,
    )
    from verltop.model.object_store import ObjectGroup, ObjectRef, ObjectStoreReport, StoreNode
    from verltop.model.pending import (
        Capacity,
        ClusterLoad,
        NodeLoad,
        PendingItem,
        RawPendingTask,
        RawPlacementGroup,
    )
    from verltop.model.problems import Problem
    from verltop.model.ras import RasComm, RasFinding, RasRank, RasReport
    from verltop.model.raw import (
        Gpu,
        Node,
        ProcStat,
        ProcTree,
        RawActor,
        RawJob,
        RawObjectRef,
        RawTask,
        Resources,
    )
    from verltop.model.rollout import RolloutLoad
    from verltop.model.rows import ActorRow, ProcRow, SourceStatus, Stall
    from verltop.model.snapshot import Snapshot
    from verltop.model.stacks import (
        BlockedOn,
        Chain,
        ChainEnd,
        ChainLink,
        ChildProc,
        CollectiveInfo,
        Death,
        DumpReport,
        EndWhy,
        Fate,
        Frame,
        Peers,
        ProcessDump,
        RankDump,
        StackGroup,
        Suspect,
        SuspectWhy,
        ThreadStack,
        Where,
    )
    from verltop.model.steps import PHASES, GroupWork, PhaseRun, Step
    from verltop.model.training import ANOMALY_KINDS, Anomaly, SlowRank, TrainingView

# name -> the module of verltop.model that defines it
_WHERE: dict[str, str] = {
    "ANOMALY_KINDS": "training",
    "ActorRow": "rows",
    "Anomaly": "training",
    "BlockedOn": "stacks",
    "Capacity": "pending",
    "Chain": "stacks",
    "ChainEnd": "stacks",
    "ChainLink": "stacks",
    "CheckValue": "doctor",
    "ChildProc": "stacks",
    "ClusterLoad": "pending",
    "CollectiveInfo": "stacks",
    "Death": "stacks",
    "DoctorNode": "doctor",
    "DoctorReport": "doctor",
    "DumpReport": "stacks",
    "EndWhy": "stacks",
    "EngineHold": "memory",
    "Fate": "stacks",
    "Finding": "doctor",
    "FrEntry": "flight_recorder",
    "FrRank": "flight_recorder",
    "Frame": "stacks",
    "Gpu": "raw",
    "GroupWork": "steps",
    "Headroom": "memory",
    "LIMIT_SOURCES": "memory",
    "MEMORY_KINDS": "memory",
    "MemoryGrowth": "memory",
    "MemoryView": "memory",
    "Mismatch": "doctor",
    "Node": "raw",
    "NodeLoad": "pending",
    "OOM_HOWS": "memory",
    "ObjectGroup": "object_store",
    "ObjectRef": "object_store",
    "ObjectStoreReport": "object_store",
    "OomVerdict": "memory",
    "PHASES": "steps",
    "Peers": "stacks",
    "PendingItem": "pending",
    "PhaseMemory": "memory",
    "PhaseRun": "steps",
    "Problem": "problems",
    "ProcRow": "rows",
    "ProcStat": "raw",
    "ProcTree": "raw",
    "ProcessDump": "stacks",
    "RankDump": "stacks",
    "RasComm": "ras",
    "RasFinding": "ras",
    "RasRank": "ras",
    "RasReport": "ras",
    "RawActor": "raw",
    "RawJob": "raw",
    "RawObjectRef": "raw",
    "RawPendingTask": "pending",
    "RawPlacementGroup": "pending",
    "RawTask": "raw",
    "Resources": "raw",
    "RolloutLoad": "rollout",
    "SlowRank": "training",
    "Snapshot": "snapshot",
    "SourceStatus": "rows",
    "StackGroup": "stacks",
    "Stall": "rows",
    "Step": "steps",
    "StoreNode": "object_store",
    "Suspect": "stacks",
    "SuspectWhy": "stacks",
    "ThreadStack": "stacks",
    "TrainingView": "training",
    "Where": "stacks",
}



def __getattr__(name: str) -> object:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ANOMALY_KINDS",
    "LIMIT_SOURCES",
    "MEMORY_KINDS",
    "OOM_HOWS",
    "PHASES",
    "ActorRow",
    "Anomaly",
    "BlockedOn",
    "Capacity",
    "Chain",
    "ChainEnd",
    "ChainLink",
    "CheckValue",
    "ChildProc",
    "ClusterLoad",
    "CollectiveInfo",
    "Death",
    "DoctorNode",
    "DoctorReport",
    "DumpReport",
    "EndWhy",
    "EngineHold",
    "Fate",
    "Finding",
    "FrEntry",
    "FrRank",
    "Frame",
    "Gpu",
    "GroupWork",
    "Headroom",
    "MemoryGrowth",
    "MemoryView",
    "Mismatch",
    "Node",
    "NodeLoad",
    "ObjectGroup",
    "ObjectRef",
    "ObjectStoreReport",
    "OomVerdict",
    "Peers",
    "PendingItem",
    "PhaseMemory",
    "PhaseRun",
    "Problem",
    "ProcRow",
    "ProcStat",
    "ProcTree",
    "ProcessDump",
    "RankDump",
    "RasComm",
    "RasFinding",
    "RasRank",
    "RasReport",
    "RawActor",
    "RawJob",
    "RawObjectRef",
    "RawPendingTask",
    "RawPlacementGroup",
    "RawTask",
    "Resources",
    "RolloutLoad",
    "SlowRank",
    "Snapshot",
    "SourceStatus",
    "StackGroup",
    "Stall",
    "Step",
    "StoreNode",
    "Suspect",
    "SuspectWhy",
    "ThreadStack",
    "TrainingView",
    "Where",
]
