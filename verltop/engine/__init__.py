"""The UI-free engine every view and command talks to: poll loops, history, snapshots, dumps."""

from verltop.engine.base import Engine
from verltop.engine.dumps import DumpJob, DumpProgress
from verltop.engine.monitor import Intervals, Monitor
from verltop.sources.pyspy import DumpOptions

__all__ = ["DumpJob", "DumpOptions", "DumpProgress", "Engine", "Intervals", "Monitor"]
