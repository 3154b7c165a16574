"""verl's training metrics: the console backend's lines in the trainer actor's log (read through the
dashboard's log endpoint, only the tail since the last step seen), or the file backend's JSONL on this
machine (read from the byte offset where the last read stopped). Fed step by step into the metric history,
whose rules find the anomalies as each step arrives (docs/training.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field

from verltop.analysis import roles as R
from verltop.analysis.training import MetricHistory
from verltop.engine.snapshots import SnapshotBuilding
from verltop.model import RawActor, TrainingView
from verltop.sources import dashboard as D
from verltop.sources import metrics_log as M
from verltop.sources import reads

log = logging.getLogger("verltop.engine")

TRAINING_EVERY_S = 5.0
FIRST_LINES = reads.FIRST_LOG_LINES  # the first read of a log: its history (prefetched by `snapshot`)
TAIL_LINES = 20  # later reads: a few steps' lines; more when the last step seen is not among them
MAX_LINES = 20000
JOBS_EVERY_S = 30.0


@dataclass(slots=True)
class TrainingState:
    """Where the metrics come from and what has been read of them."""

    history: MetricHistory = field(default_factory=MetricHistory)
    metrics_file: str | None = None  # --metrics-file
    source: str | None = None  # "actor_log" | "job_log" | "file"
    actor_id: str | None = None  # the trainer actor's id, or "job:<submission id>"
    actor_name: str | None = None  # its name, or the submission id
    lines: int = FIRST_LINES
    follower: M.JsonlFollower | None = None
    error: str | None = None
    reads: int = 0
    last_ms: float = 0.0  # parse + history time of the last read (not the request)
    jobs_at: float | None = None  # when the job list was last read (no trainer actor: an older layout)
    job: str | None = None  # the running submitted job whose driver log is read then

    def view(self) -> TrainingView | None:
        if self.source is None or self.history.last_step is None:
            return None
        return self.history.view(self.source, self.actor_name,
                                 self.follower.path if self.follower is not None else None)


def trainer_actor(actors: list[RawActor]) -> RawActor | None:
    """The live actor that runs verl's trainer (``TaskRunner``), if any (the last listed)."""
    found = [a for a in actors if a.state == "ALIVE" and R.base_role(a.class_name, a.name) == "controller"]
    return found[-1] if found else None


class TrainingPolls(SnapshotBuilding):
    """The metrics poller."""

    @property
    def training(self) -> TrainingState:
        """What is read of verl's metrics (made on first use: the monitor's ``__init__`` is ``PollState``'s)."""
        st = getattr(self, "_training", None)
        if st is None:
            st = self._training = TrainingState()
        return st

    def training_view(self) -> TrainingView | None:
        return self.training.view()

    async def _poll_training(self) -> None:
        ts = self.training
        if ts.metrics_file:
            await self._read_file(ts)
            return
        trainer = trainer_actor(list(self.src.actors.value or []))
        if trainer is not None:
            key, name, source = trainer.actor_id, trainer.name or trainer.class_name, "actor_log"
        else:  # older layouts: the trainer in the driver, whose log the dashboard serves for submitted jobs
            job = await self._running_job(ts)
            if job is None:
                return
            key, name, source = f"job:{job}", job, "job_log"
        if key != ts.actor_id:  # a new job: its own history
            jobs_at, job = ts.jobs_at, ts.job
            self._training = ts = TrainingState(metrics_file=ts.metrics_file, jobs_at=jobs_at, job=job)
            ts.actor_id, ts.actor_name = key, name
        for _ in range(4):  # the tail grows until it reaches the last step seen
            if source == "actor_log":
                r = await D.fetch_log_tail(self.client, key, suffix="out", lines=ts.lines, timeout_s=self.iv.timeout_s)
            else:
                r = await D.fetch_job_log_tail(self.client, name, lines=ts.lines, timeout_s=self.iv.timeout_s)
            if not r.ok or r.value is None:
                ts.error = r.error.text if r.error else None
                break
            ts.error = None
            if self._feed_log(ts, r.value, source):
                break
        if ts.source not in ("actor_log", "job_log") and ts.follower is not None:  # the file backend only
            await self._read_file(ts)

    async def _running_job(self, ts: TrainingState) -> str | None:
        """The submission id of the newest running submitted job (the job list read at most every 30 s)."""
        now = time.monotonic()
        if ts.jobs_at is None or now - ts.jobs_at >= JOBS_EVERY_S:
            ts.jobs_at = now
            r = await D.fetch_jobs(self.client, timeout_s=self.iv.timeout_s)
            if r.ok and r.value is not None:
                running = [j.submission_id for j in r.value if j.status == "RUNNING" and j.submission_id]
                ts.job = running[-1] if running else None
        return ts.job

    def _feed_log(self, ts: TrainingState, text: str, source: str = "actor_log") -> bool:
        """Feed the steps of a log tail; False when the tail may have missed steps (read a longer one). The next
        tail covers twice what this one needed (from the last step seen to the end), at least ``TAIL_LINES``."""
        t0 = time.perf_counter()
        last = ts.history.last_step
        lines = text.splitlines()
        steps: list[tuple[int, M.Metrics]] = []
        first_at = len(lines)
        for i, line in enumerate(lines):
            hit = M.console_line(line, None if last is None else last - 1)  # the last step seen: the overlap
            if hit is not None:
                steps.append(hit)
                first_at = min(first_at, i)
        full = len(lines) >= ts.lines - 1
        # a gap before the tail's first step (a job's first read expects step 1), or, after a step was seen, no
        # step line at all in a full tail (output after the last step pushed it out): read a longer tail
        gap = steps[0][0] > (last + 1 if last is not None else 1) if steps else last is not None
        if full and gap and ts.lines < MAX_LINES:
            ts.lines = min(MAX_LINES, ts.lines * 4)
            return False
        if steps:
            ts.source, ts.follower = source, None
            new = [(s, v) for s, v in steps if last is None or s > last]
            if new:
                ts.history.add_many(new)
                self._dirty.set()
        elif last is None and ts.follower is None:
            path = M.file_logger_path(text)  # only the file backend: read its JSONL when it is on this machine
            if path and os.path.isfile(path):
                ts.follower = M.JsonlFollower(path)
        ts.lines = min(MAX_LINES, max(TAIL_LINES, 2 * (len(lines) - first_at))) if steps else TAIL_LINES
        ts.reads += 1
        ts.last_ms = (time.perf_counter() - t0) * 1000
        return True

    async def _read_file(self, ts: TrainingState) -> None:
        if ts.follower is None:
            ts.follower = M.JsonlFollower(os.path.expanduser(ts.metrics_file or ""))
        try:
            steps = await asyncio.to_thread(ts.follower.read)
        except OSError as e:
            ts.error = f"{ts.follower.path}: {e.strerror or e}"
            return
        ts.error = None
        t0 = time.perf_counter()
        if steps:
            ts.source = "file"
            ts.history.add_many(steps)
            self._dirty.set()
        ts.reads += 1
        ts.last_ms = (time.perf_counter() - t0) * 1000
