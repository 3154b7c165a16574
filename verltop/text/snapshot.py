"""``verltop snapshot`` as text: the header, the last steps, what is pending, the actors with their
processes, and the orphans."""

from __future__ import annotations

from verltop.analysis.oom import marked
from verltop.analysis.steps import median_step_s
from verltop.model import ProcRow, Snapshot
from verltop.text.cells import age, duration, pct, size, table
from verltop.text.oom import verdict_line, verdict_tag
from verltop.text.pending import pending_lines
from verltop.text.processes import narrow_title
from verltop.text.rollout import load_text, tail_line
from verltop.text.stalls import stall_reasons
from verltop.text.training import training_lines


def snapshot_text(s: Snapshot) -> str:
    """``verltop snapshot``: the header line, the last steps, warnings, what is pending, the actors (with their
    processes) and the orphans."""
    gpus = sum(len(n.gpus) for n in s.nodes)
    dead = sum(1 for n in s.nodes if n.state != "ALIVE")
    nodes = f"{len(s.nodes) - dead} ({dead} dead)" if dead else str(len(s.nodes))
    head = [f"verltop @ {s.address}  nodes {nodes}  GPUs {gpus}  actors {len(s.actors)}  "
            f"phase {s.phase or '-'}  last progress {age(s.progress_s)} ago"]
    if s.steps:
        head.append(steps_text(s))
    head += training_lines(s.training, s.slow_ranks)
    if s.memory is not None:
        head += [verdict_line(v) for v in s.memory.oom]
    for e in s.errors:
        head.append(f"WARNING: {e}")
    if s.truncated:
        head.append(f"WARNING: {s.truncated}")
    rows = []
    ooms = marked(s.memory.oom, s.actors) if s.memory is not None else {}
    for a in s.actors:
        oom = ooms.get(a.actor_id)
        stall = f"STALLED: {stall_reasons(a)}" if a.stalled else ""
        if oom is not None:
            stall = " ".join(x for x in (verdict_tag(oom), stall) if x)
        rows.append([
            a.worker_group or "-", a.role, "-" if a.rank is None else f"{a.rank}/{a.world_size or '?'}",
            a.node_ip or "-", str(a.pid or "-"), "-" if a.gpu_index is None else str(a.gpu_index),
            pct(a.gpu_util_percent), size(a.gpu_mem_bytes), pct(a.cpu_percent), size(a.rss_bytes),
            a.state, a.task or "-", age(a.task_running_s), stall,
        ])
        for c in a.processes:
            rows.append(_proc_cells(c, "  " * c.depth + "└ " + narrow_title(c.title), ""))
    actors = table(["GROUP", "ROLE", "RANK", "NODE", "PID", "GPU", "GPU%", "GMEM", "CPU%", "RSS", "STATE",
                    "TASK", "AGE", "STALL"], rows)
    out = [*head, *pending_lines(s), "", actors]
    if s.rollout:
        out += ["", "ROLLOUT (each server's own /metrics)"]
        if (tail := tail_line(s.phase, s.rollout)) is not None:
            out.append(tail)
        out += [f"{r.actor_name or r.actor_id}  {r.address or '-'}  {load_text(r)}" for r in s.rollout]
    if s.orphans:
        out += ["", "ORPHANS (processes with no live actor above them)"]
        out.append(table(["NODE", "PID", "PPID", "GPU", "GMEM", "CPU%", "RSS", "TITLE"], [
            [o.node_ip or "-", str(o.pid), str(o.ppid or "-"), "-" if o.gpu_index is None else str(o.gpu_index),
             size(o.gpu_mem_bytes), pct(o.cpu_percent), size(o.rss_bytes), o.title or "-"]
            for o in s.orphans]))
    return "\n".join(out)


def _proc_cells(c: ProcRow, label: str, node: str) -> list[str]:
    return ["", label, "", node, str(c.pid), "-" if c.gpu_index is None else str(c.gpu_index), "",
            size(c.gpu_mem_bytes), pct(c.cpu_percent), size(c.rss_bytes), "", "", "", ""]


def steps_text(s: Snapshot) -> str:
    """``step 12 (10.2s/step): gen 3.1s  reward 0.5s  …`` for the last finished step, and the running one."""
    med = median_step_s(s.steps)
    done = [st for st in s.steps if st.duration_s is not None]
    out = f"step {s.steps[-1].index}" + (f" ({duration(med)}/step)" if med is not None else "")
    if done:
        last = done[-1]
        out += f"; step {last.index} took {duration(last.duration_s)}: " + "  ".join(
            f"{p} {duration(v)}" for p, v in last.phases)
        worst = max(last.skew_s, key=lambda kv: kv[1], default=None)
        if worst is not None and worst[1] >= 1.0:
            out += f"; last rank of {worst[0]} {duration(worst[1])} after the first"
    return out
