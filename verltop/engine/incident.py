"""One incident directory: ``DIR/incidents/<UTC time>-<group>/`` with ``summary.txt`` (the diagnosis in one
paragraph), ``incident.json``, ``dump.json`` (the ``dump --json`` contract) and ``recording.vtr`` (the
recording around it). Written when the incident opens and rewritten as it escalates and when it ends; each
file is replaced whole (written beside it, then renamed), mode 0600, so a reader never sees half a file.

``incident.json``: ``{"kind", "id", "started_at", "detected_at", "closed_at", "phase", "groups", "suspects",
"chains", "evidence", "deaths", "waits", "summary", "recording", "dump", "captures", "escalations"}``;
times are Unix seconds; unknown values are null, lists empty, never absent. ``kind`` is "hang" or "death" here;
"anomaly" and "slow" incidents are written by ``engine.watch_training``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verltop.analysis.chains import group_chains
from verltop.analysis.merge import compact_labels
from verltop.engine import recording_format as rf
from verltop.engine.recording_format import SEGMENTS
from verltop.engine.recording_reader import Recording, export_window
from verltop.model import DumpReport, Snapshot
from verltop.text.cells import utc_stamp, utc_time
from verltop.text.chains import chain_text
from verltop.text.contract import chain_json, dump_json, suspect_json
from verltop.text.incidents import Diagnosis, diagnose, incident_summary

INCIDENTS = "incidents"


def incident_dir(root: Path, detected_at: float, group: str) -> Path:
    """``root/incidents/20261129T031258Z-<group>`` (a suffix when that exists already)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", group)[:40] or "job"
    base = root / INCIDENTS / f"{utc_stamp(detected_at)}-{safe}"
    p, n = base, 1
    while p.exists():
        n += 1
        p = base.with_name(f"{base.name}-{n}")
    return p


def make_dir(d: Path) -> None:
    """``d`` and its parent (the incidents directory), private."""
    for p in (d.parent, d):
        p.mkdir(exist_ok=True, mode=0o700)


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def chain_texts(report: DumpReport | None) -> tuple[list[Any], tuple[str, ...]]:
    """The report's wait chains as the dump contract has them, and as sentences (chains that differ only in
    which peer they pass through once, with a count)."""
    if report is None:
        return [], ()
    texts = tuple(chain_text(c) + (f" (×{n})" if n > 1 else "") for c, n in group_chains(report.chains))
    return [chain_json(c) for c in report.chains], texts


@dataclass(slots=True)
class Incident:
    """What is known of one incident; ``write`` puts it on disk."""

    id: str
    dir: Path
    started_at: float | None
    detected_at: float
    groups: list[str]
    phase: str | None
    closed_at: float | None = None
    report: DumpReport | None = None
    capture_note: str | None = None  # why no stacks were taken, when they were not
    captures: int = 0
    escalations: list[dict[str, Any]] = field(default_factory=list)
    last_event_at: float = 0.0
    first: Snapshot | None = None  # the snapshot it was detected in
    snap: Snapshot | None = None  # the latest snapshot seen while it was open
    diagnosis: Diagnosis | None = None
    summary: str = ""
    recording_bytes: int | None = None
    kind: str = "hang"  # "hang" (a stall opened it) or "death" (a rank died, nothing stalled)

    def escalate(self, t: float, kind: str, text: str) -> None:
        self.escalations.append({"at": t, "kind": kind, "text": text})
        self.last_event_at = t

    def analyse(self) -> None:
        first = self.first or self.snap
        assert first is not None
        notes = tuple(e["text"] for e in self.escalations)
        if self.capture_note:
            notes = (self.capture_note, *notes)
        _, chains = chain_texts(self.report)
        self.diagnosis = diagnose(first, self.report, tuple(self.groups), chains, notes, self.snap)
        began = utc_time(self.started_at) if self.started_at is not None else "-"
        self.summary = incident_summary(self.diagnosis, began, utc_time(self.detected_at))

    def to_json(self) -> dict[str, Any]:
        d = self.diagnosis
        chains_json, _ = chain_texts(self.report)
        return {
            "kind": self.kind,
            "id": self.id,
            "started_at": self.started_at,
            "detected_at": self.detected_at,
            "closed_at": self.closed_at,
            "phase": d.phase if d else self.phase,
            "groups": list(self.groups),
            "suspects": [suspect_json(s) for s in d.suspects] if d else [],
            "chains": chains_json,
            "evidence": list(d.evidence) if d else [],
            "deaths": list(d.deaths) if d else [],
            "waits": [{"group": w.group, "op": w.op, "ranks": compact_labels(w.ranks), "count": len(w.ranks),
                       "frame": w.frame, "collective": w.collective} for w in d.waits] if d else [],
            "summary": self.summary,
            "recording": "recording.vtr" if self.recording_bytes is not None else None,
            "dump": "dump.json" if self.report is not None else None,
            "captures": {"stacks": self.captures, "note": self.capture_note},
            "escalations": list(self.escalations),
        }

    def write(self) -> None:
        """summary.txt, incident.json and dump.json (the recording is exported by the caller)."""
        make_dir(self.dir)
        self.analyse()
        write_atomic(self.dir / "summary.txt", self.summary + "\n")
        if self.report is not None:
            write_atomic(self.dir / "dump.json", json.dumps(dump_json(self.report), indent=1) + "\n")
        write_atomic(self.dir / "incident.json", json.dumps(self.to_json(), indent=1) + "\n")

    def meta(self) -> dict[str, Any]:
        """What the incident's recording says about it (``verltop replay`` starts before the hang)."""
        return {"incident": {"id": self.id, "started_at": self.started_at, "detected_at": self.detected_at,
                             "groups": list(self.groups)}}


def prune_incidents(root: Path, keep: int) -> list[str]:
    """Delete the oldest incident directories beyond ``keep`` (names sort by time)."""
    d = root / INCIDENTS
    if keep <= 0 or not d.is_dir():
        return []
    dirs = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
    gone = []
    for p in dirs[: max(0, len(dirs) - keep)]:
        shutil.rmtree(p, ignore_errors=True)
        gone.append(p.name)
    return gone


async def write_with_recording(inc: Any, recorder: Any, watch_dir: Path, t0: float, t1: float) -> None:
    """The recording of ``[t0, t1]`` from the watch's segments into the incident's directory, then its files
    (``incident.json`` names the recording). A recording that cannot be written is logged; the files still are."""
    if recorder is not None:
        await asyncio.to_thread(recorder.flush)

    def export() -> int:
        make_dir(inc.dir)
        rec = Recording.open(watch_dir / SEGMENTS, since=t0)
        try:
            return export_window(rec, inc.dir / "recording.vtr", t0, t1, inc.meta())
        finally:
            rec.close()

    try:
        inc.recording_bytes = await asyncio.to_thread(export)
    except (OSError, rf.RecordingError) as e:
        logging.getLogger("verltop.watch").error("incident %s: cannot write its recording: %s", inc.id, e)
    await asyncio.to_thread(inc.write)
