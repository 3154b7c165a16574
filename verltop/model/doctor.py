"""``verltop doctor``: pre-flight checks, one column per node; what differs and what is wrong."""

from __future__ import annotations

from dataclasses import dataclass

from verltop.model.problems import Problem

CheckValue = str | int | float | bool | None  # None: could not be read on that node


@dataclass(frozen=True, slots=True)
class DoctorNode:
    """One node's column: each check's value by name, or why the node could not be checked (``error``)."""

    node_id: str
    ip: str | None
    hostname: str | None
    label: str  # the column's name and the key in mismatches: the IP (+ the node id's start where IPs repeat)
    is_head: bool = False
    checks: tuple[tuple[str, CheckValue], ...] = ()
    error: Problem | None = None

    def get(self, name: str) -> CheckValue:
        for k, v in self.checks:
            if k == name:
                return v
        return None


@dataclass(frozen=True, slots=True)
class Mismatch:
    """A check whose value is not the same on every node; ``deviants`` are the labels of the nodes that differ
    from the majority (all of them when no value has one)."""

    check: str
    values: tuple[tuple[str, CheckValue], ...]  # node label -> value, nodes that have one
    majority: CheckValue
    deviants: tuple[str, ...]
    problem: Problem  # the sentence and its fix


@dataclass(frozen=True, slots=True)
class Finding:
    """A problem on some nodes (a check over its limit, a node that did not answer), with its fix."""

    check: str | None
    nodes: tuple[str, ...]  # labels
    problem: Problem

    @property
    def text(self) -> str:
        return self.problem.text


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """``verltop doctor``: every node's checks, what differs between nodes, and what is wrong."""

    taken_at: float
    nodes: tuple[DoctorNode, ...]
    checks: tuple[str, ...]  # the rows, in display order
    mismatches: tuple[Mismatch, ...] = ()
    problems: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    path: str | None = None
    elapsed_s: float | None = None

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.problems
