"""Enter on a rank in the stack screen: every thread of its last sample, and how its samples differ."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from verltop.analysis.collectives import is_native, is_wrapper
from verltop.model import RankDump
from verltop.text.cells import shorten
from verltop.ui import keymap
from verltop.ui.widgets.footer import Footer


def rank_stack_text(rd: RankDump, width: int = 160) -> Text:
    """A rank's facts and every thread of its last sample; a frame that does not fit ``width`` puts its
    ``(file:line)`` on a line of its own, and a function's name too long for a line keeps its end."""
    a = rd.actor
    t = Text()
    t.append(f"{a.worker_group or a.role}:{a.rank if a.rank is not None else '-'}  ", style="bold")
    t.append(f"{a.actor_name or a.actor_id}  pid {a.pid}  node {a.node_ip}  task {a.task or '-'}\n")
    if rd.process is not None:
        t.append(f"process {rd.process}  (a child of pid {rd.parent_pid}, under this actor)\n", style="cyan")
    if rd.death is not None:
        t.append(f"died: {rd.death.kind}: {rd.death.detail or '-'}\n", style="bold red")
    if rd.blocked_on:
        t.append(f"waits in {rd.blocked_on.op}", style="bold cyan")
        t.append(f" at {rd.blocked_on.frame}\n")
        if rd.blocked_on.evidence:
            t.append(f"native evidence: {', '.join(rd.blocked_on.evidence)}\n", style="grey70")
    if rd.collective:
        c = rd.collective
        known = [(k, v) for k, v in (("op", c.op), ("seq", c.seq), ("last enqueued", c.last_enqueued),
                                     ("last completed", c.last_completed), ("numel", c.numel)) if v is not None]
        t.append(f"NCCL ({c.source}): " + "  ".join(f"{k} {v}" for k, v in known) + "\n", style="magenta")
    if rd.stuck is not None:
        t.append(("stack unchanged across samples: stuck\n" if rd.stuck else "stack moves between samples: slow\n"),
                 style="red" if rd.stuck else "green")
    if rd.error:
        t.append(f"error: {rd.error.text}\n", style="yellow")
    last = next((s for s in reversed(rd.samples) if s.threads), None)
    threads = list(last.threads) if last else []
    # the task thread first: it is the one the rest of the screen talks about
    threads.sort(key=lambda th: not (rd.main is not None and th.thread_id == rd.main.thread_id))
    for th in threads:
        state = "active" if th.active else "idle"
        main = rd.main is not None and th.thread_id == rd.main.thread_id
        t.append(f"\nThread {th.thread_id} ({state}) {th.name or ''}{'  ← task thread' if main else ''}\n",
                 style="bold" if main else "bold grey70")
        for f in th.frames:
            path = short_path(f.file)
            loc = f"{path}:{f.line}" if f.line else path
            style = "grey50" if is_native(f) else "grey70" if is_wrapper(f) else ""
            func = shorten(f.func, width - 4)
            t.append(f"    {func}", style=style or "bold")
            apart = 4 + len(func) + 4 + len(loc) > width
            t.append(f"{chr(10) + ' ' * 8 if apart else '  '}({loc})\n", style="grey50")
    return t


def short_path(file: str) -> str:
    """Where a frame's file lives, as people name it: a package's path from the package on
    (``torch/distributed/distributed_c10d.py``), else the last two parts of the path."""
    for marker in ("site-packages/", "dist-packages/"):
        i = file.rfind(marker)
        if i >= 0:
            return file[i + len(marker):]
    parts = file.rsplit("/", 2)
    return "/".join(parts[-2:]) if len(parts) > 2 else file


class RankStackScreen(Screen):
    BINDINGS = keymap.RANK_STACK

    def __init__(self, rd: RankDump) -> None:
        super().__init__()
        self.rd = rd

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="rank-stack-box"):
            yield Static(rank_stack_text(self.rd), id="rank-stack")
        yield Footer()

    def on_resize(self) -> None:
        self.query_one("#rank-stack", Static).update(rank_stack_text(self.rd, (self.size.width or 160) - 4))
