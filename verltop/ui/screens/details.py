"""Enter on an actor: its facts, death cause, stall reasons, and the tail of its logs."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from verltop import fmt
from verltop.model import ActorRow
from verltop.ui import keymap
from verltop.ui.widgets.footer import Footer

LOG_LINES = 200


def facts_text(a: ActorRow) -> Text:
    t = Text()

    def row(k: str, v: object, style: str = "") -> None:
        t.append(f"{k:<16}", style="bold")
        t.append(f"{v if v not in (None, '') else '-'}\n", style=style)

    row("actor", a.actor_name or "(unnamed)")
    row("actor id", a.actor_id)
    row("class", a.class_name)
    row("state", a.state, "green" if a.state == "ALIVE" else "bold red")
    if a.death_cause:
        row("death cause", a.death_cause, "red")
    if a.num_restarts:
        row("restarts", a.num_restarts, "dark_orange")
    row("role", a.role + (f"   (hosts {', '.join(a.roles)})" if len(a.roles) > 1 else ""))
    row("worker group", a.worker_group)
    row("rank", f"{a.rank} of {a.world_size or '?'}" if a.rank is not None else None)
    row("node", a.node_ip)
    row("pid", a.pid)
    row("running task", f"{a.task}  ({fmt.age(a.task_running_s)})" if a.task else None)
    row("GPU", f"#{a.gpu_index}  util {fmt.pct(a.gpu_util_percent)}  mem {fmt.size(a.gpu_mem_bytes)}"
        if a.gpu_index is not None else None)
    row("host", f"CPU {fmt.pct(a.cpu_percent)}  RSS {fmt.size(a.rss_bytes)}")
    if a.stalls:
        t.append("stalled because\n", style="bold red")
        for s in a.stalls:
            t.append(f"  • {s.reason}\n", style="red")
    if a.death_text and a.death_text.strip() != (a.death_cause or "").strip():
        t.append("\nRay's full death text\n", style="bold")
        t.append(a.death_text.rstrip() + "\n", style="grey70")
    return t


class DetailsScreen(Screen):
    BINDINGS = keymap.DETAILS

    def __init__(self, actor: ActorRow) -> None:
        super().__init__()
        self.actor = actor
        self.stream = "err"

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="details-box"):
            yield Static(facts_text(self.actor), id="facts")
            yield Static("", id="log-title")
            yield Static("loading log…", id="log", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.action_reload()

    def action_toggle_stream(self) -> None:
        self.stream = "out" if self.stream == "err" else "err"
        self.action_reload()

    def action_reload(self) -> None:
        self.query_one("#log-title", Static).update(
            Text(f"\nlast {LOG_LINES} lines of the worker's std{self.stream} (o switches, r reloads)", style="bold"))
        self.query_one("#log", Static).update("loading log…")
        self.load_log()

    @work(exclusive=True, group="log")
    async def load_log(self) -> None:
        text, problem = await self.app.engine.log_tail(self.actor.actor_id, self.stream, LOG_LINES)
        log = self.query_one("#log", Static)
        if problem is not None:
            log.update(Text(f"could not read the log: {problem.text}", style="yellow"))
            return
        body = (text or "").rstrip() or "(empty)"
        log.update(Text(body))
