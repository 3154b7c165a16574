"""The node answers read without what verltop never uses: the all-node summary without each raylet's core-worker
stats, a node's detail without its actors. Both are most of their answer's bytes; a cut that does not give back
an answer of the expected shape falls back to the whole parse (and its errors)."""

from __future__ import annotations

import re
from typing import Any

from verltop.model import Node
from verltop.sources.parse import (
    FAST_FROM_BYTES,
    ParseError,
    loads,
    node_detail,
    node_stats,
    nodes_summary,
    streamed,
)

# Ray 2.60's raylet stats begin with the node's core workers, then their count (GetNodeStatsReply's fields in
# order, MessageToDict); quotes inside JSON strings are escaped, so these match only the structure
_CORE_START = re.compile(rb'"coreWorkersStats"\s*:\s*\[')
_CORE_END = re.compile(rb'\]\s*,\s*"numWorkers"\s*:')


def without_core_workers(body: bytes) -> tuple[bytes, int]:
    """``body`` with every ``coreWorkersStats`` list emptied, and how many were; ``(body, 0)`` where one is not
    followed by its count (the end found would be another node's: the nodes between would be lost)."""
    parts: list[bytes] = []
    pos = n = 0
    m = _CORE_START.search(body)
    while m is not None:
        e = _CORE_END.search(body, m.end())
        nxt = _CORE_START.search(body, m.end())
        if e is None or (nxt is not None and nxt.start() < e.start()):
            return body, 0
        parts += (body[pos:m.end()], b"]")
        pos = e.start() + 1
        n += 1
        m = nxt
    if not n:
        return body, 0
    parts.append(body[pos:])
    return b"".join(parts), n


def _read_nodes(body: bytes, now: float | None) -> list[Node] | None:
    """The summary's nodes, read one at a time (``jsonstream``: a whole parse is a fifth faster and holds ten
    times the memory for a moment); None for an answer of another shape."""
    out: list[Node] = []

    def take(d: Any) -> None:
        if (node := node_stats(d, now)) is not None:
            out.append(node)

    return out if streamed(body, ("data", "summary"), take) is not None else None


def nodes_summary_bytes(body: bytes, now: float | None = None) -> list[Node]:
    """``nodes_summary`` of the answer as sent, read a node at a time, each raylet's ``coreWorkersStats``
    (per-worker counters, never used: two thirds of the bytes at 8 workers a node) cut out first. Where the cut
    does not parse the whole answer is read; one of another shape is parsed whole, for its errors."""
    cut, n = without_core_workers(body)
    if n and (nodes := _read_nodes(cut, now)) is not None:
        return nodes
    nodes = _read_nodes(body, now)
    return nodes if nodes is not None else nodes_summary(loads(body), now)


_ACTORS_KEY = b'"actors":'
_NO_ACTORS = b'"actors": {}}}}'  # the node's actors, empty, and the detail, data and envelope closed


def node_detail_bytes(body: bytes, now: float | None = None) -> Node | None:
    """``node_detail`` of the answer as sent, without parsing its ``actors``: two thirds of the bytes at 80
    actors a node, none of it used (the actor list says the same). Ray adds them last to the node's dict
    (``DataOrganizer.get_node_info``) and the envelope ends with ``data``, so the answer is cut at the last
    ``"actors":`` and closed; an answer of another shape (the cut does not parse, or lacks the workers) is
    parsed whole, as is one whose actors are few (the cut would cost more than it saves)."""
    cut = body.rfind(_ACTORS_KEY)
    if cut > 0 and len(body) - cut >= FAST_FROM_BYTES and body.rstrip().endswith(b"}}}"):
        try:
            doc = loads(body[:cut] + _NO_ACTORS)
        except ParseError:
            doc = None
        detail = doc.get("data") if isinstance(doc, dict) else None
        detail = detail.get("detail") if isinstance(detail, dict) else None
        if isinstance(detail, dict) and "workers" in detail and "raylet" in detail:
            return node_detail(doc, now)
    return node_detail(loads(body), now)
