"""The actor table's row model: actors grouped, sorted and filtered into the rows to show, with the pending
work first, each actor's open process tree under it, and the orphans last."""

from __future__ import annotations

import operator
import re

from rich.text import Text

from verltop.analysis.marks import SuspectMark
from verltop.analysis.oom import marked
from verltop.model import ActorRow, GroupWork, Snapshot
from verltop.text.cells import plural
from verltop.text.marks import MARK, held_up_text, mark_tag
from verltop.text.memory_rows import memory_marks
from verltop.text.oom import verdict_tag
from verltop.text.stalls import stall_reasons
from verltop.text.training import slow_tag
from verltop.ui.widgets import pending_rows
from verltop.ui.widgets import process_rows as PR
from verltop.ui.widgets.table_cells import growth_bytes_per_min
from verltop.ui.widgets.table_types import Row

_ID, _PROCS = operator.attrgetter("actor_id"), operator.attrgetter("processes")
GROUPINGS = ("group", "role", "node")
SORTS = ("rank", "gpu", "cpu", "mem", "age", "growth")


def group_of(a: ActorRow, grouping: str) -> str:
    if grouping == "role":
        return a.role
    if grouping == "node":
        return a.node_ip or a.node_id or "?"
    if a.role == "controller":
        return "controller"
    if a.worker_group:
        return a.worker_group
    return a.role


def header_text(name: str, members: list[ActorRow], grouping: str, work: GroupWork | None = None,
                held: list[SuspectMark] | None = None) -> Text:
    """A group row: ``▼ name  roles it hosts  N ranks  S stalled  D dead  R restarts  P pending  T retries``,
    then who holds it up when the last dump named suspects in it (``▶ held up by rank 2``)."""
    stalled = sum(1 for m in members if m.stalled)
    dead = sum(1 for m in members if m.state in ("DEAD", "RESTARTING"))
    restarts = sum(m.num_restarts or 0 for m in members)
    t = Text("▼ ", style="grey50")
    t.append(name, style="bold cyan")
    if grouping == "group" and members[0].worker_group:
        roles = sorted({r for m in members for r in m.roles})
        t.append("  " + "+".join(roles), style="cyan")
    worlds = {m.world_size for m in members if m.world_size}
    n = len(members)
    if len(worlds) == 1 and members[0].worker_group:
        w = worlds.pop()
        count = f"{n} ranks" if w == n else f"{n} of {w} ranks"
    else:
        count = plural(n, "actor")
    t.append(f"  {count}", style="grey70")
    if stalled:
        t.append(f"  {stalled} stalled", style="bold red")
    if dead:
        t.append(f"  {dead} dead", style="grey50")
    if restarts:
        t.append(f"  ↻ {plural(restarts, 'restart')}", style="dark_orange")
    if work is not None:
        if work.pending:
            t.append(f"  {work.pending} pending", style="yellow")
        if work.retries:
            t.append(f"  {work.retries} {'retry' if work.retries == 1 else 'retries'}", style="dark_orange")
    if held:
        t.append(f"  {held_up_text(held)}", style="bold magenta")
    return t


def _sort_value(a: ActorRow, sort: str) -> tuple:
    if sort == "gpu":
        return (-(a.gpu_util_percent or -1),)
    if sort == "cpu":
        return (-(a.cpu_percent or -1),)
    if sort == "mem":
        return (-(a.rss_bytes or -1),)
    if sort == "age":
        return (-(a.task_running_s or -1),)
    if sort == "growth":
        g = growth_bytes_per_min(a)
        return (g is None, -(g or 0.0))
    return ()


def matches(a: ActorRow, rx: re.Pattern[str] | None, invert: bool) -> bool:
    """Does the filter keep the actor? Its own fields, or one of its processes' titles."""
    if rx is None:
        return True
    hay = " ".join(str(x) for x in (a.role, " ".join(a.roles), a.worker_group, a.actor_name, a.class_name,
                                    a.node_ip, a.pid, a.rank, a.task, a.state, stall_reasons(a)) if x is not None)
    hit = rx.search(hay) is not None or PR.matches_title(a, rx)
    return hit != invert


class RowMemo:
    """The actor rows of the last layout (one per view), kept while their actor row is the same object:
    at 10,000 actors most rows of a snapshot are the last one's."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        # a group of plain rows (no mark, note or processes): its members, its work, and its rows (header
        # first), kept while the members are the same objects (thousands of idle helper actors, one group)
        self.groups: dict[str, tuple[list[ActorRow], GroupWork | None, list[Row]]] = {}


def layout_rows(snap: Snapshot, grouping: str, sort: str, rx: re.Pattern[str] | None = None,
                invert: bool = False, toggled: dict[str, bool] | None = None,
                marks: dict[str, SuspectMark] | None = None, memo: RowMemo | None = None) -> list[Row]:
    """The ordered rows to show: group headers followed by their actors, each actor followed by its child
    processes when its tree is open (``toggled``: the user's choices by actor id, over
    ``process_rows.default_open``), and the orphans' group last. ``marks``: the last dump's suspects that
    still hold (``analysis.marks.live_marks``), marked on their rows and their group's."""
    groups: dict[str, list[ActorRow]] = {}
    if rx is None:
        for a in snap.actors:
            groups.setdefault(group_of(a, grouping), []).append(a)
    else:
        for a in snap.actors:
            if matches(a, rx, invert):
                groups.setdefault(group_of(a, grouping), []).append(a)
    last = memo.rows if memo is not None else {}
    last_groups = memo.groups if memo is not None else {}
    kept: dict[str, Row] = {}
    kept_groups: dict[str, tuple[list[ActorRow], GroupWork | None, list[Row]]] = {}
    toggled = toggled or {}
    defaults = PR.default_open(snap.actors)
    rows: list[Row] = []
    if snap.pending:  # what Ray has not placed yet comes first: it is why nothing else moves
        shown = [p for p in pending_rows.listed(snap) if pending_rows.matches(p, rx, invert)]
        rows.append(Row(pending_rows.GROUP_KEY, header=pending_rows.header(snap)))
        rows.extend(Row(pending_rows.key_of(p), pending=p) for p in shown)
    work = {w.group: w for w in snap.work} if grouping == "group" else {}
    marks = marks or {}
    slow = {r.actor_id: slow_tag(r) for r in snap.slow_ranks if r.actor_id}
    ooms = marked(snap.memory.oom, snap.actors) if snap.memory is not None else {}  # ran out, not moved on
    for aid, m in memory_marks(snap.memory).items():  # short of memory ("GPU full in 6 steps") or growing
        slow[aid] = f"{slow[aid]} · {m}" if aid in slow else m
    flagged = {*marks, *ooms, *slow}
    for name, members in groups.items():  # snapshot order: controller, groups, others
        if sort != "rank":
            members = sorted(members, key=lambda a: _sort_value(a, sort))
        gkey = f"grp:{grouping}:{name}"
        ids = list(map(_ID, members))
        plain = flagged.isdisjoint(ids) and not any(map(_PROCS, members))
        w = work.get(name)
        hit = last_groups.get(gkey) if plain else None
        if (hit is not None and hit[1] == w and len(hit[0]) == len(members)
                and all(map(operator.is_, members, hit[0]))):
            rows.extend(hit[2])  # the same members as last time, nothing on them: the same rows
            kept.update(zip(ids, hit[2][1:], strict=True))
            kept_groups[gkey] = hit
            continue
        start = len(rows)
        held = [marks[a.actor_id] for a in members if a.actor_id in marks]
        rows.append(Row(gkey, header=header_text(name, members, grouping, w, held)))
        for a in members:
            aid = a.actor_id
            if not a.processes and aid not in marks and aid not in ooms and aid not in slow:
                row = last.get(aid)  # the plain row of an unmarked actor: the last layout's, if its actor is
                if row is None or row.actor is not a or row.mark or row.note:
                    row = Row(aid, actor=a)
                rows.append(row)
                kept[aid] = row
                continue
            m = marks.get(aid)
            oom = ooms.get(aid)
            tag = mark_tag(m) if m is not None else f"{MARK} {verdict_tag(oom)}" if oom is not None else ""
            if not a.processes:
                rows.append(Row(aid, actor=a, mark=tag, note=slow.get(aid, "")))
                continue
            open_ = PR.is_open(a, toggled, defaults)
            rows.append(Row(a.actor_id, actor=a, marker="▾" if open_ else "▸", mark=tag,
                            note=slow.get(a.actor_id, "")))
            if open_:
                child = m.suspect.pid if m is not None and m.process else None
                rows.extend(Row(f"proc:{a.actor_id}:{p.pid}", proc=p, parent=a, branch=b,
                                mark=tag if p.pid == child else "")
                            for p, b in zip(a.processes, PR.branches(a.processes), strict=True))
        if plain:
            kept_groups[gkey] = (members, w, rows[start:])
    if memo is not None:
        memo.rows, memo.groups = kept, kept_groups
    if snap.orphans and not invert and (rx is None or any(o.title and rx.search(o.title) for o in snap.orphans)):
        rows.append(Row("grp:orphans", header=PR.orphans_header(snap.orphans)))
        names = {a.actor_id: a.actor_name or a.class_name for a in snap.actors}
        rows.extend(Row(f"orphan:{o.node_id}:{o.pid}", proc=o, branch=b[2:] if o.depth > 1 else "",
                        note=PR.orphan_note(o, names))
                    for o, b in zip(snap.orphans, PR.branches(snap.orphans), strict=True))
    return rows

