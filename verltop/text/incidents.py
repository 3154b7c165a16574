"""What an incident says: its diagnosis (evidence and deaths in words, from the analysis' facts) and that
diagnosis in one paragraph (``incident.json``'s summary, the watch log)."""

from __future__ import annotations

from dataclasses import dataclass

from verltop.analysis.incidents import Wait, death_is_failure, group_of, job_actor, label, waits
from verltop.analysis.merge import compact_labels
from verltop.model import ActorRow, Death, DumpReport, Snapshot, Suspect
from verltop.text.dump import suspect_label
from verltop.text.stalls import stall_reason
from verltop.text.suspects import suspect_reason


@dataclass(frozen=True, slots=True)
class Diagnosis:
    phase: str | None
    groups: tuple[str, ...]
    suspects: tuple[Suspect, ...]
    waits: tuple[Wait, ...]
    chains: tuple[str, ...]
    evidence: tuple[str, ...]
    deaths: tuple[str, ...]
    names: tuple[str, ...] = ()  # each suspect as the user sees it (``vllm_server_0_0/VLLM::Worker_TP1 (pid 4242)``)


def wait_text(w: Wait) -> str:
    """``ranks abcd:0-1,3 wait in all_reduce (all_reduce #5) at x.py:3 f``."""
    what = f"{w.op}" + (f" ({w.collective})" if w.collective and w.collective != w.op else "")
    at = f" at {w.frame}" if w.frame else ""
    return f"ranks {compact_labels(w.ranks, ', ')} wait in {what}{at}"


def diagnose(snap: Snapshot, report: DumpReport | None, groups: tuple[str, ...],
             chains: tuple[str, ...] = (), notes: tuple[str, ...] = (), latest: Snapshot | None = None) -> Diagnosis:
    """What an incident says: phase, groups, suspects, where the others wait, wait chains, evidence. ``snap``
    is the snapshot it was detected in (the stalls); ``latest`` a later one (ranks that died since).
    ``chains``: the wait chains as :func:`verltop.text.chains.chain_text` words them."""
    rows = [a for a in snap.actors if job_actor(a) and group_of(a) in groups]
    now_rows = [a for a in (latest or snap).actors if job_actor(a) and group_of(a) in groups]
    evidence: list[str] = []
    for g in groups:
        grp = [a for a in rows if group_of(a) == g]
        st = [a for a in grp if a.stalled and a.state == "ALIVE"]
        if st:
            first = stall_reason(st[0].stalls[0]) if st[0].stalls else ""
            evidence.append(f"{len(st)} of {len(grp)} actors of {g} stalled" + (f": {first}" if first else ""))
        spin = [a for a in st if a.gpu_util_percent is not None and a.gpu_util_percent >= 90]
        if spin:
            evidence.append(f"GPUs of {compact_labels((label(a) for a in spin), ', ')} at ≥ 90 % while stalled "
                            "(a wait in NCCL spins the GPU: not progress)")
    # a death the dump classified (NCCL timeout, CUDA OOM, a signal...) says more than Ray's first line
    classified = {r.actor.actor_id: r.death for r in (report.ranks if report else ()) if r.death and r.process is None}
    deaths = tuple(f"{label(a)} {a.state}: {_death_text(classified.get(a.actor_id), a)}" for a in now_rows
                   if a.state in ("DEAD", "RESTARTING") and death_is_failure(a))
    ws: list[Wait] = []
    sus: tuple[Suspect, ...] = ()
    if report is not None:
        ws = waits(report, groups)
        sus = report.suspects
        stuck = [r for r in report.ranks if r.stuck and r.process is None]
        if report.samples > 1 and stuck:
            evidence.append(f"stacks of {compact_labels((label(r.actor) for r in stuck), ', ')} unchanged across "
                            f"{report.samples} samples")
        for r in report.ranks:
            c = r.collective
            if c is not None and c.source == "watchdog_log" and c.op and r.process is None:
                evidence.append(f"NCCL watchdog on {label(r.actor)}: {c.op} #{c.seq} timed out (last enqueued "
                                f"{c.last_enqueued}, last completed {c.last_completed})")
        evidence += [f"note: {n}" for n in report.notes]
    evidence += [f"note: {n}" for n in notes]
    names = tuple(suspect_name(s, report) for s in sus) if report is not None else ()
    return Diagnosis(snap.phase, groups, sus, tuple(ws), chains, tuple(dict.fromkeys(evidence)), deaths, names)


def suspect_name(s: Suspect, report: DumpReport) -> str:
    """A suspect as the user sees it: ``rank 1 of x2s (pid 4242)``, ``vllm_server_0_0/VLLM::Worker_TP1 (pid
    4243)``, ``TaskRunner (pid 99)``; never a bare id."""
    if s.worker_group and s.rank is not None:
        return f"rank {s.rank} of {s.worker_group}" + (f" (pid {s.pid})" if s.pid else "")
    name = suspect_label(s, report)
    return name if "(pid" in name or not s.pid else f"{name} (pid {s.pid})"


def _death_text(death: Death | None, a: ActorRow) -> str:
    if death is not None:
        return f"{death.kind}: {death.detail}" if death.detail else death.kind
    return a.death_cause or "no cause given yet"




def incident_summary(d: Diagnosis, began: str, detected: str) -> str:
    """The diagnosis in one paragraph (``began``/``detected``: the caller's formatted times)."""
    groups = ", ".join(d.groups) or "-"
    parts = [f"Stall in phase {d.phase or '-'} of worker group {groups}, began {began} (detected {detected})."]
    if d.suspects:
        s = d.suspects[0]
        who = d.names[0] if d.names else (f"rank {s.rank} of {s.worker_group}" if s.worker_group and s.rank is not None
                                          else "placement group" if s.placement_group_id else f"actor {s.actor_id[:12]}")
        more = f" (and {len(d.suspects) - 1} more)" if len(d.suspects) > 1 else ""
        parts.append(f"Suspect: {who}{more}: {suspect_reason(s)}.")
    elif d.waits or d.deaths:
        parts.append("No rank stands apart from its peers.")
    else:
        parts.append("No stacks were taken.")
    for w in d.waits[:3]:
        line = wait_text(w)
        parts.append(f"{line[0].upper()}{line[1:]}.")
    if d.deaths:
        parts.append("Died: " + "; ".join(d.deaths[:4]) + ".")
    if d.chains:
        parts.append("Wait chains: " + "; ".join(d.chains[:3]) + ".")
    if d.evidence:
        parts.append("Evidence: " + "; ".join(d.evidence[:6]) + ".")
    return " ".join(parts)
