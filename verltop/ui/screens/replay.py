"""`verltop replay`: the main screen on a recording, with time controls; `d`/`D` open the recorded dump."""

from __future__ import annotations

import time
from dataclasses import replace

from textual import work
from textual.binding import ActiveBinding

from verltop.engine.replay import RecordedDump, ReplayEngine
from verltop.model import Snapshot
from verltop.ui import keymap
from verltop.ui.screens.main import MainScreen


def clock_text(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


class ReplayScreen(MainScreen):
    BINDINGS = keymap.REPLAY

    def __init__(self) -> None:
        super().__init__()
        self._shown_t: float | None = None

    @property
    def active_bindings(self) -> dict[str, ActiveBinding]:
        """The footer: the time controls, and of the main screen's keys those a recording needs most."""
        out = super().active_bindings
        return {k: ab._replace(binding=replace(ab.binding, show=False)) if ab.binding.id in keymap.REPLAY_FOOTER_HIDES
                else ab for k, ab in out.items()}

    @property
    def replay(self) -> ReplayEngine:
        return self.app.engine  # type: ignore[return-value]

    def on_mount(self) -> None:
        super().on_mount()
        r = self.replay
        what = f"{len(r.incidents)} incident(s), {len(r.dumps())} recorded dump(s)"
        damage = f"  ·  {r.rec.damage[0]} (what comes before it replays)" if r.rec.damage else ""
        self.message(f"replay of {r.name}: {what} — Space pause, ←/→ step, [ ] speed, i next incident, "
                     f"d the recorded dump{damage}", "error" if damage else "")

    def show_snapshot(self, snap: Snapshot, rows: list | None = None) -> None:
        super().show_snapshot(snap, rows)
        before, self._shown_t = self._shown_t, snap.taken_at
        if before is None or snap.taken_at <= before:
            return
        # say what the recording holds between the last frame shown and this one
        passed = [t for t in self.replay.dumps() if before < t <= snap.taken_at]
        inc = next((i for i in self.replay.incidents if before < i.detected_at <= snap.taken_at), None)
        if inc is not None:
            self.message(f"incident {inc.id}: {inc.summary}", "error")
        elif passed:
            self.message(f"a dump was recorded at {clock_text(passed[-1])}: d opens it")
        if passed:
            self.read_marks(passed[-1])  # its suspects are marked on their rows, as after a live dump

    # ---------------------------------------------------------- time controls

    def _replayed(self, text: str) -> None:
        """After a time key: say what it did and show the clock at once (not at the next tick)."""
        self.message(text)
        if self._last is not None:
            self._header(self._last, self.paused, self.replay.clock())

    def action_toggle_play(self) -> None:
        playing = self.replay.toggle_pause()
        self._replayed("playing" if playing else "paused: ←/→ step, Space plays")

    def action_step(self, n: int) -> None:
        snap = self.replay.step(n)
        if snap is not None:
            self._replayed(f"snapshot of {clock_text(snap.taken_at)} (paused)")

    def action_jump(self, seconds: float) -> None:
        r = self.replay
        r.seek(r.clock() + seconds)
        self._replayed(f"{'+' if seconds > 0 else '-'}{abs(seconds):g} s: {clock_text(r.clock())}")

    def action_speed(self, up: bool) -> None:
        self._replayed(f"speed ×{self.replay.faster(up):g}")

    def action_next_incident(self) -> None:
        inc = self.replay.next_incident()
        if inc is None:
            self.message("this recording holds no incident")
            return
        self._replayed(f"incident {inc.id} ({', '.join(inc.groups) or '-'}): from {clock_text(inc.begins_s)}; "
                       "its rows turn red when the stall rule fires")

    # ---------------------------------------------------------- recorded dumps

    def action_dump_group(self) -> None:
        """The recorded dump nearest to now, of the selected group when there is one of it."""
        aid = self.table.selected_actor()
        row = next((a for a in (self._last.actors if self._last else ()) if a.actor_id == aid), None)
        key = self.table.selected_key() or ""
        group = row.worker_group if row else (key.split(":", 2)[2] if key.startswith("grp:group:") else None)
        self._dump(group, False)

    def _dump(self, scope: str | None, all_: bool) -> None:
        if self._last is None:
            self.message("no snapshot at this time yet", "error")
            return
        self.message("reading the recorded dump…")
        self.open_dump(None if all_ else scope)

    @work(exclusive=True, group="recorded-marks", thread=True)
    def read_marks(self, t: float) -> None:
        d = self.replay.recorded_dump(None, t)
        if d is not None:
            self.app.call_from_thread(self.app.remember, d.report)

    @work(exclusive=True, group="recorded-dump", thread=True)
    def open_dump(self, scope: str | None) -> None:
        d = self.replay.recorded_dump(scope)  # decoding a 1,000-rank dump takes a while: not on the UI loop
        self.app.call_from_thread(self._open, d)

    def _open(self, d: RecordedDump | None) -> None:
        if d is None:
            self.message("this recording holds no dump")
            return
        from verltop.ui.screens.stacks import StackScreen

        when = "before" if d.t <= self.replay.clock() else "after"
        title = f"recorded dump of {clock_text(d.t)} ({when} this moment" + \
            (f", incident {d.incident})" if d.incident else ")")
        snap = self._last
        assert snap is not None
        self.message("")
        self.app.push_screen(StackScreen(snap, scope=d.group, report=d.report, title=title))
