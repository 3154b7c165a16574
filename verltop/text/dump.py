"""A dump as text: suspects, wait chains, each rank's wait, the merged stacks (``verltop dump`` and saved
dumps), every thread of every rank, and a suspect's label."""

from __future__ import annotations

from verltop.analysis.chains import group_chains
from verltop.analysis.collectives import calling_frame, collective_pending
from verltop.analysis.merge import build_tree, compact_labels, label_title, rank_label
from verltop.model import DumpReport, RankDump, Suspect
from verltop.text.cells import table
from verltop.text.chains import chain_text
from verltop.text.stacks import tree_text
from verltop.text.suspects import suspect_reason


def dumped_text(r: DumpReport) -> str:
    """``4/4 ranks dumped, 9/9 other processes``: ranks apart from the controller, drivers and children,
    which are not ranks."""
    rk = [x for x in r.ranks if x.process is None and x.actor.rank is not None]
    other = [x for x in r.ranks if not (x.process is None and x.actor.rank is not None)]

    def ok(xs: list[RankDump]) -> str:
        return f"{sum(1 for x in xs if x.error is None)}/{len(xs)}"

    if not rk:
        return f"{ok(other)} processes dumped"
    more = f", {ok(other)} other process{'' if len(other) == 1 else 'es'}" if other else ""
    return f"{ok(rk)} ranks dumped{more}"


def dump_text(r: DumpReport) -> str:
    """``verltop dump``: the wait chains, the suspects, each rank's wait, the merged stacks, the classes."""
    out = []
    out.append(f"verltop dump: {dumped_text(r)}, {r.samples} sample(s){', native' if r.native else ''}")
    for n in r.notes:
        out.append(f"note: {n}")
    out.append("")
    if r.chains:
        out.append("WAIT CHAINS (who waits on whom, from the top; each ends where nothing it waits on is seen)")
        for c, n in group_chains(r.chains):
            out.append(f"  {chain_text(c)}" + (f"  (×{n}: as many chains of this shape)" if n > 1 else ""))
        out.append("")
    if r.suspects:
        out.append("SUSPECTS (most likely first)")
        for s in r.suspects:
            out.append(f"  {suspect_label(s, r)}: {suspect_reason(s)}")
    else:
        out.append("SUSPECTS: none (no rank stands apart from its peers)")
    out.append("")
    rows = []
    for x in r.ranks:
        a = x.actor
        op = x.blocked_on.op if x.blocked_on else "-"
        if x.collective and x.collective.op:
            done = "" if collective_pending(x.collective) else ", completed"
            op += f" [{x.collective.op} seq {x.collective.seq}{done}]"
        frame = calling_frame(x.blocked_on, x.stack)
        motion = "-" if x.stuck is None else ("stuck" if x.stuck else "moving")
        err = x.error.text if x.error else ""
        if x.death is not None:
            err = f"{err} [death: {x.death.kind}: {x.death.detail or '-'}]".strip()
        rows.append([a.worker_group or "-", "-" if a.rank is None else str(a.rank), a.role, a.node_ip or "-",
                     str(a.pid or "-"), _process(x), op, frame or "-", motion, err])
    out.append(table(["GROUP", "RANK", "ROLE", "NODE", "PID", "PROCESS", "WAITS IN", "FRAME", "MOTION", "ERROR"],
                      rows))
    out.append("")
    out.append("MERGED STACKS (rank sets, outermost frame first)")
    stacks = {rank_label(x): x.stack for x in r.ranks if x.main is not None}
    out.append(tree_text(build_tree(stacks)))
    out.append("")
    out.append("EQUIVALENCE CLASSES")
    for g in r.groups:
        op = g.blocked_on.op if g.blocked_on else "-"
        top = g.frames[0].short() if g.frames else "-"
        out.append(f"  [{compact_labels(g.ranks)}] ({len(g.ranks)}) {op}: {top}")
    return "\n".join(out)


def _process(x: RankDump) -> str:
    """The actor's own process is named by its actor; a child by its title, under its parent."""
    if x.is_driver:
        return "driver"
    if x.process is None:
        return x.actor.actor_name or "-"
    return f"└ {label_title(x.process)} (parent {x.parent_pid})"


def suspect_label(s: Suspect, r: DumpReport) -> str:
    """``x2s:1``, ``vllm_server_0_0/VLLM::Worker_TP1 (pid 4242)``."""
    hit = next((x for x in r.ranks if x.actor.actor_id == s.actor_id and x.actor.pid == s.pid), None)
    if hit is not None:
        return rank_label(hit)
    if s.placement_group_id:
        return "placement group"
    return f"{s.worker_group}:{s.rank}" if s.worker_group else s.actor_id[:12]


def full_stacks_text(r: DumpReport) -> str:
    """Every thread of every rank (for saved dumps)."""
    out = []
    for x in r.ranks:
        a = x.actor
        out.append(f"=== {rank_label(x)} role={a.role} pid={a.pid} node={a.node_ip} task={a.task or '-'}"
                   + (f" parent={x.parent_pid}" if x.process is not None else ""))
        if x.error:
            out.append(f"    error: {x.error.text}")
        if x.death:
            out.append(f"    death: {x.death.kind}: {x.death.detail or '-'}")
        last = next((s for s in reversed(x.samples) if s.threads), None)
        for t in last.threads if last else ():
            state = "active" if t.active else "idle"
            out.append(f"  Thread {t.thread_id} ({state}): {t.name or ''}")
            for f in t.frames:
                out.append(f"      {f.func} ({f.file}:{f.line})" if f.line else f"      {f.func} ({f.file})")
        out.append("")
    return "\n".join(out)
