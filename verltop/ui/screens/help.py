"""`?`: every key of every screen, generated from the screens' own bindings, and what the columns mean."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from verltop.ui import keymap

_KEY_NAMES = {"question_mark": "?", "slash": "/", "escape": "Esc", "enter": "Enter", "pageup": "PgUp",
              "pagedown": "PgDn", "home": "Home", "end": "End", "up": "↑", "down": "↓", "left": "←",
              "right": "→", "space": "Space", "ctrl+c": "Ctrl-C", "left_square_bracket": "[",
              "right_square_bracket": "]"}

COLUMNS_HELP = """\
  ROLE      verl role of the running task (controller, actor_rollout, critic, ref, rm, rollout_server, …);
            a colocated worker's group row lists every role it hosts (actor_rollout+critic)
  RANK      rank in its worker group (RANK in the actor's runtime env); the world size is on the group row
  NODE      the node's IP (shown when the job spans more than one node)
  GPU       NVML index of the GPU the process holds memory on (local NVML, else the dashboard's data)
  GPU UTIL  the whole GPU's utilisation. 100 % is NOT progress: a rank waiting in an NCCL collective reads 100 %
  GPU MEM   this process's memory on that GPU, bar against the GPU's total
  CPU% / HOST MEM   the process's CPU (100 = one core) and RSS, bar against the node's memory
  STATE     ALIVE, DEAD, RSTRT (restarting), PEND (pending creation), DEPS (dependencies unready)
  TASK / AGE        the running Ray task (verl method, role prefix removed) and how long it has run
  STALLED   why the task looks stuck: N× its median, peers finished long ago, over --stall-after, GPU idle for
            the whole task, or the actor is DEAD/RESTARTING; the full sentence is under the table
  On a narrow terminal, columns narrow (bars become figures: GPU%, GMEM, RSS) or step aside (PID first);
  ROLE, RANK, TASK, AGE and STALLED always stay.

Header: nodes, GPUs, cluster CPU and memory, the verl step phase, the time since any verl task last
finished ("last progress"), and, in yellow, stale data and the dashboard's last error."""


def key_text(b: Binding) -> str:
    if b.key_display:
        return b.key_display
    return " ".join(_KEY_NAMES.get(k, k) for k in b.key.split(","))


def bindings_text(title: str, groups: list[list[Binding]]) -> Text:
    """One section: each binding's key and its tooltip (or description), in the screen's order; keys that
    do the same thing (``l`` and Enter) share a line."""
    t = Text()
    t.append(f"{title}\n", style="bold")
    seen: dict[str, list[str]] = {}
    for bindings in groups:
        for b in bindings:
            what = b.tooltip or b.description
            if not what:
                continue
            seen.setdefault(what, []).append(key_text(b))
    for what, keys in seen.items():
        t.append(f"  {' / '.join(dict.fromkeys(keys)):<14}", style="bold cyan")
        t.append(f"{what}\n")
    return t


def help_text() -> Text:
    t = Text()
    t.append("verltop", style="bold")
    t.append(" — a live view of a verl job on Ray\n\n")
    for title, bindings in keymap.SECTIONS:
        t.append_text(bindings_text(title, [bindings]))
        t.append("\n")
    t.append("Columns\n", style="bold")
    t.append(COLUMNS_HELP + "\n")
    return t


class HelpScreen(ModalScreen):
    BINDINGS = keymap.HELP

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(help_text(), id="help-text")
