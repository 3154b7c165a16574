"""Plain, frozen dataclasses that every layer passes around, one module per domain.

Units are in the names (`_bytes`, `_s`, `_percent`, `_ms`); unknown is ``None``. Raw rows come from the
sources (``Raw*``); the analysis layer turns them into ``ActorRow`` and ``Snapshot``. The model holds data
only: the JSON contracts are made from it in ``verltop.text.contract``, its sentences in ``verltop.text``.
Every name is re-exported here, so ``from verltop.model import X`` works for all of them.
"""

from __future__ import annotations

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
    "Suspect",
    "SuspectWhy",
    "ThreadStack",
    "TrainingView",
    "Where",
]
