"""A stall's sentence (under the table, in details, ``stall_reason`` in JSON) and its few words (the table's
STALLED column), made from the numbers the stall rules found."""

from __future__ import annotations

from verltop.model import ActorRow, Stall
from verltop.text.cells import duration, plural, ratio
from verltop.text.pending import WAIT_TAG, actor_wait, resources


def stall_reason(st: Stall) -> str:
    """The full sentence for one stall (under the table, in details, ``stall_reason`` in JSON)."""
    r = st.rule
    if r == "dead":
        after = f" after {plural(st.restarts, 'restart')}" if st.restarts else ""
        return f"actor {st.state or 'DEAD'}{after}" + (f": {st.cause}" if st.cause else "")
    if r == "cannot_start":
        return "cannot start" + (f": {st.cause}" if st.cause else "")
    if r == "restarting":
        now = "restarting now; " if st.state == "RESTARTING" else ""
        return (f"{now}restarted {plural(st.restarts or 0, 'time')}" +
                (f"; last cause: {st.cause}" if st.cause else "; Ray keeps no cause until it gives up"))
    if r == "pending":
        return f"pending {duration(st.waiting_s)}: " + actor_wait(st.waits_for, stall_target(st), st.scheduling_state)
    if r == "peers" and st.state == "failed":
        return (f"{plural(st.peers or 0, 'peer')} failed in {st.method or 'this method'} {duration(st.peers_done_s)} "
                f"ago waiting for it" + (f" ({st.cause})" if st.cause else ""))
    if r == "peers":
        return (f"{plural(st.peers or 0, 'peer')} finished {st.method or 'this method'} "
                f"{duration(st.peers_done_s)} ago")
    if r == "median":
        if st.median_s is not None and st.median_s < 0.05:
            return (f"running far longer than usual ({duration(st.running_s)}; it usually takes under 0.1s)")
        return (f"running {ratio(st.ratio)} longer than usual ({duration(st.running_s)} vs median "
                f"{duration(st.median_s)})")
    if r == "age":
        return f"running {duration(st.running_s)} (> {duration(st.limit_s)})"
    if r == "gpu_idle":
        return f"GPU idle for the whole task ({duration(st.running_s)})"
    if r == "gpu_spin":
        return "GPU 100 % without progress: likely waiting in an NCCL collective"
    if r == "ras":
        if st.state == "missing":
            return "NCCL RAS: its process does not answer (stopped, hung in the kernel or gone)"
        if st.state == "mismatch":
            return f"NCCL RAS: it issued {st.op} while its peers issued {st.cause}: different collectives"
        return (f"NCCL RAS: it enqueued {st.count} {st.op}, its peers {st.expected}: it never reached "
                f"{st.op} #{st.expected}")
    return r


def stall_tag(st: Stall) -> str:
    """A few words for the table's STALLED column; the sentence is under the table and in details."""
    r = st.rule
    if r == "dead":
        return (st.state or "DEAD") + (f" after {st.restarts} restarts" if st.restarts else "")
    if r == "cannot_start":  # the cause is the point: the cell's width cuts it, the line below has it all
        return f"cannot start: {st.cause}" if st.cause else "cannot start"
    if r == "restarting":
        return f"restarted {st.restarts or 0}×"
    if r == "pending":
        if st.waits_for == "resources":
            return "pending: infeasible" if st.scheduling_state == "INFEASIBLE" else "pending: no room"
        return "pending: " + WAIT_TAG.get(st.waits_for or "", "starting") + (
            f" {st.scheduling_state}" if st.waits_for == "placement_group" and st.scheduling_state else "")
    if r == "peers" and st.state == "failed":
        return f"peers failed {duration(st.peers_done_s)} ago"
    if r == "peers":
        return f"peers done {duration(st.peers_done_s)} ago"
    if r == "median":
        return "far over median" if st.median_s is not None and st.median_s < 0.05 else f"{ratio(st.ratio)} median"
    if r == "age":
        return f"> {duration(st.limit_s)}"
    if r == "gpu_idle":
        return "GPU idle"
    if r == "gpu_spin":
        return "GPU 100% no progress"
    if r == "ras":
        return {"missing": "RAS: not answering", "mismatch": "RAS: op mismatch"}.get(st.state or "",
                                                                                    f"RAS: behind in {st.op}")
    return r


def stall_reasons(a: ActorRow) -> str | None:
    """Every stall of an actor in one line (``None`` when it is not stalled)."""
    return "; ".join(stall_reason(s) for s in a.stalls) if a.stalls else None


def stall_target(st: Stall) -> str | None:
    """What a pending actor waits for: a placement group's name, or the resources it demands (``{CPU: 10}``)."""
    return resources(st.demand) if st.waits_for == "resources" and st.demand else st.target
