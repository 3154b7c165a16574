"""Plain-text renderings shared by the CLI and saved dumps (the TUI draws its own, richer ones)."""

from __future__ import annotations

from verltop import fmt
from verltop.analysis.chains import chain_text, group_chains
from verltop.analysis.collectives import calling_frame, collective_pending
from verltop.analysis.merge import build_tree, compact_labels, rank_label, short_title, tree_text
from verltop.model import DoctorReport, DumpReport, ProcRow, RankDump, Snapshot, Suspect


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
        for c in a.processes:
            rows.append(_proc_cells(c, "  " * c.depth + "└ " + fmt.short_title(c.title), ""))
    table = _table(["GROUP", "ROLE", "RANK", "NODE", "PID", "GPU", "GPU%", "GMEM", "CPU%", "RSS", "STATE",
                    "TASK", "AGE", "STALL"], rows)
    out = [*head, *pending_text(s), "", table]
    if s.orphans:
        out += ["", "ORPHANS (processes with no live actor above them)"]
        out.append(_table(["NODE", "PID", "PPID", "GPU", "GMEM", "CPU%", "RSS", "TITLE"], [
            [o.node_ip or "-", str(o.pid), str(o.ppid or "-"), "-" if o.gpu_index is None else str(o.gpu_index),
             fmt.size(o.gpu_mem_bytes), fmt.pct(o.cpu_percent), fmt.size(o.rss_bytes), o.title or "-"]
            for o in s.orphans]))
    return "\n".join(out)


def pending_text(s: Snapshot) -> list[str]:
    """The PENDING section: what Ray has not placed yet, and why (nothing when nothing waits)."""
    if not s.pending:
        return []
    rows = [[p.kind.replace("placement_group", "placement group"), p.name or p.id[:12], p.worker_group or "-",
             p.scheduling_state or p.state or "-", fmt.age(p.waiting_s), p.reason] for p in s.pending]
    return ["", "PENDING (not placed by Ray yet)",
            *("  " + ln for ln in _table(["KIND", "NAME", "GROUP", "STATE", "WAITED", "WHY"], rows).splitlines())]


def _proc_cells(c: ProcRow, label: str, node: str) -> list[str]:
    return ["", label, "", node, str(c.pid), "-" if c.gpu_index is None else str(c.gpu_index), "",
            fmt.size(c.gpu_mem_bytes), fmt.pct(c.cpu_percent), fmt.size(c.rss_bytes), "", "", "", ""]


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
    if r.chains:
        out.append("WAIT CHAINS (who waits on whom, from the top; each ends where nothing it waits on is seen)")
        for c, n in group_chains(r.chains):
            out.append(f"  {chain_text(c)}" + (f"  (×{n}: as many chains of this shape)" if n > 1 else ""))
        out.append("")
    if r.suspects:
        out.append("SUSPECTS (most likely first)")
        for s in r.suspects:
            out.append(f"  {suspect_label(s, r)}: {s.reason}")
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
    out.append(_table(["GROUP", "RANK", "ROLE", "NODE", "PID", "PROCESS", "WAITS IN", "FRAME", "MOTION", "ERROR"],
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
    return f"└ {short_title(x.process)} (parent {x.parent_pid})"


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


DOCTOR_CELL_WIDTH = 32
_ANSI = {"mismatch": ("\x1b[1;31m", "\x1b[0m"), "problem": ("\x1b[33m", "\x1b[0m")}
_MARK = {"mismatch": " *", "problem": " !"}


def doctor_text(r: DoctorReport, color: bool = False) -> str:
    """The doctor's table (a column per node, a row per check; values that differ from the majority in red,
    or marked ``*`` without colour; ``!`` a value over its limit), then mismatches and problems with fixes."""
    from verltop.analysis.doctor import cell_marks, summary_text, value_text

    marks = cell_marks(r)

    def cell(check: str, label: str, v: object) -> tuple[str, str | None]:
        t = value_text(check, v)  # type: ignore[arg-type]
        if len(t) > DOCTOR_CELL_WIDTH:
            t = t[:DOCTOR_CELL_WIDTH - 1] + "…"
        m = marks.get((check, label))
        return (t if color or m is None else t + _MARK[m]), m

    header = [["CHECK", *(n.label for n in r.nodes)],
              ["", *((n.hostname or "-") + (" (head)" if n.is_head else "") for n in r.nodes)]]
    rows = [[(c, None), *(cell(c, n.label, n.get(c)) for n in r.nodes)] for c in r.checks]
    widths = [max(len(x) for x in col) for col in zip(*(h for h in header), *([t for t, _ in row] for row in rows),
                                                      strict=True)]

    def line(cells: list[tuple[str, str | None]]) -> str:
        out = []
        for (t, m), w in zip(cells, widths, strict=True):
            pad = t.ljust(w)
            out.append(f"{_ANSI[m][0]}{pad}{_ANSI[m][1]}" if color and m else pad)
        return "  ".join(out).rstrip()

    lines = [f"verltop doctor: {summary_text(r)}" + (f"  (shared directory {r.path})" if r.path else ""), ""]
    lines += [line([(t, None) for t in h]) for h in header]
    lines += [line(row) for row in rows]
    if not color and marks:
        lines.append("* differs from the majority   ! a problem (below)")
    if r.mismatches:
        lines += ["", f"MISMATCHES ({len(r.mismatches)})"]
        for m in r.mismatches:
            lines.append(f"  - {m.problem.message}")
            if m.problem.remedy:
                lines.append(f"    fix: {m.problem.remedy}")
    if r.problems:
        lines += ["", f"PROBLEMS ({len(r.problems)})"]
        for p in r.problems:
            lines.append(f"  - {p.problem.message}")
            if p.problem.remedy:
                lines.append(f"    fix: {p.problem.remedy}")
    for n in r.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)
