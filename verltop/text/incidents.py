"""An incident's diagnosis in one paragraph (``incident.json``'s summary, the watch log)."""

from __future__ import annotations

from verltop.analysis.incidents import Diagnosis
from verltop.text.suspects import suspect_reason


def incident_summary(d: Diagnosis, began: str, detected: str) -> str:
    """The diagnosis in one paragraph (``began``/``detected``: the caller's formatted times)."""
    groups = ", ".join(d.groups) or "-"
    parts = [f"Stall in phase {d.phase or '-'} of worker group {groups}, began {began} (detected {detected})."]
    if d.suspects:
        s = d.suspects[0]
        who = f"rank {s.rank} of {s.worker_group}" if s.worker_group and s.rank is not None else s.actor_id[:12]
        more = f" (and {len(d.suspects) - 1} more)" if len(d.suspects) > 1 else ""
        parts.append(f"Suspect: {who}{more}: {suspect_reason(s)}.")
    elif d.waits or d.deaths:
        parts.append("No rank stands apart from its peers.")
    else:
        parts.append("No stacks were taken.")
    for w in d.waits[:3]:
        parts.append(f"{w.text()[0].upper()}{w.text()[1:]}.")
    if d.deaths:
        parts.append("Died: " + "; ".join(d.deaths[:4]) + ".")
    if d.chains:
        parts.append("Wait chains: " + "; ".join(d.chains[:3]) + ".")
    if d.evidence:
        parts.append("Evidence: " + "; ".join(d.evidence[:6]) + ".")
    return " ".join(parts)
