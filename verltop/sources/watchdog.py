"""NCCL watchdog lines in a worker's stderr: read the tails through the dashboard and parse them into what
each rank last did.

After a collective times out, processes stay alive and Ray still says ALIVE/RUNNING: the watchdog's
lines in the worker's error log are the only place the collective is named without Flight Recorder.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from verltop.convert import to_int
from verltop.sources.dashboard import fetch_log_tail
from verltop.sources.http import DashboardClient

if TYPE_CHECKING:  # the stack model loads with a dump, not with the engine that reads TAIL_LINES
    from verltop.model import CollectiveInfo

TAIL_LINES = 400

_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=([A-Z_]+)"
    r"(?:, NumelIn=(\d+))?(?:, NumelOut=(\d+))?(?:, Timeout\(ms\)=(\d+))?"
)
_PG = re.compile(r"\[PG ID (\S+) PG GUID \S*?\(?([\w:.-]*)\)? Rank (\d+)\]")
_LAST = re.compile(r"[Ll]ast enqueued (?:NCCL )?work: (-?\d+), last completed (?:NCCL )?work: (-?\d+)")
_RANK = re.compile(r"\[(?:rank|Rank )(\d+)\]")

# OpType as the watchdog prints it → torch.distributed function name
OP_NAMES = {
    "ALLREDUCE": "all_reduce",
    "ALLREDUCE_COALESCED": "all_reduce_coalesced",
    "ALLGATHER": "all_gather",
    "_ALLGATHER_BASE": "all_gather_into_tensor",
    "ALLGATHER_COALESCED": "all_gather_coalesced",
    "REDUCE_SCATTER": "reduce_scatter",
    "_REDUCE_SCATTER_BASE": "reduce_scatter_tensor",
    "REDUCE_SCATTER_TENSOR_COALESCED": "reduce_scatter_tensor",
    "BROADCAST": "broadcast",
    "REDUCE": "reduce",
    "GATHER": "gather",
    "SCATTER": "scatter",
    "ALLTOALL": "all_to_all",
    "ALLTOALL_BASE": "all_to_all_single",
    "BARRIER": "barrier",
    "SEND": "send",
    "RECV": "recv",
    "RECVANYSOURCE": "recv",
    "COALESCED": "coalesced",
}


def op_name(op_type: str) -> str:
    return OP_NAMES.get(op_type.upper(), op_type.lower())


_num = to_int


def parse_watchdog(text: str) -> CollectiveInfo | None:
    """The latest watchdog facts in one log tail, or None when there are none."""
    if not text or ("NCCL" not in text and "WorkNCCL" not in text):
        return None
    op = seq = numel = timeout = enq = comp = None
    pg = None
    found = False
    for line in text.splitlines():
        m = _TIMEOUT.search(line)
        if m:
            found = True
            seq = _num(m.group(1))
            op = op_name(m.group(2))
            numel = _num(m.group(3))
            timeout = _num(m.group(5))
        m2 = _LAST.search(line)
        if m2:
            found = True
            enq, comp = _num(m2.group(1)), _num(m2.group(2))
            p = _PG.search(line)
            if p:
                pg = p.group(2) or p.group(1)
    if not found:
        return None
    from verltop.model import CollectiveInfo

    return CollectiveInfo(source="watchdog_log", op=op, seq=seq, last_enqueued=enq, last_completed=comp,
                          numel=numel, pg=pg, timeout_ms=timeout)


async def fetch_watchdog(client: DashboardClient, actor_ids: list[str], timeout_s: float = 5.0,
                         lines: int = TAIL_LINES) -> dict[str, CollectiveInfo]:
    """actor_id → the watchdog facts in the tail of its stderr, for the actors whose logs have any."""
    sem = asyncio.Semaphore(16)

    async def one(aid: str) -> tuple[str, CollectiveInfo | None]:
        async with sem:
            r = await fetch_log_tail(client, aid, "err", lines, timeout_s)
        return aid, parse_watchdog(r.value or "") if r.ok else None

    return {aid: info for aid, info in await asyncio.gather(*(one(a) for a in actor_ids)) if info is not None}
