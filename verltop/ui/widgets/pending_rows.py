"""The "pending" group at the top of the actor table: what Ray has not placed yet, one line each, with why.

Placement groups and tasks get a line here; pending actors stay in their worker group (state PEND, the
reason in STALLED) and are only counted on the group's header, so a 64-rank group waiting for its
placement group is one line, not 65.
"""

from __future__ import annotations

import re

from rich.text import Text

from verltop.model import PendingItem, Snapshot
from verltop.text.cells import age, duration, plural
from verltop.text.pending import amount, demand, pending_reason
from verltop.ui.render import hanging

KEY_PREFIX = "pend:"
GROUP_KEY = "grp:pending"
_KIND = {"placement_group": "placement group", "task": "task", "actor": "actor"}
_SHORT = {"placement_group": "PG", "task": "task", "actor": "actor"}
_STATE_STYLE = {"INFEASIBLE": "bold red", "NO_RESOURCES": "dark_orange"}


def key_of(p: PendingItem) -> str:
    return f"{KEY_PREFIX}{p.kind}:{p.id}"


def listed(snap: Snapshot) -> list[PendingItem]:
    """The items that get a line of their own: placement groups and tasks."""
    return [p for p in snap.pending if p.kind != "actor"]


def matches(p: PendingItem, rx: re.Pattern[str] | None, invert: bool) -> bool:
    if rx is None:
        return True
    hay = " ".join(x for x in (p.kind, p.name, p.worker_group, p.state, p.scheduling_state, pending_reason(p)) if x)
    return (rx.search(hay) is not None) != invert


def header(snap: Snapshot) -> Text:
    """``▼ pending  1 placement group  2 tasks  4 actors wait``."""
    counts = {k: sum(1 for p in snap.pending if p.kind == k) for k in ("placement_group", "task", "actor")}
    t = Text("▼ ", style="grey50")
    t.append("pending", style="bold dark_orange")
    for k, word in (("placement_group", "placement group"), ("task", "task")):
        if counts[k]:
            t.append(f"  {plural(counts[k], word)}", style="grey70")
    if counts["actor"]:
        t.append(f"  {plural(counts['actor'], 'actor')} waiting", style="grey70")
    blocked = sum(1 for p in snap.pending if p.scheduling_state == "INFEASIBLE" or
                  (p.capacity is not None and p.capacity.verdict == "infeasible"))
    if blocked:
        t.append(f"  {blocked} infeasible", style="bold red")
    return t


def line(p: PendingItem, now: float | None) -> Text:
    """``  PG   Wb5vE3verl_group_2:0  INFEASIBLE  1m05s  2 bundles × {CPU: 10} STRICT_PACK: no node has…``:
    the reason last, so a narrow terminal cuts only its end (the line under the table has all of it)."""
    t = Text("  ")
    t.append(f"{_SHORT.get(p.kind, p.kind):<5}", style="dark_orange")
    name = p.name or p.id[:16]
    t.append(name, style="bold")
    if p.worker_group and not name.startswith(p.worker_group):  # verl PG names start with their pool's prefix
        t.append(f"  [{p.worker_group}]", style="cyan")
    state = p.scheduling_state or (p.state if p.kind != "task" else None)  # a task's state says "pending"
    if state:
        t.append(f"  {state}", style=_STATE_STYLE.get(state, "grey70"))
    waited = p.waited_s(now) if now is not None else p.waiting_s
    t.append(f"  {age(waited)}", style="grey70")
    t.append(f"  {pending_reason(p)}", style="red" if p.capacity is not None and p.capacity.verdict == "infeasible" else "")
    return t


def sig(p: PendingItem, now: float | None) -> tuple:
    waited = p.waited_s(now) if now is not None else p.waiting_s
    return (p.name, p.worker_group, p.state, p.scheduling_state, p.strategy, p.capacity, p.demand,
            None if waited is None else int(waited))


def details_text(p: PendingItem, now: float | None = None, width: int = 160) -> Text:
    """Enter on a pending line: every fact of it; why it waits wrapped under itself to ``width``."""
    t = Text()

    def row(k: str, v: object, style: str = "") -> None:
        t.append(f"{k:<18}", style="bold")
        t.append(f"{v if v not in (None, '') else '-'}\n", style=style)

    row("kind", _KIND.get(p.kind, p.kind))
    row("name", p.name)
    row("id", p.id)
    row("worker group", p.worker_group)
    row("state", p.state, "dark_orange")
    row("Ray scheduling", p.scheduling_state, _STATE_STYLE.get(p.scheduling_state or "", ""))
    row("demand", demand(p.demand, p.kind) if p.demand else None)
    row("strategy", p.strategy)
    row("waiting", duration(p.waited_s(now) if now is not None else p.waiting_s))
    c = p.capacity
    if c is not None and c.resource is not None:
        row("closest node", f"{c.node_ip or '?'}: {amount(c.resource, c.node_total)} {c.resource} in all, "
                            f"{amount(c.resource, c.node_free)} free" if c.node_total is not None else None)
        row("nodes compared", c.nodes)
    t.append("\nwhy\n", style="bold")
    t.append(f"  {hanging(pending_reason(p), width, 2)}\n", style="red" if c is not None and c.verdict == "infeasible" else "")
    return t
