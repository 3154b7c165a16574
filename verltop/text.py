"""Plain-text renderings shared by the CLI and saved dumps (the TUI draws its own, richer ones)."""

from __future__ import annotations

from verltop import fmt
from verltop.analysis.collectives import collective_pending
from verltop.analysis.merge import build_tree, compact_labels, rank_label, tree_text
from verltop.model import DumpReport, Snapshot


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    line = lambda cells: "  ".join(c.ljust(widths[i]) for i, c in enumerate(cells)).rstrip()  # noqa: E731
    return "\n".join([line(headers), *(line(r) for r in rows)])


def snapshot_text(s: Snapshot) -> str:
    gpus = sum(len(n.gpus) for n in s.nodes)
    dead = sum(1 for n in s.nodes if n.state != "ALIVE")
    nodes = f"{len(s.nodes) - dead} ({dead} dead)" if dead else str(len(s.nodes))
    head = [f"verltop @ {s.address}  nodes {nodes}  GPUs {gpus}  actors {len(s.actors)}  "
            f"phase {s.phase or '-'}  last progress {fmt.age(s.progress_s)} ago"]
    if s.steps:
        head.append(steps_text(s))
    for e in s.errors:
        head.append(f"WARNING: {e}")
    if s.truncated:
        head.append(f"WARNING: {s.truncated}")
    rows = []
    for a in s.actors:
        rows.append([
            a.worker_group or "-", a.role, "-" if a.rank is None else f"{a.rank}/{a.world_size or '?'}",
            a.node_ip or "-", str(a.pid or "-"), "-" if a.gpu_index is None else str(a.gpu_index),
            fmt.pct(a.gpu_util_percent), fmt.size(a.gpu_mem_bytes), fmt.pct(a.cpu_percent), fmt.size(a.rss_bytes),
            a.state, a.task or "-", fmt.age(a.task_running_s), ("STALLED: " + a.stall_reason) if a.stalled else "",
        ])
    table = _table(["GROUP", "ROLE", "RANK", "NODE", "PID", "GPU", "GPU%", "GMEM", "CPU%", "RSS", "STATE",
                    "TASK", "AGE", "STALL"], rows)
    return "\n".join([*head, "", table])


def steps_text(s: Snapshot) -> str:
    """``step 12 (10.2s/step): gen 3.1s  reward 0.5s  …`` for the last finished step, and the running one."""
    from verltop.analysis.steps import median_step_s

    med = median_step_s(s.steps)
    done = [st for st in s.steps if st.duration_s is not None]
    out = f"step {s.steps[-1].index}" + (f" ({fmt.duration(med)}/step)" if med is not None else "")
    if done:
        last = done[-1]
        out += f"; step {last.index} took {fmt.duration(last.duration_s)}: " + "  ".join(
            f"{p} {fmt.duration(v)}" for p, v in last.phases)
        worst = max(last.skew_s, key=lambda kv: kv[1], default=None)
        if worst is not None and worst[1] >= 1.0:
            out += f"; last rank of {worst[0]} {fmt.duration(worst[1])} after the first"
    return out


def dump_text(r: DumpReport) -> str:
    out = []
    ok = sum(1 for x in r.ranks if x.error is None)
    out.append(f"verltop dump: {ok}/{len(r.ranks)} ranks dumped, {r.samples} sample(s)"
               f"{', native' if r.native else ''}")
    for n in r.notes:
        out.append(f"note: {n}")
    out.append("")
    if r.suspects:
        out.append("SUSPECTS (most likely first)")
        for s in r.suspects:
            who = f"{s.worker_group}:{s.rank}" if s.worker_group else s.actor_id[:12]
            out.append(f"  {who}: {s.reason}")
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
        frame = (x.blocked_on.frame if x.blocked_on else None) or (x.stack[0].short() if x.stack else "-")
        motion = "-" if x.stuck is None else ("stuck" if x.stuck else "moving")
        rows.append([a.worker_group or "-", "-" if a.rank is None else str(a.rank), a.role, a.node_ip or "-",
                     str(a.pid or "-"), op, frame or "-", motion, x.error.text if x.error else ""])
    out.append(_table(["GROUP", "RANK", "ROLE", "NODE", "PID", "WAITS IN", "FRAME", "MOTION", "ERROR"], rows))
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


def full_stacks_text(r: DumpReport) -> str:
    """Every thread of every rank (for saved dumps)."""
    out = []
    for x in r.ranks:
        a = x.actor
        out.append(f"=== {rank_label(x)} role={a.role} pid={a.pid} node={a.node_ip} task={a.task or '-'}")
        if x.error:
            out.append(f"    error: {x.error.text}")
        last = next((s for s in reversed(x.samples) if s.threads), None)
        for t in last.threads if last else ():
            state = "active" if t.active else "idle"
            out.append(f"  Thread {t.thread_id} ({state}): {t.name or ''}")
            for f in t.frames:
                out.append(f"      {f.func} ({f.file}:{f.line})" if f.line else f"      {f.func} ({f.file})")
        out.append("")
    return "\n".join(out)
