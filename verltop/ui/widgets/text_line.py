"""A fixed-height text widget that repaints without a layout pass (Static.update re-lays the screen)."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget


class TextLine(Widget):
    """Shows one Text; ``show`` repaints only when the text changed. Height comes from CSS."""

    def __init__(self, text: Text | str = "", **kw) -> None:
        super().__init__(**kw)
        self._text = Text(text) if isinstance(text, str) else text

    def show(self, text: Text | str) -> None:
        t = Text(text) if isinstance(text, str) else text
        if t == self._text:
            return
        self._text = t
        self.refresh()

    @property
    def text(self) -> Text:
        return self._text

    def render(self) -> Text:
        return self._text
