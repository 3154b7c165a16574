"""`n`: the nodes view — ``verltop doctor``'s table (a column per node, a row per check; values that differ
from the majority in red, values over a limit in yellow), then the mismatches and problems with their fixes.
The check runs in a worker through the engine; Esc cancels it (the probes are removed) or goes back."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker, WorkerState

from verltop.analysis.doctor import cell_marks
from verltop.engine import DoctorJob, DoctorProgress
from verltop.model import DoctorReport
from verltop.text.doctor import doctor_summary, stage_text, value_text
from verltop.ui import keymap
from verltop.ui.render import hanging
from verltop.ui.widgets.footer import Footer

STYLE = {"mismatch": "bold red", "problem": "yellow"}


def findings_text(r: DoctorReport, width: int = 160) -> Text:
    """Mismatches and problems as sentences, each with its fix, wrapped to ``width`` under themselves."""
    t = Text()
    if r.ok:
        t.append("Every node agrees and no problem was found.", style="green")
    for title, items, style in (("MISMATCHES", r.mismatches, "bold red"), ("PROBLEMS", r.problems, "yellow")):
        if not items:
            continue
        if t:
            t.append("\n")
        t.append(f"{title} ({len(items)})\n", style=style)
        for x in items:
            t.append(f" • {hanging(x.problem.message, width, 3)}\n")
            if x.problem.remedy:
                t.append(f"   fix: {hanging(x.problem.remedy, width, 8)}\n", style="grey70")
    for n in r.notes:
        t.append(f"\nnote: {hanging(n, width, 6)}", style="grey70")
    t.rstrip()  # the box as tall as its text
    return t


class NodesScreen(Screen):
    BINDINGS = keymap.NODES

    def __init__(self, path: str | None = None) -> None:
        super().__init__()
        self.path = path
        self.job: DoctorJob | None = None
        self.report: DoctorReport | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="doctor-status")
        yield DataTable(id="doctor-table", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="doctor-findings-box"):
            yield Static("", id="doctor-findings")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#doctor-table", DataTable).focus()
        self.action_again()

    def _status(self, text: Text | str) -> None:
        self.query_one("#doctor-status", Static).update(text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A recording cannot check the nodes: its footer does not offer it."""
        return self.app.engine.live or action != "again"

    def action_again(self) -> None:
        job = self.app.engine.doctor(self.path, on_progress=self._progress)
        if job is None:
            self._status(Text("a recording cannot check the nodes (doctor needs the live cluster)", style="yellow"))
            return
        self.job = job
        self._status("checking every node: listing nodes…  (Esc cancels)")
        self.check(job)

    @work(exclusive=True, group="doctor", exit_on_error=False)
    async def check(self, job: DoctorJob) -> None:
        report = await job.run()
        if job is not self.job:
            return  # replaced by `r`
        if report is None:
            why = job.problem.text if job.problem else "unknown error"
            self._status(Text(f"the check could not run: {why}  (r: try again · Esc: back)", style="bold red"))
            return
        self.report = report
        self.show_report(report)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.group == "doctor":
            self._status(Text(f"the check failed: {event.worker.error!r}  (r: try again · Esc: back)",
                              style="bold red"))

    def _progress(self, p: DoctorProgress) -> None:
        what = stage_text(p.stage, p.done, p.total)
        if what is not None:
            self._status(f"checking every node: {what}…  (Esc cancels)")

    def show_report(self, r: DoctorReport) -> None:
        """The table (a column per node) and the findings."""
        st = Text(doctor_summary(r), style="bold" if r.ok else "bold red")
        if r.path:
            st.append(f"   shared directory {r.path}", style="grey70")
        if (self.size.width or 160) >= 100:  # a narrow terminal has them in the footer only
            st.append("   r: again · Esc: back", style="grey70")
        self._status(st)
        t = self.query_one("#doctor-table", DataTable)
        t.clear(columns=True)
        t.add_column("CHECK", key="check", width=max(len("CHECK"), *(len(c) for c in r.checks)))
        for n in r.nodes:
            head = f"{n.label}{' (head)' if n.is_head else ''}"
            t.add_column(Text(head, style="bold"), key=n.node_id)
        marks = cell_marks(r)
        for check in r.checks:
            cells: list[Text] = [Text(check, style="bold" if any(m.check == check for m in r.mismatches) else "")]
            for n in r.nodes:
                m = marks.get((check, n.label))
                v = n.get(check)
                cells.append(Text(value_text(check, v), style=STYLE[m] if m else ("grey50" if v is None else "")))
            t.add_row(*cells, key=check)
        width = max(30, (self.size.width or 160) - 6)  # inside the box's border, padding and scrollbar
        self.query_one("#doctor-findings", Static).update(findings_text(r, width))

    def on_resize(self) -> None:
        if self.report is not None:
            self.show_report(self.report)

    def action_back(self) -> None:
        self.workers.cancel_group(self, "doctor")
        self.app.pop_screen()

    def action_down(self) -> None:
        self.query_one("#doctor-table", DataTable).action_cursor_down()

    def action_up(self) -> None:
        self.query_one("#doctor-table", DataTable).action_cursor_up()
