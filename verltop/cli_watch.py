"""The ``watch`` and ``replay`` commands and ``--record``: their options and how they start.

Kept apart from ``cli.py`` (which keeps the shared options and the dispatch); the same rules hold: imports
deferred to the command that needs them, user errors as one line (``UserError``), never a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def duration_arg(v: str) -> float:
    """``90``, ``90s``, ``15m``, ``24h``, ``7d`` → seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", v.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"{v!r} is not a duration (e.g. 90s, 15m, 24h)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def size_arg(v: str) -> int:
    """``500M``, ``2G``, ``1.5g``, ``1048576`` → bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", v.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"{v!r} is not a size (e.g. 500M, 2G)")
    return int(float(m.group(1)) * _SIZES[m.group(2)])


def default_watch_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "verltop" / "watch"


def add_watch(sub: Any, shared: Any) -> None:
    w = sub.add_parser("watch", help="headless: record the job, capture every hang as an incident directory",
                       description="Run on the head node for days: records each snapshot into a bounded "
                       "recording and, when a stall starts or a rank dies, dumps every process of the job at "
                       "once and writes DIR/incidents/<UTC time>-<group>/ (summary.txt, incident.json, dump.json, "
                       "recording.vtr). SIGTERM or Ctrl-C ends it cleanly.")
    shared(w)
    w.add_argument("--dir", metavar="DIR", default=None,
                   help=f"where the recording, incidents and watch.log go (default {default_watch_dir()})")
    w.add_argument("--keep", type=duration_arg, default=86400.0, metavar="AGE",
                   help="recording kept this long (default 24h)")
    w.add_argument("--max-size", type=size_arg, default=2 << 30, metavar="SIZE",
                   help="recording capped at this size; the oldest segment files go first (default 2G)")
    w.add_argument("--segment", type=duration_arg, default=3600.0, metavar="AGE",
                   help="a new recording file this often (default 1h); --keep and --max-size delete whole files")
    w.add_argument("--before", type=duration_arg, default=300.0, metavar="AGE",
                   help="recording an incident keeps from before its hang began (default 5m)")
    w.add_argument("--clear-after", type=duration_arg, default=60.0, metavar="AGE",
                   help="an incident ends when its groups have had no stall this long (default 60s)")
    w.add_argument("--max-captures", type=int, default=6, metavar="N",
                   help="stack captures (py-spy on every rank) per hour at most (default 6)")
    w.add_argument("--samples", type=int, default=3, metavar="N", help="stack samples ~1 s apart (default 3)")
    w.add_argument("--memory-steps", type=float, default=10.0, metavar="N",
                   help="a memory incident when a rank's forecast is N steps or fewer before its memory limit "
                        "(or less than 5 %% of it is left; default 10)")
    w.add_argument("--no-native", action="store_true",
                   help="no native frames for ranks on a pegged GPU (native dumps pause a rank longer)")
    w.add_argument("--via", choices=("auto", "local", "dashboard", "probe"), default="auto",
                   help="how to reach ranks on other nodes (as `verltop dump --via`)")
    w.add_argument("--on-incident", metavar="CMD",
                   help="shell command run for each new incident, with $VERLTOP_INCIDENT_DIR set; its failure "
                   "never stops the watch")
    w.add_argument("--hook-timeout", type=duration_arg, default=60.0, metavar="S",
                   help="--on-incident is killed after this long (default 60s)")
    w.add_argument("--webhook", metavar="URL",
                   help='POST {"text": summary} (Slack, Mattermost, Teams…) for each new incident')
    w.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics (GET /metrics) on this port: stalls, suspects, deaths, steps, "
                   "phases, anomalies, the rollout engines' load (docs/prometheus.md)")
    w.add_argument("--metrics-addr", default="127.0.0.1", metavar="ADDR",
                   help="the address --metrics-port listens on (default 127.0.0.1; 0.0.0.0 for every interface)")
    w.add_argument("--keep-incidents", type=int, default=200, metavar="N",
                   help="incident directories kept; older ones are deleted (default 200)")


def add_replay(sub: Any) -> None:
    r = sub.add_parser("replay", help="open a recording (or an incident directory) in the TUI",
                       description="The TUI on recorded data: Space pauses, ←/→ step, [ and ] change the speed, "
                       "i jumps to the next incident, d and D open the recorded dump.")
    r.add_argument("path", metavar="FILE_OR_DIR",
                   help="a recording (--record FILE), an incident directory, or a watch directory")
    r.add_argument("--at", metavar="WHEN",
                   help="start at this time: 2026-11-29T03:12, 03:12:40 (that day), +90s from the start, "
                   "-5m before the end")
    r.add_argument("--speed", type=float, default=1.0, metavar="X", help="playback speed (default 1)")
    r.add_argument("--paused", action="store_true", help="start paused")
    r.add_argument("--log-file", metavar="FILE", help="where the TUI logs its own problems")


def parse_when(v: str, start: float, end: float) -> float:
    """``--at``: an ISO date-time (local time unless it says), a time of day on the recording's first day,
    or ``+D`` / ``-D`` from its start / end."""
    v = v.strip()
    if v[:1] in "+-":
        d = duration_arg(v[1:])
        return start + d if v[0] == "+" else end - d
    try:
        if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", v):
            day = datetime.fromtimestamp(start).date().isoformat()
            return datetime.fromisoformat(f"{day}T{v}").timestamp()
        return datetime.fromisoformat(v).timestamp()
    except ValueError:
        raise ValueError(f"--at {v!r}: not a time (2026-11-29T03:12, 03:12:40, +90s, -5m)") from None


def record_writer(path: str, address: str, stall_after_s: float) -> Any:
    """``--record FILE``: a new recording (never over an existing file)."""
    from verltop.engine.recording_writer import Recorder, RecordingWriter, base_meta

    p = Path(path).expanduser()
    if p.exists():
        raise FileExistsError(f"--record {path}: the file exists; pick a new name (recordings are never overwritten)")
    if not p.parent.is_dir():
        raise FileNotFoundError(f"--record {path}: no directory {p.parent}")
    from verltop import __version__

    return Recorder(RecordingWriter(p, base_meta("tui", address, verltop=__version__, stall_after_s=stall_after_s)))


def replay_engine(args: argparse.Namespace) -> Any:
    """The replay engine for ``verltop replay`` (ValueError with one line when it cannot)."""
    from verltop.engine.recording_format import RecordingError
    from verltop.engine.recording_reader import Recording
    from verltop.engine.replay import LEAD_S, ReplayEngine

    try:
        rec = Recording.open(args.path)
    except RecordingError as e:
        raise ValueError(str(e)) from None
    start, end = rec.start_s or 0.0, rec.end_s or 0.0
    at = None
    if args.at:
        at = parse_when(args.at, start, end)
    else:
        inc = rec.meta.get("incident") if isinstance(rec.meta.get("incident"), dict) else None
        began = (inc or {}).get("started_at") or (inc or {}).get("detected_at")
        if isinstance(began, (int, float)):
            at = began - LEAD_S  # an incident's recording: start shortly before the hang
    name = Path(args.path).name or str(args.path)
    eng = ReplayEngine(rec, start_at=at, speed=max(0.125, min(256.0, args.speed)), paused=args.paused, name=name)
    return eng


def replay(args: argparse.Namespace) -> int:
    from verltop import logsetup
    from verltop.ui.app import VerltopApp

    engine = replay_engine(args)
    logsetup.to_file(args.log_file)
    app = VerltopApp(engine)
    app.run()
    return app.return_code or 0


def watch(args: argparse.Namespace) -> int:
    """``verltop watch``: until SIGTERM / SIGINT; exit 0 when it ended cleanly."""
    import asyncio
    import signal
    import sys

    from verltop import __version__
    from verltop.analysis.stalls import StallSettings
    from verltop.engine.monitor import Intervals, Monitor
    from verltop.engine.notify import check_webhook
    from verltop.engine.watch import Watcher, WatchLocked, WatchSettings
    from verltop.sources.config import resolve

    if args.webhook and (bad := check_webhook(args.webhook)):
        raise ValueError(bad)
    if args.samples < 1 or args.max_captures < 0:
        raise ValueError("--samples must be ≥ 1 and --max-captures ≥ 0")
    if args.memory_steps < 0:
        raise ValueError("--memory-steps must be ≥ 0")
    if args.metrics_port is not None and not 0 < args.metrics_port < 65536:
        raise ValueError(f"--metrics-port {args.metrics_port}: not a TCP port (1-65535)")
    d = Path(args.dir).expanduser() if args.dir else default_watch_dir()
    interval = getattr(args, "interval", None) or float(os.environ.get("VERLTOP_INTERVAL") or 2.0)
    stall_after = getattr(args, "stall_after", None) or float(os.environ.get("VERLTOP_STALL_AFTER") or 300.0)
    endpoint = resolve(getattr(args, "address", None))
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise ValueError(f"--dir {d}: {e.strerror or e}") from None
    log_path = watch_log(d)
    cfg = WatchSettings(
        dir=d, keep_s=args.keep, max_bytes=args.max_size, before_s=args.before, clear_after_s=args.clear_after,
        max_captures_per_hour=args.max_captures, samples=args.samples, native_on_pegged=not args.no_native,
        via=args.via, on_incident=args.on_incident, hook_timeout_s=args.hook_timeout, webhook=args.webhook,
        keep_incidents=args.keep_incidents, segment_s=args.segment, memory_steps=args.memory_steps,
        meta={"verltop": __version__, "address": endpoint.address, "stall_after_s": stall_after})
    mon = Monitor(endpoint, Intervals.every(interval, args.timeout), StallSettings(stall_after_s=stall_after),
                  use_local=not getattr(args, "no_local", False),
                  ras_addrs=tuple(getattr(args, "ras_addr", None) or ()))
    mon.training.metrics_file = getattr(args, "metrics_file", None)

    def say(line: str) -> None:
        print(line, flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: None)  # the terminal went away: keep watching
        watcher = Watcher(mon, cfg, say)
        watcher.take_lock()  # a second watch on DIR refuses before the banner
        runner = await metrics_endpoint(args, mon, watcher, say) if args.metrics_port is not None else None
        say(f"verltop watch: {endpoint.address} → {d} (recording kept {args.keep / 3600:g} h, at most "
            f"{args.max_size / (1 << 30):g} GiB; log {log_path}); stop with SIGTERM or Ctrl-C")
        try:
            await watcher.run(stop)
        finally:
            if runner is not None:
                await runner.cleanup()

    try:
        asyncio.run(main())
    except WatchLocked as e:
        raise ValueError(str(e)) from None
    say("verltop watch: stopped")
    sys.stdout.flush()
    return 0


async def metrics_endpoint(args: argparse.Namespace, mon: Any, watcher: Any, say: Any) -> Any:
    """``--metrics-port``: the Prometheus endpoint over the watch's snapshots (ValueError when it cannot bind)."""
    from verltop.engine.exporter import Exporter, registry, serve

    exp = Exporter(lambda: mon.latest, watcher.suspects)
    mon.rollout_probe = True  # every replica's load, on every node (their sockets through the probe there)
    mon.subscribe(exp.observe)
    watcher.on_open.append(exp.incident)
    host = args.metrics_addr
    try:
        runner = await serve(registry(exp), host, args.metrics_port)
    except OSError as e:
        raise ValueError(f"--metrics-port {args.metrics_port} on {host}: {e.strerror or e}") from None
    shown = f"[{host}]" if ":" in host else host
    say(f"verltop watch: Prometheus metrics at http://{shown}:{args.metrics_port}/metrics")
    return runner


def watch_log(d: Path) -> Path:
    """The watch's own log: DIR/watch.log (INFO and up, 0600, rotated at 5 MB × 3); warnings also on stderr."""
    import logging
    import logging.handlers

    p = d / "watch.log"
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.close(fd)
    h = logging.handlers.RotatingFileHandler(p, maxBytes=5 << 20, backupCount=3, encoding="utf-8")
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("verltop")
    root.addHandler(h)
    root.setLevel(logging.INFO)
    for handler in root.handlers:
        if not isinstance(handler, logging.handlers.RotatingFileHandler):
            handler.setLevel(logging.WARNING)
    return p
