"""Why a process is a suspect, in words (``verltop dump``, its JSON ``reason``, the stacks view, incidents)."""

from __future__ import annotations

from verltop.analysis.rank_sets import compact_ints
from verltop.model import Fate, Peers, Suspect, SuspectWhy, Where
from verltop.text.cells import duration
from verltop.text.chains import chain_text, moved_text
from verltop.text.oom import verdict_reason
from verltop.text.pending import not_placed
from verltop.text.ras import finding_text


def suspect_reason(s: Suspect) -> str:
    """All of a suspect's reasons, one after another."""
    return "; ".join(why_text(w) for w in s.why)


def ranks_text(p: Peers) -> str:
    """``ranks 0-1,3``, ``rank 2``, ``4 ranks`` (when their numbers are not known)."""
    s = compact_ints(p.ranks)
    return f"rank{'s' if len(p.ranks) != 1 else ''} {s}" if s else f"{p.count} ranks"


def _wait(p: Peers) -> str:
    return "waits" if p.count == 1 else "wait"


def fate_text(f: Fate) -> str:
    """``cuda_oom: …``, the death's kind alone, else Ray's death cause (or nothing)."""
    if f.death is not None:
        return f"{f.death.kind}: {f.death.detail}" if f.death.detail else f.death.kind
    return f.cause or ""


def where_text(w: Where) -> str:
    """Where a suspect is while its peers wait."""
    if w.kind == "unreadable":
        return f"its stack could not be read ({w.error})"
    if w.kind == "waits":
        return f"it waits in {w.op} ({w.frame})"
    if w.kind == "elsewhere":
        return "it is elsewhere"
    task = f" in {w.task}" if w.task else ""
    at = f" at {w.frame}" if w.frame else ""
    return f"it is{task}{at}"


def _after(fates: tuple[Fate, ...]) -> str:
    """How the ranks that died after the suspect died (the owner's death for all it took down)."""
    return "; ".join(sorted({"their owner died" if "owner" in fate_text(f) else fate_text(f) or "dead"
                             for f in fates}))


def why_text(w: SuspectWhy) -> str:
    """One reason, as a sentence."""
    text = _text(w)
    if w.still:
        text = f"still: {text}"
    if w.controller_waits:
        text += f" (the controller waits on it in ray.get at {w.controller_at})"
    return text


def _text(w: SuspectWhy) -> str:  # one sentence per kind
    g, f, p = w.group, w.fate, w.peers
    died = f" ({ranks_text(w.timed_out)} timed out in it and died)" if w.timed_out else ""
    if w.kind in ("dead_waited", "dead_live_on") and f is not None and p is not None:
        cause = f" ({fate_text(f)})" if fate_text(f) else ""
        if w.kind == "dead_waited":
            return f"{f.state}{cause} while {ranks_text(p)} of {g} {_wait(p)} in {w.op}"
        return (f"{f.state}{cause} while {ranks_text(p)} of {g} live on (a collective with a dead rank fails on its "
                "peers, or they wait for it)")
    if w.kind == "died_first" and f is not None:
        then = (f"; {ranks_text(w.after_peers)} of {g} died after it ({_after(w.after)})"
                if w.after and w.after_peers else "")
        return f"{f.state} ({fate_text(f)}){then}"
    if w.kind == "timed_out" and f is not None:
        return f"{f.state} ({fate_text(f)}); no live rank of {g} is seen outside {w.op}"
    if w.kind == "mismatch" and p is not None:
        return (f"collective mismatch: waits in {w.op} while {ranks_text(p)} of {g} {_wait(p)} in "
                f"{' / '.join(w.ops)}{moved_text(w.stuck)}")
    if w.kind == "not_in" and p is not None and w.where is not None:
        never = (f"; NCCL: it never reached collective #{w.seq} (its last enqueued work is #{w.enqueued})"
                 if w.seq is not None else "")
        return f"not in {w.op} with {ranks_text(p)} of {g}{died}: {where_text(w.where)}{moved_text(w.stuck)}{never}"
    if w.kind == "not_seen" and p is not None and w.where is not None:
        return f"not seen in {w.op} with {ranks_text(p)} of {g}{died}: {where_text(w.where)}"
    if w.kind == "peers_failed" and p is not None and w.where is not None:
        ago = f" {duration(w.ago_s)} ago" if w.ago_s is not None else ""
        err = f" ({w.text})" if w.text else ""
        return (f"{ranks_text(p)} of {g} failed in {w.op}{ago} waiting for it{err}; never in the collective, "
                f"{where_text(w.where)}{moved_text(w.stuck)}")
    if w.kind == "controller" and p is not None and w.where is not None:
        return (f"the controller waits in ray.get ({w.frame}) and {ranks_text(p)} of {g} finished; "
                f"{where_text(w.where)}{moved_text(w.stuck)}")
    if w.kind == "tp" and p is not None and w.where is not None:
        tps = compact_ints(p.ranks)
        who = f"TP{tps}" if tps else f"{p.count} workers"
        moved = "; its stack did not move" if w.stuck else ""
        return (f"{w.process} is not in {' / '.join(w.ops)} with {who} of {w.owner} (pid {w.pid}'s workers): "
                f"{where_text(w.where)}{moved}")
    if w.kind == "chain_end" and w.chain is not None:
        return f"end of the wait chain {chain_text(w.chain)}"
    if w.kind == "not_placed" and w.pending is not None:
        pg = not_placed(w.pending, True)
        if w.role is None:
            return pg
        return (f"the {w.role} waits in {w.op or 'ray.get'} ({w.frame or '?'}) on workers that do not exist yet: "
                f"{pg}")
    if w.kind == "ras" and w.finding is not None:
        return finding_text(w.finding)
    if w.kind == "oom" and w.oom is not None:
        waits = f"; {ranks_text(p)} of {g} {_wait(p)} for it in {w.op}" if p is not None and w.op else ""
        return f"{verdict_reason(w.oom)}{waits}"
    return w.text or w.kind  # said
