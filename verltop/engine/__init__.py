"""The UI-free engine every view and command talks to: poll loops, history, snapshots, dumps, doctor.

The names below are imported when first used, so that a light module of the engine (``engine.prefetch``,
which ``verltop dump`` imports before anything else) does not pull in the whole engine.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DoctorJob", "DoctorProgress", "DumpJob", "DumpOptions", "DumpProgress", "Engine", "Intervals", "Monitor"]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from verltop.engine.base import Engine

        return Engine
    if name in ("DoctorJob", "DoctorProgress"):
        from verltop.engine import doctor

        return getattr(doctor, name)
    if name in ("DumpJob", "DumpProgress"):
        from verltop.engine import dumps

        return getattr(dumps, name)
    if name in ("Intervals", "Monitor"):
        from verltop.engine import monitor

        return getattr(monitor, name)
    if name == "DumpOptions":
        from verltop.sources.pyspy import DumpOptions

        return DumpOptions
    raise AttributeError(f"module 'verltop.engine' has no attribute {name!r}")
