"""A dump's suspects as the main screen keeps them: a few words in the row (``▶ not in all_reduce``), who
holds the group up on its row, and the whole reason on the line under the table."""

from __future__ import annotations

from verltop.analysis.marks import SuspectMark
from verltop.model import SuspectWhy
from verltop.text.oom import verdict_tag
from verltop.text.suspects import suspect_reason

MARK = "▶"


def _short(w: SuspectWhy) -> str:
    """A reason in a few words: what sets the suspect apart, never where (the line under the table says it)."""
    k = w.kind
    if k in ("not_in", "not_seen") and w.op:
        return f"not in {w.op}"
    if k == "mismatch" and w.op:
        return f"in {w.op}, peers not"
    if k in ("dead_waited", "dead_live_on", "died_first", "timed_out"):
        return (w.fate.state if w.fate is not None else "dead").lower() + (" first" if k == "died_first" else "")
    if k == "controller":
        return "controller waits on it"
    if k == "tp" and w.process:
        return f"{w.process.rsplit('::', 1)[-1]} not in {'/'.join(w.ops) or 'the collective'}"
    if k == "chain_end":
        return "end of the wait chain"
    if k == "not_placed":
        return "not placed"
    if k == "ras":
        return "NCCL RAS"
    if k == "oom" and w.oom is not None:
        return verdict_tag(w.oom)
    return k.replace("_", " ")


def mark_tag(m: SuspectMark) -> str:
    """The row's mark: ``▶ not in all_reduce`` (the first, most telling reason)."""
    return f"{MARK} {_short(m.suspect.why[0])}" if m.suspect.why else MARK


def mark_sentence(m: SuspectMark, clock: str) -> str:
    """The line under the table: ``▶ suspect (dump of 07:10:31): not in all_reduce with ranks 0-1,3 …``."""
    who = f"{m.process}: " if m.process else ""
    return f"{MARK} suspect (dump of {clock}): {who}{suspect_reason(m.suspect)}"


def held_up_text(marks: list[SuspectMark]) -> str:
    """A group row's note: ``held up by rank 2`` (``ranks 2, 3``; an actor without a rank by its process or
    group)."""
    who = []
    for m in marks:
        s = m.suspect
        if m.process:
            who.append(m.process.rsplit("::", 1)[-1])
        elif s.rank is not None:
            who.append(f"rank {s.rank}")
        else:
            who.append(s.worker_group or "an actor")
    names = list(dict.fromkeys(who))
    if all(n.startswith("rank ") for n in names) and len(names) > 1:
        names = ["ranks " + ", ".join(n[5:] for n in names)]
    return f"{MARK} held up by {', '.join(names)}"
