"""`?`: the keys and what the columns mean."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = """\
[b]verltop[/b] — a live view of a verl job on Ray

[b]Main screen[/b]
  ↑ ↓  j k      move                        Enter / l   details and log tail of the actor
  d             dump the selected worker group's stacks (every rank, every node)
  D             dump every verl rank and the controller
  /             filter (regex over role, group, name, node, task, state; !regex inverts)
  s             sort within groups: rank → GPU → CPU → memory → task age
  g             group rows by: worker group → role → node
  p             pause the display (polling goes on)
  H             (demo only) make one rank hang now
  ?             this help          Esc  back / clear filter          q  quit

[b]Stack screen[/b] (after d or D)
  Enter         full stack of the rank (all threads)      w  write the dump (text + JSON, mode 0600)
  r             dump again                                Esc  cancel / back

[b]Columns[/b]
  ROLE      verl role (controller, actor_rollout, critic, ref, rm, rollout_server, …); +N: more colocated roles
  RANK      rank/world size in its worker group (from RANK, WORLD_SIZE in the actor's runtime env)
  GPU       NVML index of the GPU the process holds memory on (local NVML, else the dashboard's data)
  GPU UTIL  the whole GPU's utilisation. 100 % is NOT progress: a rank waiting in an NCCL collective reads 100 %
  GPU MEM   this process's memory on that GPU, bar against the GPU's total
  CPU% / HOST MEM   the process's CPU (100 = one core) and RSS, bar against the node's memory
  TASK / AGE        the running Ray task (verl method) and how long it has run
  STALLED BECAUSE   why the task looks stuck: k× its median, peers finished long ago, over --stall-after,
                    GPU idle for the whole task, or the actor is DEAD/RESTARTING (with Ray's death cause)

Header: nodes, GPUs, cluster CPU and memory, the verl step phase, the time since any verl task last
finished ("last progress"), and — in yellow — stale data and the dashboard's last error.
"""


class HelpScreen(ModalScreen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", id="back"),
        Binding("q", "app.pop_screen", "Back", show=False, id="back-q"),
        Binding("question_mark", "app.pop_screen", "Back", show=False, id="back-help"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(HELP, id="help-text")
