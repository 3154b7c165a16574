"""Every key of every screen, in one place: the screens take their bindings from here, the footer shows
them, and the help screen is generated from them (so help and footer cannot drift apart)."""

from __future__ import annotations

from textual.binding import Binding

MAIN = [
    Binding("q", "app.quit", "Quit", tooltip="quit", id="quit"),
    Binding("question_mark", "help", "Help", key_display="?", tooltip="this help", id="help"),
    Binding("d", "dump_group", "Dump group", tooltip="dump the selected worker group's stacks (every rank, every "
            "node), merged, with suspects", id="dump-group"),
    Binding("D", "dump_all", "Dump all", key_display="D", tooltip="dump every verl rank and the controller",
            id="dump-all"),
    Binding("slash", "filter", "Filter", key_display="/", tooltip="filter rows (regex over role, group, name, "
            "node, task, state, stall reason; !regex inverts)", id="filter"),
    Binding("t", "timeline", "Timeline", tooltip="the last training steps: each phase's time and how late the "
            "last rank arrived", id="timeline"),
    Binding("s", "sort", "Sort", tooltip="sort within groups: rank → GPU → CPU → memory → task age → memory "
            "growth", id="sort"),
    Binding("g", "group", "Group", tooltip="group rows by worker group → role → node", id="group"),
    Binding("p", "pause", "Pause", tooltip="freeze the display (polling goes on)", id="pause"),
    Binding("l", "details", "Log", show=False, tooltip="details and log tail of the selected actor", id="log"),
    Binding("j", "cursor_down", "Down", show=False, tooltip="move down", id="down"),
    Binding("k", "cursor_up", "Up", show=False, tooltip="move up", id="up"),
    Binding("escape", "clear_filter", "Clear filter", show=False, tooltip="clear the filter", id="clear-filter"),
    Binding("H", "inject_hang", "Hang (demo)", show=False, key_display="H",
            tooltip="(verltop demo only) make one rank hang now", id="inject-hang"),
    Binding("L", "inject_late", "Late rank (demo)", show=False, key_display="L",
            tooltip="(verltop demo only) make one rank finish update_actor late: its peers finish, the skew "
            "grows on the timeline (t)", id="inject-late"),
]

TABLE = [
    Binding("up", "cursor_up", "Up", show=False, tooltip="move up", id="table-up"),
    Binding("down", "cursor_down", "Down", show=False, tooltip="move down", id="table-down"),
    Binding("pageup", "page_up", "Page up", show=False, tooltip="a page up", id="table-page-up"),
    Binding("pagedown", "page_down", "Page down", show=False, tooltip="a page down", id="table-page-down"),
    Binding("home", "first", "First", show=False, tooltip="first row", id="table-first"),
    Binding("end", "last", "Last", show=False, tooltip="last row", id="table-last"),
    Binding("enter", "select", "Details", show=False, tooltip="details and log tail of the selected actor",
            id="table-select"),
]

STACKS = [
    Binding("escape", "back", "Back / cancel", tooltip="cancel a running dump (kills py-spy) / back", id="back"),
    Binding("enter", "rank_stack", "Full stack", tooltip="every thread of the selected rank", id="rank-stack"),
    Binding("w", "write", "Write dump", tooltip="write the dump as text and JSON (mode 0600, never overwrites)",
            id="write-dump"),
    Binding("r", "again", "Dump again", tooltip="dump the same ranks again", id="dump-again"),
    Binding("f", "flight_recorder", "Flight Recorder", tooltip="ask the local ranks for a fresh NCCL Flight "
            "Recorder dump (TORCH_NCCL_DEBUG_INFO_PIPE_FILE) and match it across ranks", id="flight-recorder"),
    Binding("j", "down", "Down", show=False, tooltip="move down", id="down"),
    Binding("k", "up", "Up", show=False, tooltip="move up", id="up"),
]

DETAILS = [
    Binding("escape", "app.pop_screen", "Back", tooltip="back", id="back"),
    Binding("r", "reload", "Reload log", tooltip="read the log again", id="reload-log"),
    Binding("o", "toggle_stream", "stdout/stderr", tooltip="switch between the worker's stderr and stdout",
            id="toggle-stream"),
    Binding("q", "app.pop_screen", "Back", show=False, tooltip="back", id="back-q"),
]

TIMELINE = [
    Binding("escape", "app.pop_screen", "Back", tooltip="back", id="back"),
    Binding("j", "down", "Older/newer", show=False, tooltip="select the next (newer) step", id="down"),
    Binding("k", "up", "Older", show=False, tooltip="select the previous (older) step", id="up"),
    Binding("down", "down", "Newer", show=False, tooltip="select the next (newer) step", id="step-down"),
    Binding("up", "up", "Older", show=False, tooltip="select the previous (older) step", id="step-up"),
    Binding("end", "last", "Current", tooltip="follow the current step", id="step-last"),
    Binding("q", "app.pop_screen", "Back", show=False, tooltip="back", id="back-q"),
]

RANK_STACK = [
    Binding("escape", "app.pop_screen", "Back", tooltip="back to the stack screen", id="back"),
    Binding("q", "app.pop_screen", "Back", show=False, tooltip="back to the stack screen", id="back-q"),
]

HELP = [
    Binding("escape", "app.pop_screen", "Back", tooltip="close this help", id="back"),
    Binding("q", "app.pop_screen", "Back", show=False, tooltip="close this help", id="back-q"),
    Binding("question_mark", "app.pop_screen", "Back", show=False, tooltip="close this help", id="back-help"),
]


# the help screen's sections: (title, bindings in the order shown)
SECTIONS = (
    ("Main screen", MAIN + TABLE),
    ("Stack screen (after d or D)", STACKS),
    ("A rank's full stack (Enter on the stack screen)", RANK_STACK),
    ("Details (Enter or l on an actor)", DETAILS),
    ("Step timeline (t)", TIMELINE),
    ("This help", HELP),
)
