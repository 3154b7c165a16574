"""Enter on an actor: its facts, death cause, stall reasons, and the tail of its logs."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from verltop.analysis.trends import Trend, spark
from verltop.model import ActorRow, RolloutLoad
from verltop.text.cells import age, duration, pct, size
from verltop.text.rollout import load_text, tail_line
from verltop.text.stalls import stall_reason
from verltop.ui import keymap
from verltop.ui.widgets.footer import Footer

LOG_LINES = 200


def facts_text(a: ActorRow, load: RolloutLoad | None = None, tail: str | None = None) -> Text:
    """An actor's facts; a rollout server's with its engine's load (and, while one replica holds the
    generation, which one: ``tail``)."""
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
    row("running task", f"{a.task}  ({age(a.task_running_s)})" if a.task else None)
    row("GPU", f"#{a.gpu_index}  util {pct(a.gpu_util_percent)}  mem {size(a.gpu_mem_bytes)}"
        if a.gpu_index is not None else None)
    row("host", f"CPU {pct(a.cpu_percent)}  RSS {size(a.rss_bytes)}")
    if load is not None:  # a rollout server: its engine's own /metrics
        row("engine load", f"{load_text(load)}" + (f"  ({load.address})" if load.address else ""))
        if tail:
            row("replicas", tail, "dark_orange")
    if a.num_restarts:
        row("restarts", f"{a.num_restarts} (Ray restarted this actor; a climbing count is a restart loop)",
            "dark_orange")
    if a.gpu_mem_peak_bytes is not None or a.rss_peak_bytes is not None:
        row("memory peaks", f"GPU {size(a.gpu_mem_peak_bytes)}  RSS {size(a.rss_peak_bytes)}   growth "
            f"GPU {_rate(a.gpu_mem_growth_bytes_per_min)}  RSS {_rate(a.rss_growth_bytes_per_min)}")
    if a.stalls:
        t.append("stalled because\n", style="bold red")
        for s in a.stalls:
            t.append(f"  • {stall_reason(s)}\n", style="red")
    if a.death_text and a.death_text.strip() != (a.death_cause or "").strip():
        t.append("\nRay's full death text\n", style="bold")
        t.append(a.death_text.rstrip() + "\n", style="grey70")
    return t


def _rate(v: float | None) -> str:
    if v is None:
        return "-"
    return ("+" if v >= 0 else "-") + size(abs(v)) + "/min"


TREND_CELLS = 60


def trends_text(tr: Trend | None, width: int = 160) -> Text:
    """The last minutes as sparklines: GPU utilisation, GPU memory, host RSS, GPU power (where known); the
    sparklines narrow so that a line keeps its figures within ``width``."""
    n = max(10, min(TREND_CELLS, width - 14 - 36))
    t = Text()
    t.append("\ntrends", style="bold")
    if tr is None:
        t.append("  (none yet: kept from the first snapshot this actor appeared in)\n", style="grey70")
        return t
    span = len(tr.rss_mib) * tr.bucket_s
    t.append(f"  last {duration(span)}, oldest left\n", style="grey70")
    for label, series, unit, lo, hi in (("GPU util", tr.gpu_util, "%", 0.0, 100.0),
                                        ("GPU memory", tr.gpu_mem_mib, "MiB", None, None),
                                        ("host RSS", tr.rss_mib, "MiB", None, None),
                                        ("GPU power", tr.power_w, "W", 0.0, None)):
        cells = _downsample(series, n)
        if not any(v is not None for v in cells):
            continue
        known = [v for v in series if v is not None]
        t.append(f"  {label:<12}", style="bold")
        t.append((spark(cells, lo, hi) or "").ljust(n), style="cyan")
        now_v = known[-1]
        t.append(f"  now {_fmt(now_v, unit)}  min {_fmt(min(known), unit)}  max {_fmt(max(known), unit)}\n",
                 style="grey70")
    return t


def _downsample(series: tuple[float | None, ...], n: int) -> list[float | None]:
    """``n`` cells, each the highest value of its share of the series (peaks must not vanish)."""
    if len(series) <= n:
        return list(series)
    k = len(series)
    out: list[float | None] = []
    for i in range(n):  # integer bounds: the last chunk always ends at the newest value
        chunk = [v for v in series[i * k // n:(i + 1) * k // n] if v is not None]
        out.append(max(chunk) if chunk else None)
    return out


def _fmt(v: float, unit: str) -> str:
    if unit == "MiB":
        return size(v * 1024 * 1024)
    if unit == "%":
        return pct(v)
    return f"{v:.0f} {unit}"


class DetailsScreen(Screen):
    BINDINGS = keymap.DETAILS

    def __init__(self, actor: ActorRow) -> None:
        super().__init__()
        self.actor = actor
        self.stream = "err"

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="details-box"):
            yield Static(facts_text(self.actor, *self._load()), id="facts")
            yield Static("", id="trends")
            yield Static("", id="log-title")
            yield Static("loading log…", id="log", markup=False)
        yield Footer()

    def _load(self) -> tuple[RolloutLoad | None, str | None]:
        """This actor's engine load (a rollout server's), and the replicas' long tail, from the latest snapshot."""
        snap = getattr(self.app, "snapshot", None)
        if snap is None:
            return None, None
        load = next((r for r in snap.rollout if r.actor_id == self.actor.actor_id), None)
        return load, tail_line(snap.phase, snap.rollout) if load is not None else None

    def on_mount(self) -> None:
        self.action_reload()
        self.show_trends()
        self.set_interval(5.0, self.show_trends)

    def show_trends(self) -> None:
        load, tail = self._load()
        if load is not None:  # the engine's load moves: shown afresh with the trends
            self.query_one("#facts", Static).update(facts_text(self.actor, load, tail))
        self.query_one("#trends", Static).update(trends_text(self.app.engine.trend(self.actor.actor_id),
                                                             (self.size.width or 160) - 4))

    def on_resize(self) -> None:
        self.show_trends()

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
