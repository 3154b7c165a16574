"""Wait chains in words: a hop, why a chain ends where it does, a whole chain on one line."""

from __future__ import annotations

from verltop.analysis.merge import label_title
from verltop.model import Chain, ChainEnd, ChainLink, EndWhy
from verltop.text.pending import not_placed


def hop_text(link: ChainLink, first: bool = False) -> str:
    """One hop as people read it: ``driver (pid 5)``, ``agent_loop_worker_0 generate_sequences``,
    ``VLLM::EngineCore_DP0``, ``python … (pid 7)`` for a child without a title of its own."""
    if link.actor_id is None:
        return f"driver (pid {link.pid})"
    who = link.actor_name or link.actor_id[:8]
    task = link.task or ""
    if is_process_title(task) and not first:
        return task if "::" in task else f"{label_title(task)} (pid {link.pid})"
    method = task.rsplit(".", 1)[-1]
    return f"{who} {method}".strip()


def is_process_title(task: str) -> bool:
    """A child's title, not a Ray task name (``Class.method``)."""
    return "::" in task or " " in task or "/" in task


def moved_text(stuck: bool | None) -> str:
    """Whether the stack moved between samples, as a clause to append (nothing when not known)."""
    return "; its stack did not move" if stuck else "; its stack moves (slow, not hung)" if stuck is False else ""


def why_text(w: EndWhy) -> str:
    """Why the chain stops at this process, as a sentence."""
    at = f"({w.what} at {w.frame})"
    if w.kind == "dead":
        d = f" ({w.death.kind}: {w.death.detail})" if w.death and w.death.detail else ""
        return f"{w.state}{d}"
    if w.kind == "unreadable":
        return f"its stack could not be read: {w.error}"
    if w.kind == "own_code":
        return f"in its own code at {w.frame}{moved_text(w.stuck)}" if w.frame else f"in its own code{moved_text(w.stuck)}"
    if w.kind == "http":
        return f"waits on an HTTP call {at}: the server at the other end{moved_text(w.stuck)}"
    if w.kind == "children":
        return f"waits on its child processes {at}, none of which was dumped or is at work"
    if w.kind == "zmq":
        return f"waits on another process over zmq {at}{moved_text(w.stuck)}"
    if w.kind == "not_dumped":
        return f"waits in {w.what} at {w.frame} on tasks that were not dumped"
    if w.kind == "peers":
        return f"waits in {w.what} at {w.frame} with its peers; none of them is outside it"
    if w.kind == "not_placed" and w.pending is not None:
        return (f"waits in {w.what or 'ray.get'} at {w.frame or '?'} on workers that do not exist yet: "
                f"{not_placed(w.pending, False)}")
    if w.kind == "said":
        return w.text or ""
    return "its stack is idle: an asyncio actor awaiting something verltop cannot see, or nothing"


def end_text(e: ChainEnd) -> str:
    """Why a chain ends at ``e``, as a sentence."""
    return why_text(e.why)


def chain_text(c: Chain) -> str:
    """``TaskRunner.run → agent_loop_worker_0 generate_sequences → … → VLLM::Worker_TP1: in its own code at …``"""
    return " → ".join(hop_text(lk, i == 0) for i, lk in enumerate(c.path)) + f": {end_text(c.ends_in)}"
