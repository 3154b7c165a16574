"""py-spy output → ThreadStacks. Both ``dump --json`` (local) and the text format (the dashboard's
``/worker/traceback`` returns py-spy's own text). Total functions: bad input gives an error string.
"""

from __future__ import annotations

import json
import re
from typing import Any

from verltop.model import Frame, ThreadStack

_THREAD = re.compile(r'^Thread (0x[0-9a-fA-F]+|\d+) \(([a-z+]+)\)(?:: "(.*)")?\s*$')
_FRAME = re.compile(r"^\s{4}(\S.*?) \((.*?)(?::(\d+))?\)\s*$")


def parse_json(text: str) -> tuple[tuple[ThreadStack, ...], str | None]:
    """``py-spy dump --json`` → threads (frames innermost first)."""
    try:
        doc = json.loads(text)
    except (ValueError, TypeError):
        return (), "py-spy printed something that is not JSON"
    if not isinstance(doc, list):
        return (), "py-spy JSON is not a list of threads"
    out = []
    for t in doc:
        if not isinstance(t, dict):
            continue
        frames = []
        for f in t.get("frames") or []:
            if not isinstance(f, dict):
                continue
            name = f.get("name")
            fn = f.get("filename") or f.get("short_filename") or "?"
            line = f.get("line")
            frames.append(
                Frame(
                    func=str(name) if name is not None else "?",
                    file=str(fn),
                    line=line if isinstance(line, int) and not isinstance(line, bool) and line > 0 else None,
                    module=str(f["module"]) if isinstance(f.get("module"), str) else None,
                )
            )
        tid = t.get("thread_id")
        out.append(
            ThreadStack(
                thread_id=tid if isinstance(tid, int) and not isinstance(tid, bool) else _int(tid),
                name=str(t["thread_name"]) if isinstance(t.get("thread_name"), str) else None,
                active=_bool(t.get("active")),
                owns_gil=_bool(t.get("owns_gil")),
                frames=tuple(frames),
            )
        )
    return tuple(out), None


def parse_text(text: str) -> tuple[tuple[ThreadStack, ...], str | None]:
    """py-spy's text dump (as the dashboard returns it) → threads."""
    if not isinstance(text, str):
        return (), "py-spy output is not text"
    threads: list[ThreadStack] = []
    cur: dict[str, Any] | None = None
    frames: list[Frame] = []

    def flush() -> None:
        if cur is not None:
            threads.append(ThreadStack(cur["tid"], cur["name"], cur["active"], None, tuple(frames)))

    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            flush()
            state = m.group(2)
            cur = {"tid": _int(m.group(1)), "name": m.group(3), "active": state.startswith("active")}
            frames = []
            continue
        if cur is None:
            continue
        fm = _FRAME.match(line)
        if fm:
            ln = fm.group(3)
            frames.append(Frame(func=fm.group(1), file=fm.group(2), line=int(ln) if ln else None))
    flush()
    if not threads:
        first = " ".join(text.strip().split())[:200]
        return (), f"no threads in py-spy output: {first or 'empty'}"
    return tuple(threads), None


def _int(v: Any) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            return int(v, 16) if v.lower().startswith("0x") else int(v)
        except ValueError:
            return None
    return None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None
