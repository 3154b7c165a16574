"""A delta frame's form of the memory view (``Snapshot.memory``): between two snapshots only the running
step's rows change, so a delta stores ``"mem": {"by_phase" | "headroom" | "growth": {"set": [rows], "del":
[keys]}, and whole "engine_holds", "oom", "verl_peaks", "note" when they changed}`` instead of the whole view
(8,000 rows on a large job). A decoder applies the rows by key and sorts them back into the view's order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verltop.analysis.memory_reads import growth_order, headroom_order, phase_order
from verltop.codec import to_data
from verltop.model import MemoryView


def _bp(d: dict) -> tuple:
    return (d.get("actor_id"), d.get("step"), d.get("phase"))


def _gr(d: dict) -> tuple:
    return (d.get("actor_id"), d.get("phase"), d.get("kind"))


def _hr(d: dict) -> tuple:
    return (d.get("actor_id"), d.get("kind"))


_TABLES: tuple[tuple[str, Callable[[Any], tuple], Callable[[dict], tuple], Callable[[dict], tuple]], ...] = (
    ("by_phase", lambda x: (x.actor_id, x.step, x.phase), _bp,
     lambda d: phase_order(d.get("step", 0), d.get("worker_group"), d.get("rank"), d.get("actor_id", ""),
                           d.get("phase", ""))),
    ("growth", lambda x: (x.actor_id, x.phase, x.kind), _gr,
     lambda d: growth_order(d.get("bytes_per_step", 0.0), d.get("actor_id", ""), d.get("phase", ""), d.get("kind", ""))),
    ("headroom", lambda x: (x.actor_id, x.kind), _hr,
     lambda d: headroom_order(d.get("worker_group"), d.get("rank"), d.get("actor_id", ""), d.get("kind", ""))),
)
_WHOLE = ("engine_holds", "oom", "verl_peaks", "note")


def memory_delta(prev: MemoryView | None, cur: MemoryView | None) -> dict[str, Any] | None:
    """The ``"mem"`` of a delta from ``prev`` to ``cur``, or None when ``cur`` must be stored whole."""
    if prev is None or cur is None:
        return None
    out: dict[str, Any] = {}
    for name, key, _, _ in _TABLES:
        old = {key(x): x for x in getattr(prev, name)}
        now = getattr(cur, name)
        keys = set()
        changed = []
        for x in now:
            k = key(x)
            keys.add(k)
            p = old.get(k)
            if p is None or (p is not x and p != x):
                changed.append(to_data(x))
        gone = [list(k) for k in old if k not in keys]
        if changed or gone:
            out[name] = {"set": changed, "del": gone}
    for name in _WHOLE:
        if getattr(cur, name) != getattr(prev, name):
            out[name] = to_data(getattr(cur, name))
    return out


def apply_memory(stored: dict[str, Any] | None, md: dict[str, Any]) -> dict[str, Any] | None:
    """The stored form of the memory view (``to_data``) after a delta's ``"mem"``."""
    if stored is None:
        return None
    out = dict(stored)
    for name, _, key, order in _TABLES:
        ch = md.get(name)
        if not ch:
            continue
        rows = {key(d): d for d in stored.get(name) or ()}
        for k in ch.get("del") or ():
            rows.pop(tuple(k), None)
        for d in ch.get("set") or ():
            rows[key(d)] = d
        out[name] = sorted(rows.values(), key=order)
    for name in _WHOLE:
        if name in md:
            out[name] = md[name]
    return out
