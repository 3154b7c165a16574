"""`?`: every key of every screen, generated from the screens' own bindings, and what the columns mean."""

from __future__ import annotations

import io

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from verltop.ui import keymap

_KEY_NAMES = {"question_mark": "?", "slash": "/", "escape": "Esc", "enter": "Enter", "pageup": "PgUp",
              "pagedown": "PgDn", "home": "Home", "end": "End", "up": "↑", "down": "↓", "left": "←",
              "right": "→", "space": "Space", "ctrl+c": "Ctrl-C", "left_square_bracket": "[", "shift+left": "Shift-←",
              "shift+right": "Shift-→",
              "right_square_bracket": "]"}

# what the columns mean: (column, description); a description wraps under itself at any width
COLUMNS_HELP = (
    ("ROLE", "verl role of the running task (controller, actor_rollout, critic, ref, rm, rollout_server, …); a "
             "colocated worker's group row lists every role it hosts (actor_rollout+critic)"),
    ("RANK", "rank in its worker group (RANK in the actor's runtime env); the world size is on the group row"),
    ("NODE", "the node's IP (shown when the job spans more than one node)"),
    ("GPU", "NVML index of the GPU the process holds memory on (local NVML, else the dashboard's data)"),
    ("GPU UTIL", "the whole GPU's utilisation. 100 % is NOT progress: a rank waiting in an NCCL collective reads "
                 "100 %"),
    ("GPU MEM", "this process's memory on that GPU, bar against the GPU's total"),
    ("CPU% / HOST MEM", "the process's CPU (100 = one core) and RSS, bar against the node's memory"),
    ("STATE", "ALIVE, DEAD, RSTRT (restarting), PEND (pending creation), DEPS (dependencies unready)"),
    ("TASK / AGE", "the running Ray task (verl method, role prefix removed) and how long it has run"),
    ("STALLED", "why the task looks stuck: N× its median, peers finished long ago, over --stall-after, GPU idle "
                "for the whole task, or the actor is DEAD/RESTARTING; the full sentence is under the table. After "
                "a dump, ▶ and a few words mark its suspects (their group row says who holds it up) until their "
                "task moves on or a new dump clears them"),
)
COLUMNS_NOTES = (
    "On a narrow terminal, columns narrow (bars become figures: GPU%, GMEM, RSS) or step aside (PID first); ROLE, "
    "RANK, TASK, AGE and STALLED always stay.",
    "Header: nodes, GPUs, cluster CPU and memory, the verl step phase, the time since any verl task last finished "
    "(\"last progress\"), and, in yellow, stale data and the dashboard's last error.",
)


def _described(rows: tuple[tuple[str, str], ...] | list[tuple[str, str]], key_style: str) -> Table:
    """Two columns: a name, and what it means wrapped under itself (a hanging indent)."""
    t = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False, expand=False)
    t.add_column(style=key_style, no_wrap=True, min_width=12)
    t.add_column(ratio=1)
    for name, what in rows:
        t.add_row(name, what)
    return t


def key_text(b: Binding) -> str:
    if b.key_display:
        return b.key_display
    return " ".join(_KEY_NAMES.get(k, k) for k in b.key.split(","))


def bindings_table(bindings: list[Binding]) -> Table:
    """A section's keys and what they do (tooltip, else description), in the screen's order; keys that do the
    same thing (``l`` and Enter) share a line; long descriptions wrap under themselves."""
    seen: dict[str, list[str]] = {}
    for b in bindings:
        what = b.tooltip or b.description
        if what:
            seen.setdefault(what, []).append(key_text(b))
    return _described([(" / ".join(dict.fromkeys(keys)), what) for what, keys in seen.items()], "bold cyan")


def help_renderable() -> Group:
    parts: list = [Text.assemble(("verltop", "bold"), " — a live view of a verl job on Ray\n")]
    for title, bindings in keymap.SECTIONS:
        parts += [Text(title, style="bold"), Padding(bindings_table(bindings), (0, 0, 1, 2))]
    parts += [Text("Columns", style="bold"), Padding(_described(COLUMNS_HELP, "bold"), (0, 0, 1, 2))]
    parts += [Padding(Text(n), (0, 0, 1, 2)) for n in COLUMNS_NOTES]
    return Group(*parts)


def help_text() -> Text:
    """The help as plain text at 110 columns (tests, and anyone reading it outside the TUI)."""
    from rich.console import Console

    console = Console(width=110, record=True, file=io.StringIO(), color_system=None)
    console.print(help_renderable())
    return Text("\n".join(line.rstrip() for line in console.export_text().splitlines()))


class HelpScreen(ModalScreen):
    BINDINGS = keymap.HELP

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(help_renderable(), id="help-text")
