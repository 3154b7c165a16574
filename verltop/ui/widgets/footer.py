"""Textual's Footer without its leak.

Each recompose of Textual's Footer (on every change of the bindings: focus moves, screens come and go)
builds new ``FooterKey`` widgets that ``data_bind`` the Footer's ``compact``; the old keys' watchers stay on
the Footer until ``compact`` changes, which it never does here (Textualize/textual#6666, open in 8.2). So
every key ever shown stayed alive: about 2 MB a minute in a TUI that is used. This Footer drops the
watchers of removed keys after each recompose.

Below ``COMPACT_BELOW`` columns it takes Textual's compact style (one space between keys, not three), so that
the main screen's keys all fit in 80 columns.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Footer as TextualFooter

COMPACT_BELOW = 100  # columns


class Footer(TextualFooter):
    def on_resize(self, event: events.Resize) -> None:
        self.compact = event.size.width < COMPACT_BELOW

    async def recompose(self) -> None:
        await super().recompose()
        watchers = getattr(self, "__watchers", {}).get("compact")
        if watchers:
            watchers[:] = [(w, cb) for w, cb in watchers if not getattr(w, "_closing", False) and w.is_attached]
