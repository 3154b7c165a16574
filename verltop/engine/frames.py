"""Snapshots as recording frames: a keyframe holds a whole snapshot, a delta only what changed since the
previous snapshot (per actor and per node, field by field).

Between two polls of a 1,000-GPU job most of a snapshot is unchanged, except numbers that move with the
clock alone: task ages, a stall's age and ratio, how long ago the peers finished. Those are stored as the
instant they count from, so an unchanged stall costs nothing in a delta:

- ``ActorRow.task_running_s`` is left out when ``task_start_s`` is known (it is ``taken_at - task_start_s``,
  exactly as ``analysis.snapshot_build`` computes it);
- a stall's ``running_s`` equal to its row's task age becomes ``"@run": 1``, its ``ratio`` (``running_s /
  median_s``) ``"@ratio": 1``, its ``peers_done_s`` the instant ``"@peers_at"`` (to the millisecond).

Ids are the costliest bytes (random hex compresses poorly), so a delta names a changed row by its position
in the row order after the frame, and a task id that ends with its actor's id (as Ray's actor task ids
do) is stored as its own first part followed by ``+``.

Frame JSON (documented in docs/recording.md):
keyframe ``{"t", "s": {scalars}, "src": [sources], "n": [nodes], "a": [actors]}``;
delta ``{"t", "s": {changed scalars}, "src"?: [sources], "n"?: changes, "a"?: changes, "tr"?: verl's metrics
added by a step (``frames_training``), "mem"?: the memory view's changed rows (``frames_memory``)}`` where changes are
``{"set": [[position, {field: value}]...], "new": [whole rows], "del": [ids], "ord"?: [ids in order]}``.
"""

from __future__ import annotations

import typing
from typing import Any

from verltop.codec import decoder, fields_of, to_data
from verltop.engine.frames_memory import apply_memory, memory_delta
from verltop.engine.frames_training import apply_training, training_delta
from verltop.model import ActorRow, Node, Snapshot, SourceStatus, Stall

# every other field of a snapshot (phase, progress, orphans, and what later versions add) goes in "s"
SCALARS = tuple(f for f in fields_of(Snapshot) if f not in ("taken_at", "nodes", "actors", "sources"))
_SNAP_HINTS = typing.get_type_hints(Snapshot)
_dec_scalar = {f: decoder(_SNAP_HINTS[f]) for f in SCALARS}
ACTOR_FIELDS = fields_of(ActorRow)
NODE_FIELDS = fields_of(Node)
_ACTOR_PLAIN = tuple(f for f in ACTOR_FIELDS if f not in ("actor_id", "task_running_s", "stalls"))
_NODE_PLAIN = tuple(f for f in NODE_FIELDS if f != "node_id")
DERIVE = "@start"  # task_running_s: "taken_at - task_start_s" (a delta's way of dropping an explicit age)

_dec_actor = decoder(ActorRow)
_dec_node = decoder(Node)
_dec_sources = decoder(tuple[SourceStatus, ...])
_dec_stall = decoder(Stall)


# ---------------------------------------------------------------- relative times


def stall_data(st: Stall, row_running_s: float | None, t: float) -> dict[str, Any]:
    d = to_data(st)
    if st.running_s is not None and st.running_s == row_running_s:
        del d["running_s"]
        d["@run"] = 1
        if st.ratio is not None and st.median_s and st.ratio == st.running_s / st.median_s:
            del d["ratio"]
            d["@ratio"] = 1
    if st.peers_done_s is not None:
        del d["peers_done_s"]
        d["@peers_at"] = round(t - st.peers_done_s, 3)
    return d


def stall_from(d: dict[str, Any], row_running_s: float | None, t: float) -> Stall:
    d = dict(d)
    if d.pop("@run", None):
        d["running_s"] = row_running_s
        if d.pop("@ratio", None) and row_running_s is not None and d.get("median_s"):
            d["ratio"] = row_running_s / d["median_s"]
    at = d.pop("@peers_at", None)
    if at is not None:
        d["peers_done_s"] = max(0.0, t - at)
    return _dec_stall(d)


def task_id_data(task_id: str | None, actor_id: str) -> str | None:
    if task_id and len(task_id) > len(actor_id) and task_id.endswith(actor_id):
        return task_id[: -len(actor_id)] + "+"
    return task_id


def actor_data(a: ActorRow, t: float) -> dict[str, Any]:
    """One row, whole, with clock-driven numbers as instants."""
    d = to_data(a)
    if a.task_id is not None:
        d["task_id"] = task_id_data(a.task_id, a.actor_id)
    if _derivable(a, t):
        d.pop("task_running_s", None)
    if a.stalls:
        d["stalls"] = [stall_data(s, a.task_running_s, t) for s in a.stalls]
    return d


def actor_from(d: dict[str, Any], t: float) -> ActorRow:
    d = dict(d)
    tid = d.get("task_id")
    if isinstance(tid, str) and tid.endswith("+"):
        d["task_id"] = tid[:-1] + d["actor_id"]
    start = d.get("task_start_s")
    if d.get("task_running_s", DERIVE) == DERIVE:
        d["task_running_s"] = max(0.0, t - start) if start is not None else None
    stalls = d.pop("stalls", None)
    a = _dec_actor(d)
    if stalls:
        a.stalls = tuple(stall_from(s, a.task_running_s, t) for s in stalls)
    return a


def _derivable(a: ActorRow, t: float) -> bool:
    return a.task_start_s is not None and a.task_running_s == max(0.0, t - a.task_start_s)


# ---------------------------------------------------------------- encoding


def _scalars(s: Snapshot) -> dict[str, Any]:
    return {k: to_data(getattr(s, k)) for k in SCALARS}


def keyframe(s: Snapshot) -> dict[str, Any]:
    t = s.taken_at
    return {"t": t, "s": _scalars(s), "src": to_data(s.sources), "n": [to_data(n) for n in s.nodes],
            "a": [actor_data(a, t) for a in s.actors]}


class DeltaEncoder:
    """Remembers the last snapshot written and encodes the next one against it."""

    def __init__(self) -> None:
        self.prev: Snapshot | None = None
        self._actors: dict[str, ActorRow] = {}
        self._stalls: dict[str, list] = {}  # actor id -> its stalls as stored (instants, not ages)
        self._nodes: dict[str, Node] = {}

    def reset(self) -> None:
        self.prev = None

    def encode(self, s: Snapshot, key: bool) -> tuple[bool, dict[str, Any]]:
        """``(is_keyframe, frame)``; a keyframe when asked or when there is nothing to diff against."""
        t = s.taken_at
        if key or self.prev is None:
            frame = keyframe(s)
            self._stalls = {a.actor_id: st for a, st in zip(s.actors, (r.get("stalls") for r in frame["a"]),
                                                            strict=True) if st}
            self._remember(s)
            return True, frame
        prev = self.prev
        out: dict[str, Any] = {"t": t}
        sc = {k: to_data(getattr(s, k)) for k in SCALARS
              if k not in ("training", "memory") and getattr(s, k) != getattr(prev, k)}
        if s.memory != prev.memory:  # memory by phase: only the rows that changed, when that says it all
            md = memory_delta(prev.memory, s.memory)
            if md is None:
                sc["memory"] = to_data(s.memory)
            else:
                out["mem"] = md
        if s.training != prev.training:  # verl's metrics: only what a new step added, when that says it all
            tr = training_delta(prev.training, s.training)
            if tr is None:
                sc["training"] = to_data(s.training)
            else:
                out["tr"] = tr
        if sc:
            out["s"] = sc
        if s.sources != prev.sources:
            out["src"] = to_data(s.sources)
        nd = self._diff_nodes(s)
        if nd:
            out["n"] = nd
        ad = self._diff_actors(s, t)
        if ad:
            out["a"] = ad
        self._remember(s)
        return False, out

    def _remember(self, s: Snapshot) -> None:
        self.prev = s
        self._actors = {a.actor_id: a for a in s.actors}
        self._nodes = {n.node_id: n for n in s.nodes}

    def _diff_nodes(self, s: Snapshot) -> dict[str, Any]:
        old = self._nodes
        out: dict[str, Any] = {}
        changed: list[list] = []
        new = []
        for i, n in enumerate(s.nodes):
            p = old.get(n.node_id)
            if p is None:
                new.append(to_data(n))
            elif p is not n and p != n:
                changed.append([i, {f: to_data(getattr(n, f)) for f in _NODE_PLAIN if getattr(n, f) != getattr(p, f)}])
        ids = [n.node_id for n in s.nodes]
        gone = [k for k in old if k not in set(ids)] if len(old) != len(ids) or new else []
        _changes(out, changed, new, gone, ids if ids != [n.node_id for n in self.prev.nodes] else None)
        return out

    def _diff_actors(self, s: Snapshot, t: float) -> dict[str, Any]:
        old = self._actors
        stalls_now: dict[str, list] = {}
        changed: list[list] = []
        new = []
        for i, a in enumerate(s.actors):
            aid = a.actor_id
            p = old.get(aid)
            if p is None:
                d = actor_data(a, t)
                new.append(d)
                if "stalls" in d:
                    stalls_now[aid] = d["stalls"]
                continue
            ch = {f: to_data(getattr(a, f)) for f in _ACTOR_PLAIN if getattr(a, f) != getattr(p, f)}
            if "task_id" in ch:
                ch["task_id"] = task_id_data(a.task_id, aid)
            if _derivable(a, t):
                if not _derivable(p, self.prev.taken_at):
                    ch["task_running_s"] = DERIVE
            elif a.task_running_s != p.task_running_s or _derivable(p, self.prev.taken_at):
                ch["task_running_s"] = a.task_running_s
            st = [stall_data(x, a.task_running_s, t) for x in a.stalls] if a.stalls else None
            if st:
                stalls_now[aid] = st
            if st != self._stalls.get(aid):
                ch["stalls"] = st or []
            if ch:
                changed.append([i, ch])
        self._stalls = stalls_now
        ids = [a.actor_id for a in s.actors]
        prev_ids = [a.actor_id for a in self.prev.actors] if self.prev else []
        gone = [k for k in old if k not in set(ids)] if len(old) != len(ids) or new else []
        out: dict[str, Any] = {}
        _changes(out, changed, new, gone, ids if ids != prev_ids else None)
        return out


def _changes(out: dict, changed: list, new: list, gone: list, order: list | None) -> None:
    if changed:
        out["set"] = changed
    if new:
        out["new"] = new
    if gone:
        out["del"] = gone
    if order is not None:
        out["ord"] = order


# ---------------------------------------------------------------- decoding


class SnapshotState:
    """A decoder's running state: the last snapshot's rows in their stored form. ``apply`` each frame in
    order (a keyframe resets it); ``snapshot()`` builds the model objects (only when one is shown)."""

    def __init__(self) -> None:
        self.t: float | None = None
        self.scalars: dict[str, Any] = {}
        self.sources: list = []
        self.nodes: dict[str, dict] = {}
        self.node_order: list[str] = []
        self.actors: dict[str, dict] = {}
        self.actor_order: list[str] = []
        self.ready = False

    def apply(self, key: bool, f: dict[str, Any]) -> None:
        if key:
            self.scalars = dict(f.get("s") or {})
            self.sources = f.get("src") or []
            self.nodes = {n["node_id"]: n for n in f.get("n") or []}
            self.node_order = list(self.nodes)
            self.actors = {a["actor_id"]: a for a in f.get("a") or []}
            self.actor_order = list(self.actors)
            self.ready = True
        elif not self.ready:
            return  # a delta without its keyframe (the start of a damaged file): wait for the next keyframe
        else:
            self.scalars.update(f.get("s") or {})
            if "tr" in f:
                self.scalars["training"] = apply_training(self.scalars.get("training"), f["tr"])
            if "mem" in f:
                self.scalars["memory"] = apply_memory(self.scalars.get("memory"), f["mem"])
            if "src" in f:
                self.sources = f["src"]
            self.node_order = _apply(self.nodes, self.node_order, f.get("n"), "node_id")
            self.actor_order = _apply(self.actors, self.actor_order, f.get("a"), "actor_id")
        self.t = float(f["t"])

    def snapshot(self) -> Snapshot:
        t = self.t if self.t is not None else 0.0
        sc = {k: _dec_scalar[k](v) for k, v in self.scalars.items() if k in _dec_scalar}
        sc.setdefault("address", "")
        sc.setdefault("phase", None)
        return Snapshot(
            taken_at=t,
            nodes=tuple(_dec_node(self.nodes[k]) for k in self.node_order if k in self.nodes),
            actors=tuple(actor_from(self.actors[k], t) for k in self.actor_order if k in self.actors),
            sources=_dec_sources(self.sources) or (),
            **sc,
        )


def _apply(rows: dict[str, dict], order: list[str], ch: dict[str, Any] | None, key: str) -> list[str]:
    """One delta's changes to a table of stored rows; returns the order after it (``set`` positions refer
    to it)."""
    if not ch:
        return order
    for row in ch.get("new") or []:
        rows[row[key]] = row
    for k in ch.get("del") or []:
        rows.pop(k, None)
    if "ord" in ch:
        order = list(ch["ord"])
    elif ch.get("new") or ch.get("del"):
        order = [k for k in order if k in rows] + [r[key] for r in ch.get("new") or [] if r[key] not in order]
    for i, upd in ch.get("set") or ():
        row = rows.get(order[i]) if 0 <= i < len(order) else None
        if row is not None:
            row = dict(row)
            row.update(upd)
            rows[row[key]] = row
    return order
