"""Merged stacks as text: the prefix tree, a line per frame with its rank set."""

from __future__ import annotations

from verltop.analysis.merge import TreeNode, compact_labels, render_tree


def tree_text(root: TreeNode, max_lines: int = 400) -> str:
    """``[g:0-3] (4) dp_actor.py:312 update_policy``, indented by depth (at most ``max_lines`` lines)."""
    lines = []
    for depth, text, ranks in render_tree(root, max_lines):
        lines.append(f"{'  ' * depth}[{compact_labels(ranks)}] ({len(ranks)}) {text}")
    return "\n".join(lines)
