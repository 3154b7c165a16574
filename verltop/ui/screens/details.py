"""Enter on an actor: its facts, death cause, stall reasons, and the tail of its logs."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from verltop.model import ActorRow
from verltop.text import fmt_age, fmt_bytes, fmt_pct
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
    row("role", a.role + (f"   (hosts {', '.join(a.roles)})" if len(a.roles) > 1 else ""))
    row("worker group", a.worker_group)
    row("rank", f"{a.rank} of {a.world_size}" if a.rank is not None else None)
    row("node", a.node_ip)
    row("pid", a.pid)
    row("running task", f"{a.task}  ({fmt_age(a.task_running_s)})" if a.task else None)
    row("GPU", f"#{a.gpu_index}  util {fmt_pct(a.gpu_util_percent)}  mem {fmt_bytes(a.gpu_mem_bytes)}"
        if a.gpu_index is not None else None)
    row("host", f"CPU {fmt_pct(a.cpu_percent)}  RSS {fmt_bytes(a.rss_bytes)}")
    if a.stalls:
        t.append("stalled because\n", style="bold red")
        for s in a.stalls:
            t.append(f"  • {s.reason}\n", style="red")
    return t


class DetailsScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", id="back"),
        Binding("r", "reload", "Reload log", id="reload-log"),
        Binding("o", "toggle_stream", "stdout/stderr", id="toggle-stream"),
        Binding("q", "app.pop_screen", "Back", show=False, id="back-q"),
    ]

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
        from verltop.sources.dashboard import fetch_log_tail

        r = await fetch_log_tail(self.app.collector.client, self.actor.actor_id, self.stream, LOG_LINES)
        log = self.query_one("#log", Static)
        if not r.ok:
            log.update(Text(f"could not read the log: {r.error}", style="yellow"))
            return
        body = (r.value or "").rstrip() or "(empty)"
        log.update(Text(body))
