"""`h`: the job's health from verl's own metrics: a sparkline per metric over the last steps with its latest
value (anomalies in red at their steps), the phases' times, then the anomalies and the slow ranks in words."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from verltop.model import Snapshot, TrainingView
from verltop.text.training import anomaly_sentence, health_title, num, slow_sentence
from verltop.ui import keymap
from verltop.ui.widgets.footer import Footer
from verltop.ui.widgets.sparkline import sparkline
from verltop.ui.widgets.text_line import TextLine

# shown first, in this order, when logged; then the phases' times; then any metric with an anomaly
KEY_METRICS = ("critic/score/mean", "actor/pg_loss", "actor/ppo_kl", "actor/kl_loss", "actor/grad_norm",
               "actor/entropy", "response_length/mean", "response_length/clip_ratio", "perf/throughput")
LATER = ("perf/max_memory_allocated_gb", "perf/cpu_memory_used_gb")  # after the phases' times
NAME_W, VALUE_W = 27, 9
MAX_WORDS = 6  # anomaly sentences under the chart (the newest)


def chart_names(t: TrainingView) -> list[str]:
    """The metrics the chart shows, in order."""
    names = [k for k in KEY_METRICS if k in t.metrics]
    if "critic/score/mean" not in t.metrics and "critic/rewards/mean" in t.metrics:
        names.insert(0, "critic/rewards/mean")
    names += ["timing_s/step"] if "timing_s/step" in t.metrics else []
    names += sorted(k for k in t.metrics if k.startswith("timing_s/") and k not in names)
    names += [k for k in LATER if k in t.metrics]
    names += sorted({a.metric for a in t.anomalies if a.metric in t.metrics and a.metric not in names})
    return names


def chart(t: TrainingView, width: int) -> Text:
    """One line per metric: name, sparkline, latest value."""
    spark_w = max(8, width - NAME_W - VALUE_W - 2)
    marks: dict[str, set[int]] = {}
    for a in t.anomalies:
        marks.setdefault(a.metric, set()).add(a.step)
    lines = []
    for name in chart_names(t):
        pts = t.metrics[name]
        m = marks.get(name, set())
        line = Text(_short(name, NAME_W - 1).ljust(NAME_W), style="bold red" if m else "bold", no_wrap=True,
                    overflow="crop")
        phase = name.startswith("timing_s/")
        line.append_text(sparkline(pts, spark_w, m, style="magenta" if phase else "cyan"))
        last = pts[-1][1] if pts else None
        line.append(" " + num(last).rjust(VALUE_W), style="bold red" if pts and pts[-1][0] in m else "")
        lines.append(line)
    return Text("\n").join(lines)


def _short(name: str, w: int) -> str:
    """A name in ``w`` cells: its last part whole, the start cut with an ellipsis."""
    if len(name) <= w:
        return name
    tail = name.rsplit("/", 1)[-1]
    return name[: max(0, w - len(tail) - 2)] + "…/" + tail if len(tail) < w - 2 else "…" + name[-(w - 1):]


def words(snap: Snapshot, width: int) -> Text:
    """The newest anomalies and the slow ranks, one sentence a line."""
    t = snap.training
    out = Text()
    anomalies = sorted(t.anomalies, key=lambda a: a.step)[-MAX_WORDS:] if t is not None else []
    for a in anomalies:
        out.append("⚠ " + anomaly_sentence(a) + "\n", style="red")
    for r in snap.slow_ranks:
        out.append("◷ " + slow_sentence(r) + "\n", style="dark_orange")
    if not out.plain:
        out.append("no anomaly in the steps read, no slow rank" if t is not None else "", style="green")
    out.rstrip()
    return out


class HealthScreen(Screen):
    BINDINGS = keymap.HEALTH

    def compose(self) -> ComposeResult:
        yield TextLine(id="health-header")
        with VerticalScroll(id="health-box"):
            yield Static("", id="health-chart")
        yield Static("", id="health-words")
        yield Footer()

    def on_mount(self) -> None:
        if self.app.snapshot is not None:
            self.show_snapshot(self.app.snapshot)
        else:
            self.query_one("#health-header", TextLine).show(health_title(None))

    def show_snapshot(self, snap: Snapshot, rows: list | None = None) -> None:
        width = max(40, (self.size.width or 80) - 4)  # the padding and the scrollbar
        t = snap.training
        self.query_one("#health-header", TextLine).show(Text(health_title(t), style="bold"))
        if t is None:
            self.query_one("#health-chart", Static).update(Text(
                "No metrics yet. verltop reads the lines verl's console logger prints each step "
                "(step:N - key:value …) from the trainer actor's log (TaskRunner), or the file logger's JSONL "
                "(--metrics-file PATH).", style="grey70"))
        else:
            self.query_one("#health-chart", Static).update(chart(t, width))
        self.query_one("#health-words", Static).update(words(snap, width))
