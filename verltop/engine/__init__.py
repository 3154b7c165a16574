"""The UI-free engine every view and command talks to: poll loops, history, snapshots, dumps, doctor."""

from verltop.engine.base import Engine
from verltop.engine.doctor import DoctorJob, DoctorProgress
from verltop.engine.dumps import DumpJob, DumpProgress
from verltop.engine.monitor import Intervals, Monitor
from verltop.sources.pyspy import DumpOptions

__all__ = ["DoctorJob", "DoctorProgress", "DumpJob", "DumpOptions", "DumpProgress", "Engine", "Intervals", "Monitor"]
