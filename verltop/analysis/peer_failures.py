"""Peers whose collective raised: with gloo (and NCCL with blocking wait or a process-group timeout) the ranks
waiting for a straggler give up after the timeout; their calls FAIL ("Timed out waiting 60000ms for recv
operation to complete") and their processes live on, while the straggler is still in its own code. Such a
failure is evidence against the rank that never arrived, not the end of the hang. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from verltop.model import RawTask

# what a collective says when it gave up waiting for a peer, or was torn down while it waited
_COLLECTIVE_ERROR = re.compile(
    r"timed out|timeout|abort|connection (closed|reset) by peer|DistBackendError|NCCL (error|communicator)|"
    r"watchdog caught collective|gloo|ProcessGroup", re.I)


def collective_error(text: str | None) -> bool:
    """Does a task's error say its collective timed out or was aborted?"""
    return bool(text) and bool(_COLLECTIVE_ERROR.search(text or ""))


@dataclass(frozen=True, slots=True)
class PeerFailure:
    """One actor's latest call that failed in a collective."""

    actor_id: str
    task_id: str
    method: str  # the call (``actor_rollout_update_actor``)
    end_s: float | None
    error: str


def peer_failures(failed: Iterable[RawTask]) -> dict[str, PeerFailure]:
    """Per actor, its latest FAILED call whose error is a collective's timeout or abort."""
    out: dict[str, PeerFailure] = {}
    for t in failed:
        if t.state != "FAILED" or not t.actor_id or not collective_error(t.error):
            continue
        end = t.end_time_ms / 1000 if t.end_time_ms else None
        old = out.get(t.actor_id)
        if old is not None and (old.end_s or 0) >= (end or 0):
            continue
        out[t.actor_id] = PeerFailure(t.actor_id, t.task_id, t.name.rsplit(".", 1)[-1], end, t.error or "")
    return out
