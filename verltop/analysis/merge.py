"""STAT-style merge: a prefix tree of stacks whose nodes carry rank sets, and the equivalence classes."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from verltop.analysis.collectives import py_frames
from verltop.analysis.rank_sets import compact_ints
from verltop.model import Frame, RankDump, StackGroup

_LABEL = re.compile(r"^(.*):(\d+)$")


def compact_labels(labels: Iterable[str], sep: str = " ") -> str:
    """``["g:0","g:1","g:2","ctl"]`` → ``g:0-2 ctl``: ranks of one group folded into ranges; a sentence
    passes ``sep=", "`` (``g:0-2, ctl``)."""
    by_group: dict[str, list[int]] = {}
    other: list[str] = []
    for lab in labels:
        m = _LABEL.match(lab)
        if m:
            by_group.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            other.append(lab)
    parts = [f"{g}:{compact_ints(rs)}" for g, rs in sorted(by_group.items())]
    return sep.join(parts + sorted(set(other)))


def label_title(title: str | None) -> str:
    """A child's title for labels: setproctitle's as it is (``VLLM::Worker_TP1``); a bare command line
    (``/usr/bin/python3 -c import sys; ...``) by its program's name (``python3 …``)."""
    if not title:
        return "?"
    if "::" in title or len(title) <= 32:
        return title
    first = title.split(" ", 1)[0].rsplit("/", 1)[-1]
    return f"{first} …"


def rank_label(r: RankDump) -> str:
    a = r.actor
    if r.is_driver:
        return "driver"
    if a.role == "controller":
        base = "controller"
    elif a.worker_group and a.rank is not None:
        base = f"{a.worker_group}:{a.rank}"
    else:
        base = a.actor_name or a.actor_id[:8]
    # a child process: "vllm_server_0_0/VLLM::Worker_TP1 (pid 4242)" (titles repeat across servers and forks)
    return f"{base}/{label_title(r.process)} (pid {a.pid})" if r.process is not None else base


def python_frames(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    return py_frames(frames)


@dataclass(slots=True)
class TreeNode:
    label: str
    ranks: set[str] = field(default_factory=set)
    children: dict[str, TreeNode] = field(default_factory=dict)


def build_tree(stacks: dict[str, tuple[Frame, ...]]) -> TreeNode:
    """Prefix tree, outermost frame first; every node knows which ranks passed through it."""
    root = TreeNode("")
    kids: dict[int, dict[Frame, TreeNode]] = {}  # children by frame (a tuple: hashed in C)
    for label, frames in stacks.items():
        root.ranks.add(label)
        node = root
        for f in reversed(python_frames(frames)):
            by_frame = kids.setdefault(id(node), {})
            child = by_frame.get(f)
            if child is None:
                key = f.short()
                child = node.children.get(key)
                if child is None:
                    child = node.children[key] = TreeNode(key)
                by_frame[f] = child
            child.ranks.add(label)
            node = child
    return root


def render_tree(root: TreeNode, max_lines: int = 400) -> list[tuple[int, str, frozenset[str]]]:
    """Lines ``(depth, text, ranks)``. Chains with one child and the same rank set are joined (STAT's
    "Join"), keeping their first and last frame, so a 40-frame Ray stack reads in a few lines."""
    out: list[tuple[int, str, frozenset[str]]] = []

    def walk(node: TreeNode, depth: int) -> None:
        for child in sorted(node.children.values(), key=lambda c: (-len(c.ranks), c.label)):
            if len(out) >= max_lines:
                return
            first = child
            skipped = 0
            while len(child.children) == 1:
                nxt = next(iter(child.children.values()))
                if nxt.ranks != child.ranks:
                    break
                child = nxt
                skipped += 1
            ranks = frozenset(child.ranks)
            if skipped:
                out.append((depth, f"{first.label}  … {skipped - 1} frame{'s' if skipped > 2 else ''} …" if skipped > 1 else first.label, ranks))
                out.append((depth, child.label, ranks))
            else:
                out.append((depth, child.label, ranks))
            walk(child, depth + 1)

    walk(root, 0)
    return out


def equivalence_classes(ranks: list[RankDump]) -> tuple[StackGroup, ...]:
    """Ranks with identical main-thread (Python) stacks, biggest class first."""
    classes: dict[tuple, list[RankDump]] = {}
    for r in ranks:
        if r.main is None:
            continue
        key = python_frames(r.main.frames)
        classes.setdefault(key, []).append(r)
    groups = []
    for members in classes.values():
        labels = tuple(sorted((rank_label(m) for m in members), key=_label_sort))
        frames = python_frames(members[0].main.frames) if members[0].main else ()
        groups.append(StackGroup(ranks=labels, blocked_on=members[0].blocked_on, frames=frames))
    groups.sort(key=lambda g: (-len(g.ranks), g.ranks))
    return tuple(groups)


def _label_sort(label: str) -> tuple:
    m = _LABEL.match(label)
    return (m.group(1), int(m.group(2))) if m else (label, -1)
