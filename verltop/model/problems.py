"""Errors as data: what went wrong, why, and the fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    """Something that went wrong, as data: a ``kind`` to branch on, a one-line ``message`` and, when the user
    can fix it, a ``remedy``. Code tests ``kind``; people read ``text``."""

    kind: str
    message: str
    remedy: str | None = None
    status: int | None = None  # HTTP status, when there was one

    @property
    def text(self) -> str:
        return f"{self.message}; {self.remedy}" if self.remedy else self.message

    def __str__(self) -> str:
        return self.text

    def with_message(self, message: str) -> Problem:
        return Problem(self.kind, message, self.remedy, self.status)
