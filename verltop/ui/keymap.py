"""Every key of every screen, in one place: the screens take their bindings from here, the footer shows
them, and the help screen is generated from them (so help and footer cannot drift apart)."""

from __future__ import annotations

from textual.binding import Binding

MAIN = [
    Binding("q", "app.quit", "Quit", tooltip="quit", id="quit"),
    Binding("question_mark", "help", "Help", key_display="?", tooltip="this help", id="help"),
    Binding("d", "dump_group", "Dump group", tooltip="dump the selected worker group's stacks (every rank, every "
            "node), merged, with suspects; on a rollout server or another actor: it and its child processes "
            "(engine core, TP workers)", id="dump-group"),
    Binding("D", "dump_all", "Dump all", key_display="D", tooltip="dump every process of the job: every actor, their child "
            "processes and the driver, with the wait chains",
            id="dump-all"),
    Binding("slash", "filter", "Filter", key_display="/", tooltip="filter rows (regex over role, group, name, "
            "node, task, state, stall reason; !regex inverts)", id="filter"),
    Binding("t", "timeline", "Timeline", tooltip="the last training steps: each phase's time and how late the "
            "last rank arrived", id="timeline"),
    Binding("h", "health", "Health", show=False, tooltip="training health from verl's logged metrics: a sparkline per metric, "
            "anomalies at their steps, the phases' times, slow ranks", id="health"),
    Binding("s", "sort", "Sort", tooltip="sort within groups: rank → GPU → CPU → memory → task age → memory "
            "growth", id="sort"),
    Binding("g", "group", "Group", tooltip="group rows by worker group → role → node", id="group"),
    Binding("p", "pause", "Pause", tooltip="freeze the display (polling goes on)", id="pause"),
    Binding("n", "nodes", "Nodes", show=False, tooltip="every node side by side: versions, GPUs, NCCL "
            "environment, disks, clocks (verltop doctor); differences in red", id="nodes"),
    Binding("m", "memory", "Memory", show=False, tooltip="memory by phase and rank over the last steps, what "
            "grows step after step, headroom and steps left, engine holds, OOM verdicts", id="memory"),
    Binding("o", "object_store", "Objects", show=False, tooltip="Ray's object store, read now: store per node, "
            "objects by holder and call site (asks every raylet: only on this key)", id="object-store"),
    Binding("l", "details", "Log", show=False, tooltip="details and log tail of the selected actor", id="log"),
    Binding("j", "cursor_down", "Down", show=False, tooltip="move down", id="down"),
    Binding("k", "cursor_up", "Up", show=False, tooltip="move up", id="up"),
    Binding("escape", "clear_filter", "Clear filter", show=False, tooltip="clear the filter", id="clear-filter"),
    Binding("c", "toggle_tree", "Processes", show=False, tooltip="show / hide the child processes of the "
            "selected actor or group (other nodes: read through a probe)", id="toggle-tree"),
    Binding("H", "inject_hang", "Hang (demo)", show=False, key_display="H",
            tooltip="(verltop demo only) make one rank hang now", id="inject-hang"),
    Binding("L", "inject_late", "Late rank (demo)", show=False, key_display="L",
            tooltip="(verltop demo only) make one rank finish update_actor late: its peers finish, the skew "
            "grows on the timeline (t)", id="inject-late"),
    Binding("T", "inject_tp_hang", "TP hang (demo)", show=False, key_display="T",
            tooltip="(verltop demo only) make TP worker 1 of the rollout server hang while it loads weights",
            id="inject-tp-hang"),
    Binding("N", "inject_nan", "NaN (demo)", show=False, key_display="N",
            tooltip="(verltop demo only) log a NaN grad norm at the next step", id="inject-nan"),
]

# `verltop replay`: added to the main screen's keys. ←/→ take priority over the table's sideways scroll.
REPLAY = [
    Binding("space", "toggle_play", "Play", tooltip="pause or play the recording", id="replay-play"),
    Binding("left", "step(-1)", "Back", priority=True, tooltip="pause and go back one snapshot",
            id="replay-back"),
    Binding("right", "step(1)", "Step", priority=True, tooltip="pause and go forward one snapshot",
            id="replay-forward"),
    Binding("shift+left", "jump(-60)", "-1 min", show=False, priority=True, tooltip="go back one minute",
            id="replay-jump-back"),
    Binding("shift+right", "jump(60)", "+1 min", show=False, priority=True, tooltip="go forward one minute",
            id="replay-jump-forward"),
    Binding("left_square_bracket", "speed(False)", "Slower", key_display="[", tooltip="play half as fast",
            id="replay-slower"),
    Binding("right_square_bracket", "speed(True)", "Faster", key_display="]", tooltip="play twice as fast",
            id="replay-faster"),
    Binding("i", "next_incident", "Next incident", tooltip="jump to shortly before the next incident began",
            id="replay-incident"),
]

# Main-screen keys that work in a replay too but give their footer space to the time controls (help lists them).
REPLAY_FOOTER_HIDES = ("filter", "sort", "group", "pause")

TABLE = [
    Binding("up", "cursor_up", "Up", show=False, tooltip="move up", id="table-up"),
    Binding("down", "cursor_down", "Down", show=False, tooltip="move down", id="table-down"),
    Binding("pageup", "page_up", "Page up", show=False, tooltip="a page up", id="table-page-up"),
    Binding("pagedown", "page_down", "Page down", show=False, tooltip="a page down", id="table-page-down"),
    Binding("home", "first", "First", show=False, tooltip="first row", id="table-first"),
    Binding("end", "last", "Last", show=False, tooltip="last row", id="table-last"),
    Binding("enter", "select", "Details", show=False, tooltip="details and log tail of the selected actor (on a "
            "pending line: what it waits for)", id="table-select"),
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

NODES = [
    Binding("escape", "back", "Back / cancel", tooltip="cancel a running check (removes the probes) / back",
            id="back"),
    Binding("r", "again", "Check again", tooltip="run the check again", id="doctor-again"),
    Binding("q", "back", "Back", show=False, tooltip="back", id="back-q"),
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

MEMORY = [
    Binding("escape", "app.pop_screen", "Back", tooltip="back", id="back"),
    Binding("o", "object_store", "Objects", tooltip="Ray's object store, read now", id="object-store"),
    Binding("j", "down", "Down", show=False, tooltip="move down", id="down"),
    Binding("k", "up", "Up", show=False, tooltip="move up", id="up"),
    Binding("q", "app.pop_screen", "Back", show=False, tooltip="back", id="back-q"),
]

OBJECT_STORE = [
    Binding("escape", "back", "Back", tooltip="back (a read still running is cancelled)", id="back"),
    Binding("r", "again", "Read again", tooltip="read the object store again (asks every raylet)", id="objects-again"),
    Binding("j", "down", "Down", show=False, tooltip="move down", id="down"),
    Binding("k", "up", "Up", show=False, tooltip="move up", id="up"),
    Binding("q", "back", "Back", show=False, tooltip="back (a read still running is cancelled)", id="back-q"),
]

HEALTH = [
    Binding("escape", "app.pop_screen", "Back", tooltip="back", id="back"),
    Binding("q", "app.pop_screen", "Back", show=False, tooltip="back", id="back-q"),
]

PENDING = [
    Binding("escape", "app.pop_screen", "Back", tooltip="back", id="back"),
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
    ("Replay (verltop replay: the main screen plays a recording; d and D open the recorded dump)", REPLAY),
    ("Stack screen (after d or D)", STACKS),
    ("A rank's full stack (Enter on the stack screen)", RANK_STACK),
    ("Details (Enter or l on an actor)", DETAILS),
    ("Step timeline (t)", TIMELINE),
    ("Training health (h)", HEALTH),
    ("Memory (m): by phase and rank, growth, headroom, OOM verdicts", MEMORY),
    ("Object store (o, or o on the memory screen)", OBJECT_STORE),
    ("A pending placement group or task (Enter on its line)", PENDING),
    ("Nodes view (n): every node's checks side by side", NODES),
    ("This help", HELP),
)
