"""Flight Recorder analysis: a rank's pending collective, and the cross-rank match by ``collective_seq_id``
(like ``torch.distributed.flight_recorder.fr_trace``, but joined to the live stacks). Pure; the files are read
and parsed by ``sources.flight_recorder``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from verltop.model import CollectiveInfo, FrEntry, FrRank


def _numel(sizes: Any) -> int | None:
    if isinstance(sizes, list) and sizes and isinstance(sizes[0], list):
        try:
            return int(math.prod(int(x) for x in sizes[0]))
        except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity as a size
            return None
    return None


def collective_info(r: FrRank) -> CollectiveInfo:
    """The rank's first unfinished collective (or its last one)."""
    pending = [e for e in r.entries if e.state != "completed"]
    e = min(pending, key=lambda x: x.seq) if pending else (max(r.entries, key=lambda x: x.seq) if r.entries else None)
    return CollectiveInfo(
        source="flight_recorder",
        op=e.op if e else None,
        seq=e.seq if e else r.last_enqueued,
        last_enqueued=r.last_enqueued,
        last_completed=r.last_completed,
        numel=_numel(e.input_sizes) if e else None,
    )


def match(ranks: list[FrRank]) -> list[str]:
    """Cross-rank findings: ranks missing from a collective, and mismatched ops or sizes."""
    out: list[str] = []
    if len(ranks) < 2:
        return out
    by_seq: dict[int, dict[int, FrEntry]] = {}
    for r in ranks:
        for e in r.entries:
            by_seq.setdefault(e.seq, {})[r.rank] = e
    all_ranks = {r.rank for r in ranks}
    for seq in sorted(by_seq):
        have = by_seq[seq]
        done = all(e.state == "completed" for e in have.values())
        missing = sorted(all_ranks - set(have))
        if missing and not done:
            first = next(iter(have.values()))
            out.append(f"collective #{seq} ({first.profiling_name}): ranks {missing} never joined "
                       f"(ranks {sorted(have)} wait)")
        names = {e.profiling_name for e in have.values()}
        sizes = {json.dumps(e.input_sizes, default=repr) for e in have.values()}  # a pickle may hold a set
        if len(names) > 1 or (len(sizes) > 1 and len(names) == 1 and "all_gather" not in str(names)):
            detail = ", ".join(f"rank {k} {e.profiling_name} {e.input_sizes}" for k, e in sorted(have.items()))
            out.append(f"collective #{seq} mismatch: {detail}")
    return out
