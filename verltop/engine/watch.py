"""``verltop watch``: the live engine, headless, for days. Every snapshot goes into a bounded recording; when
a stall starts or a rank dies (``analysis.incidents``), every process of the job is dumped at once, before
anything is torn down, and an incident directory is written (``engine.incident``); escalations (another
group stalls, a rank dies, the NCCL watchdog or Flight Recorder names the collective) add to the same
incident; then the user is told (stdout, the watch log, ``--on-incident``, ``--webhook``).

Ranks are never paused on a timer: py-spy runs only at an incident's start, once per incident for each
process, and at most ``max_captures_per_hour`` times an hour. Dashboard outages are recorded (status events)
and lived through: the engine keeps polling calmly and the last good data stays in the snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verltop.analysis.dump import dump_targets
from verltop.analysis.incidents import IncidentEvent, IncidentTracker, label
from verltop.codec import to_data
from verltop.engine import recording_format as rf
from verltop.engine.dumps import DumpJob
from verltop.engine.heap import HeapTrim
from verltop.engine.incident import Incident, incident_dir, prune_incidents, write_with_recording
from verltop.engine.monitor import Monitor
from verltop.engine.notify import post_webhook, run_hook, scrub
from verltop.engine.recording_format import SEGMENTS
from verltop.engine.recording_writer import Limits, Recorder, RecordingWriter
from verltop.engine.watch_memory import MemoryIncidents
from verltop.engine.watch_training import TrainingIncidents
from verltop.model import ActorRow, CollectiveInfo, DumpReport, Problem, Snapshot
from verltop.sources.aio import cancel_all, within
from verltop.sources.pyspy import DumpOptions
from verltop.text.cells import utc_time
from verltop.text.ras import ras_notes

log = logging.getLogger("verltop.watch")


@dataclass(frozen=True, slots=True)
class WatchSettings:
    dir: Path
    keep_s: float = 86400.0
    max_bytes: int = 2 << 30
    before_s: float = 300.0  # recording an incident keeps from before its hang began
    after_s: float = 300.0  # ... and after its last event
    clear_after_s: float = 60.0
    max_captures_per_hour: int = 6
    samples: int = 3
    native_on_pegged: bool = True
    via: str = "auto"
    on_incident: str | None = None
    hook_timeout_s: float = 60.0
    webhook: str | None = None
    webhook_timeout_s: float = 10.0
    webhook_tries: int = 3
    keep_incidents: int = 200
    keyframe_s: float = 120.0
    segment_s: float = 3600.0
    evidence_every_s: float = 60.0  # an open incident's watchdog lines and Flight Recorder files, re-read
    capture_timeout_s: float = 180.0
    status_every_s: float = 2.0
    memory_steps: float = 10.0  # a rank this many steps or fewer from its memory limit: a ``memory`` incident
    meta: dict[str, Any] = field(default_factory=dict)


class WatchLocked(Exception):
    """Another ``verltop watch`` writes to that directory."""


class Watcher:
    def __init__(self, engine: Monitor, cfg: WatchSettings, say: Callable[[str], None] = print) -> None:
        self.engine = engine
        self.cfg = cfg
        self.say = say
        self.tracker = IncidentTracker(cfg.clear_after_s)
        self.current: Incident | None = None
        self.job: DumpJob | None = None
        self.captures: deque[float] = deque(maxlen=1024)
        self.incidents: deque[str] = deque(maxlen=1000)  # ids, newest last
        self.recorder: Recorder | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._status: str | None = None
        self._down_since: float | None = None
        self._lockfile: int | None = None
        self._dropped = 0
        self._unsub: Callable[[], None] | None = None
        self._failures_seen: set[str] = set()  # failed calls already told (task ids)
        self.training = TrainingIncidents(self)  # anomaly and slow incidents
        self.memory = MemoryIncidents(self, cfg.memory_steps)  # oom (at once) and memory (low headroom) incidents
        self.on_open: list[Callable[[str], None]] = []  # told each new incident's kind (the metrics endpoint)

    # ---------------------------------------------------------- lifecycle

    def suspects(self) -> int:
        """How many processes the incident under way names as suspects (0 without one, or no capture)."""
        inc = self.current
        return len(inc.report.suspects) if inc is not None and inc.report is not None else 0

    def _take_lock(self) -> None:
        self.cfg.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.cfg.dir / "watch.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            other = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise WatchLocked(f"another verltop watch (pid {other or '?'}) writes to {self.cfg.dir}") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lockfile = fd

    def take_lock(self) -> None:
        """Take DIR/watch.lock now (``run`` takes it otherwise), so that a second watch on DIR stops before
        it says anything; raises ``WatchLocked``."""
        if self._lockfile is None:
            self._take_lock()

    async def run(self, stop: asyncio.Event) -> None:
        """Watch until ``stop`` is set; then end cleanly (an open incident is written as it stands)."""
        cfg = self.cfg
        self.take_lock()
        writer = RecordingWriter(cfg.dir / SEGMENTS, {**cfg.meta, "source": "watch"},
                                 Limits(keyframe_s=cfg.keyframe_s, segment_s=cfg.segment_s, keep_s=cfg.keep_s,
                                        max_bytes=cfg.max_bytes), segmented=True)
        self.recorder = Recorder(writer)
        self._unsub = self.engine.subscribe(self._on_snapshot)
        self.engine.start()
        loops = [asyncio.create_task(self._status_loop(), name="watch-status"),
                 asyncio.create_task(self._evidence_loop(), name="watch-evidence")]
        log.info("watching %s; recording into %s", self.engine.address, writer.path)
        try:
            await stop.wait()
        finally:
            await cancel_all(loops)
            await self._shutdown()

    async def _shutdown(self) -> None:
        if self._unsub:
            self._unsub()
        if self._tasks:  # captures and hooks under way get a moment to finish
            _, pending = await asyncio.wait(self._tasks, timeout=15)
            await cancel_all(pending)
        async with self._lock:
            inc = self.current
            if inc is not None:
                inc.escalate(time.time(), "stopped", "verltop watch stopped while this incident was open")
                with contextlib.suppress(Exception):
                    await self._write(inc)
        await self.engine.stop()
        if self.recorder is not None:
            await asyncio.to_thread(self.recorder.close)
        if self._lockfile is not None:
            os.close(self._lockfile)
        log.info("stopped")

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        t = asyncio.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._done)

    def _done(self, t: asyncio.Task) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.error("watch task failed", exc_info=t.exception())

    # ---------------------------------------------------------- snapshots → incidents

    def _on_snapshot(self, snap: Snapshot) -> None:
        assert self.recorder is not None
        self.recorder.snapshot(snap)
        if self.current is not None:
            self.current.snap = snap
        for ev in self.tracker.update(snap):
            self._spawn(self._handle(ev, snap))
        failed = [t for t in self.engine.hist.failed_ids if t not in self._failures_seen]
        if failed:
            self._failures_seen.update(failed)
            if self.tracker.open:
                self._spawn(self._peers_failed(failed, snap))
        self.training.update(snap)
        self.memory.update(snap)

    async def _handle(self, ev: IncidentEvent, snap: Snapshot) -> None:
        async with self._lock:
            if ev.kind == "opened":
                await self._open(ev, snap)
                return
            inc = self.current
            if inc is None:
                return
            rows = {a.actor_id: a for a in snap.actors}
            if ev.kind == "spread":
                inc.groups += [g for g in ev.groups if g not in inc.groups]
                inc.escalate(ev.at, "spread", f"{', '.join(ev.groups)} stalled too ({len(ev.stalled)} actors)")
            elif ev.kind == "died":
                for aid in ev.died:
                    a = rows.get(aid)
                    if a is not None:
                        inc.escalate(ev.at, "died", f"{_label(a)} {a.state}: {a.death_cause or 'no cause given yet'}")
                inc.groups += [g for g in ev.groups if g not in inc.groups]
            elif ev.kind == "closed":
                inc.closed_at = ev.at
            inc.analyse()
            self._record_incident(inc, "closed" if ev.kind == "closed" else "updated")
            await self._write(inc)
            if ev.kind == "closed":
                self.say(f"{utc_time(ev.at)} incident {inc.id} over: {', '.join(inc.groups)} clear for "
                         f"{self.cfg.clear_after_s:g} s")
                log.info("incident %s closed", inc.id)
                self.current, self.job = None, None
            else:
                line = f"{utc_time(ev.at)} incident {inc.id}: {inc.escalations[-1]['text']}"
                self.say(line)
                log.info(line)

    async def _peers_failed(self, task_ids: list[str], snap: Snapshot) -> None:
        """Calls that failed in a collective while an incident is open (peers that gave up waiting for the
        straggler): escalations with their errors, and the dump analysed again with them."""
        async with self._lock:
            inc = self.current
            if inc is None:
                return
            rows = {a.actor_id: a for a in snap.actors}
            now = time.time()
            for tid in task_ids:
                hit = self.engine.hist.failed_ids.get(tid)
                if hit is None:
                    continue
                _, method, run = hit
                inc.escalate(now, "peers_failed", f"{_label(rows.get(run.actor_id or ''))} failed in {method} "
                                                  f"(a collective gave up waiting): {run.error}")
            job = self.job
            report = None
            if job is not None and job.report is not None and job.client is not None:
                before = job.report
                report = job.add_failures(await job.read_failed())
                if report is not None and self.engine.last_dump is before:
                    # the engine's next dump carries what the failures showed (the straggler named for them),
                    # not the first analysis, taken perhaps after the peers had given up and named it weakly
                    self.engine.last_dump = report
            await self._escalated(inc, report, now)

    async def _escalated(self, inc: Incident, report: DumpReport | None, now: float) -> None:
        """An incident that got new evidence: its dump analysed again (``report``, when there is one), its files
        rewritten, a line said."""
        if report is not None:
            inc.report = report
            assert self.recorder is not None
            self.recorder.dump(report, None, inc.id)
        inc.analyse()
        self._record_incident(inc, "updated")
        await self._write(inc)
        line = f"{utc_time(now)} incident {inc.id}: {inc.escalations[-1]['text']}"
        self.say(line)
        log.info(line)

    async def _ras_later(self, inc: Incident, job: DumpJob) -> None:
        """NCCL RAS on another node, asked after the incident was written (through a probe: joining the cluster
        may take ``ray.init``'s whole timeout); what it finds escalates the incident, and the dump keeps its
        answer (or why none came) either way."""
        notes = await job.remote_ras()  # outside the lock: a slow ray.init holds up nothing else
        async with self._lock:
            if self.current is not inc or job.report is None:
                return
            now = time.time()
            found = ras_notes(job.ras)
            for text in found:
                inc.escalate(now, "ras", text)
            if found:
                await self._escalated(inc, job.report, now)
                return
            inc.report = job.report  # RAS answered with nothing to add, or nobody answered: dump.json says so
            inc.analyse()
            await self._write(inc)
            log.info("incident %s: NCCL RAS %s", inc.id, "; ".join(notes) if notes else "found nothing more")

    async def _open(self, ev: IncidentEvent, snap: Snapshot) -> None:
        cfg = self.cfg
        d = incident_dir(cfg.dir, ev.at, ev.groups[0] if ev.groups else "job")
        inc = Incident(d.name, d, ev.started_at, ev.at, list(ev.groups), snap.phase, last_event_at=ev.at, first=snap,
                       snap=snap, kind="death" if ev.died and not ev.stalled else "hang")
        self.current, self.job = inc, None
        log.info("stall in %s (%d stalled, %d died): capturing", ", ".join(ev.groups), len(ev.stalled),
                 len(ev.died))
        recent = [t for t in self.captures if t > time.time() - 3600]
        if cfg.max_captures_per_hour <= 0:
            inc.capture_note = "stacks not taken (--max-captures 0)"
        elif len(recent) >= cfg.max_captures_per_hour:
            inc.capture_note = (f"stacks not taken: {len(recent)} captures in the last hour already "
                                f"(--max-captures {cfg.max_captures_per_hour})")
        else:
            await self._capture(inc, snap)
        inc.analyse()
        self._record_incident(inc, "opened")  # before the write: the incident's recording holds it
        await self._write(inc)
        self.incidents.append(inc.id)
        self._notify(inc)
        if self.job is not None and self.job.ras_pending:
            self._spawn(self._ras_later(inc, self.job))
        for name in prune_incidents(cfg.dir, cfg.keep_incidents):
            log.info("deleted old incident %s (--keep-incidents %d)", name, cfg.keep_incidents)

    async def _capture(self, inc: Incident, snap: Snapshot) -> None:
        """Every process of the job, ``samples`` times; native frames for ranks on a pegged GPU."""
        cfg = self.cfg
        targets = dump_targets(snap.actors, None)
        pegged = frozenset(a.actor_id for a in targets if cfg.native_on_pegged and a.state == "ALIVE"
                           and a.gpu_util_percent is not None and a.gpu_util_percent >= 90)
        opts = DumpOptions(samples=max(1, cfg.samples), interval_s=1.0, via=cfg.via)
        job = self.engine.dump(snap, None, opts, native_ids=pegged)
        job.ras_later = True  # a probe's ray.init can take 15 s: the incident is written first (``_ras_later``)
        self.job = job
        if not job.targets:
            inc.capture_note = "stacks not taken: no verl worker or controller in the snapshot"
            return
        self.captures.append(time.time())
        inc.captures += 1
        try:
            report = await within(job.run(), cfg.capture_timeout_s)
        except asyncio.TimeoutError:
            inc.capture_note = f"the stack capture did not finish within {cfg.capture_timeout_s:g} s"
            return
        if report is None:
            inc.capture_note = f"the stack capture failed: {job.problem.text if job.problem else 'unknown error'}"
            return
        if any(a.fr_pipe_prefix for a in job.targets):
            with contextlib.suppress(asyncio.TimeoutError):
                fresh, notes = await within(job.refresh_flight_recorder(), 30)
                report = fresh or report
                for n in notes:
                    inc.escalate(time.time(), "flight_recorder", f"Flight Recorder: {n}")
        inc.report = report
        assert self.recorder is not None
        self.recorder.dump(report, None, inc.id)

    async def _write(self, inc: Incident) -> None:
        """The recording around the incident, then its files (incident.json names the recording)."""
        cfg = self.cfg
        assert self.recorder is not None
        t0 = (inc.started_at if inc.started_at is not None else inc.detected_at) - cfg.before_s
        t1 = min(time.time(), max(inc.last_event_at, inc.detected_at) + cfg.after_s)
        if inc.closed_at is not None:
            t1 = min(t1, inc.closed_at + 5)
        await write_with_recording(inc, self.recorder, cfg.dir, t0, t1)

    def _record_incident(self, inc: Incident, stage: str) -> None:
        assert self.recorder is not None
        self.recorder.event(inc.detected_at, rf.INCIDENT, {
            "id": inc.id, "stage": stage, "started_at": inc.started_at, "detected_at": inc.detected_at,
            "closed_at": inc.closed_at, "groups": list(inc.groups), "summary": inc.summary, "dir": str(inc.dir)})

    # ---------------------------------------------------------- telling someone

    def _notify(self, inc: Incident) -> None:
        for fn in self.on_open:
            fn(incident_kind(inc))
        cfg = self.cfg
        line = f"{utc_time(inc.detected_at)} INCIDENT {inc.id}: {inc.summary} [{inc.dir}]"
        self.say(line)
        log.info(line)
        if cfg.on_incident:
            self._spawn(self._hook(run_hook(cfg.on_incident, {"VERLTOP_INCIDENT_DIR": str(inc.dir),
                                                               "VERLTOP_INCIDENT_ID": inc.id}, cfg.hook_timeout_s)))
        if cfg.webhook:
            text = scrub(f"verltop: {inc.summary} ({inc.dir})", [self.engine.endpoint.token])
            self._spawn(self._hook(post_webhook(cfg.webhook, text, cfg.webhook_timeout_s, cfg.webhook_tries)))

    async def _hook(self, coro: Coroutine[Any, Any, Any]) -> None:
        r = await coro
        (log.info if r.ok else log.warning)("%s", r.detail)

    # ---------------------------------------------------------- background loops

    async def _status_loop(self) -> None:
        """Dashboard outages and recoveries: into the recording (status events) and the watch log. And
        once a minute, freed heap back to the OS (multi-MB answers parsed in threads fragment glibc's
        arenas: RSS crept ~0.1 MB a minute over a soak without it)."""
        heap = HeapTrim()
        while True:
            await asyncio.sleep(self.cfg.status_every_s)
            try:
                self._check_status()
            except Exception:
                log.error("status check failed", exc_info=True)
            heap.tick()

    def _check_status(self) -> None:
        assert self.recorder is not None
        if self.recorder.dropped > self._dropped:
            log.warning("the recording fell behind: %d snapshots not written (a slow disk?)",
                        self.recorder.dropped - self._dropped)
            self._dropped = self.recorder.dropped
        p: Problem | None = self.engine.connection_problem()
        if p is None and self.engine.src.actors.error is not None:
            p = self.engine.src.actors.error
        text = p.text if p else None
        if text == self._status:
            return
        now = time.time()
        if text is not None:
            self._down_since = self._down_since or now
            log.warning("dashboard: %s", text)
        elif self._down_since is not None:
            log.warning("dashboard answers again (after %.0f s)", now - self._down_since)
            self._down_since = None
        self._status = text
        self.recorder.event(now, rf.STATUS, {"problem": to_data(p), "text": text})
        for name in self.recorder.writer.deleted:
            log.info("deleted recording segment %s (--keep / --max-size)", name)
        self.recorder.writer.deleted.clear()

    async def _evidence_loop(self) -> None:
        """While an incident is open: the NCCL watchdog's lines (they come at the collective's timeout) and
        Flight Recorder files, read again; new ones escalate the incident (no py-spy: reading logs and
        files never pauses a rank)."""
        while True:
            await asyncio.sleep(self.cfg.evidence_every_s)
            try:
                await self._evidence()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.error("re-reading the evidence failed", exc_info=True)

    async def _evidence(self) -> None:
        inc, job = self.current, self.job
        if inc is None or inc.snap is None:
            return
        if job is None:  # no capture: the same reads, without stacks
            job = self.engine.dump(inc.snap, None, DumpOptions())
        found, notes = await job.evidence(job.samples)
        new = {k: c for k, c in found.items() if job.collectives.get(k) != c}
        if not new and not set(notes) - set(job.notes):
            return
        async with self._lock:
            if self.current is not inc:
                return
            rows = {a.actor_id: a for a in job.targets}
            for aid, c in new.items():
                inc.escalate(time.time(), "collective", _collective_text(rows.get(aid), c))
            report = job.add_evidence(found, notes)
            await self._escalated(inc, report if inc.report is not None else None, time.time())



def incident_kind(inc: Any) -> str:
    """What opened an incident: its own ``kind`` where it has one, else ``hang`` when the snapshot that opened
    it had stalled actors in its groups, ``death`` when only deaths did."""
    kind = getattr(inc, "kind", None) or getattr(getattr(inc, "episode", None), "kind", None)
    if isinstance(kind, str) and kind:
        return kind
    first = getattr(inc, "first", None)
    groups = set(inc.groups)
    stalled = first is not None and any(a.stalls and a.state not in ("DEAD", "RESTARTING")
                                        and (a.worker_group or a.role) in groups for a in first.actors)
    return "hang" if stalled or first is None else "death"


def _label(a: ActorRow | None) -> str:
    return "?" if a is None else label(a)


def _collective_text(a: ActorRow | None, c: CollectiveInfo) -> str:
    src = "NCCL watchdog" if c.source == "watchdog_log" else "Flight Recorder"
    return (f"{src} on {_label(a)}: {c.op or '?'} #{c.seq if c.seq is not None else '?'} (last enqueued "
            f"{c.last_enqueued}, last completed {c.last_completed})")
