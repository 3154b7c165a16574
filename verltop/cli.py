"""``verltop`` command line: the TUI (default), ``snapshot``, ``dump``, ``doctor`` and ``demo``.

Imports are deferred to the subcommand that needs them: ``verltop dump --json`` must start fast, and
nothing on the TUI's path imports ray.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from typing import Any

from verltop import __version__

EPILOG = """\
environment (the flag wins over the variable):
  RAY_DASHBOARD_ADDRESS, RAY_ADDRESS (when http://…)   dashboard address; default http://127.0.0.1:8265, else
                                                      (nothing there) the latest local Ray session's dashboard
  RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token   Ray auth token (sent as a Bearer header)
  VERLTOP_INTERVAL, VERLTOP_STALL_AFTER                   defaults for --interval and --stall-after
"""


class UserError(Exception):
    """A problem the user can fix; printed as one line, exit 2."""


def _env_float(name: str, default: float) -> float:
    v = os.environ.get(name)
    if not v:
        return default
    try:
        return float(v)
    except ValueError:
        raise UserError(f"{name}={v!r} is not a number") from None


def _positive(v: str) -> float:
    try:
        f = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a number") from None
    if f <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return f


def _count(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError("must be ≥ 1")
    return n


def _shared(p: argparse.ArgumentParser, sub: bool = True) -> None:
    # Subparsers must not reset what was given before the subcommand (`verltop --address X dump`).
    d = {"default": argparse.SUPPRESS} if sub else {}
    p.add_argument("--address", **d, help="Ray dashboard URL (default: $RAY_DASHBOARD_ADDRESS, $RAY_ADDRESS if "
                   "http, else http://127.0.0.1:8265, else the dashboard of the latest local Ray session)")
    p.add_argument("--interval", type=_positive, metavar="S", **d,
                   help="seconds between dashboard polls (default 2)")
    p.add_argument("--timeout", type=_positive, metavar="S", **(d or {"default": 10.0}),
                   help="per-request timeout (default 10)")
    p.add_argument("--stall-after", type=_positive, metavar="S", **d,
                   help="call a task stalled after this many seconds (default 300)")
    p.add_argument("--no-local", action="store_true", **d, help="do not read this machine's processes and GPUs")
    p.add_argument("--ras-addr", metavar="HOST:PORT", action="append", **d,
                   help="NCCL RAS address of a job on this machine (repeatable; default: each rank's NCCL_RAS_ADDR, "
                        "else localhost:28028)")
    p.add_argument("--metrics-file", metavar="PATH", **d,
                   help="verl's file-backend metrics (JSONL) to read instead of the trainer's log")
    p.add_argument("--log-file", metavar="FILE", **d,
                   help="where the TUI logs its own problems (default ~/.local/state/verltop/verltop.log)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="verltop",
        description="Live view of a verl training job on Ray: roles, ranks, GPUs, stalls, cross-rank stacks.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"verltop {__version__}")
    _shared(p, sub=False)
    p.add_argument("--record", metavar="FILE", help="record the TUI session into FILE (verltop replay FILE)")
    sub = p.add_subparsers(dest="cmd", metavar="{tui,snapshot,dump,memory,doctor,demo,watch,replay}")

    from verltop import cli_memory, cli_watch

    t = sub.add_parser("tui", help="the interactive view (default)")
    _shared(t)
    t.add_argument("--record", metavar="FILE", default=argparse.SUPPRESS,
                   help="record the TUI session into FILE (verltop replay FILE)")

    s = sub.add_parser("snapshot", help="print one snapshot of the cluster")
    _shared(s)
    s.add_argument("--json", action="store_true", help="JSON (the documented contract)")
    s.add_argument("--cpu-window", type=float, default=0.0, metavar="S",
                   help="also sample local processes twice S seconds apart for their CPU %% (default 0: actors "
                   "carry the dashboard agent's figure, their child processes none)")
    s.add_argument("--watch-dir", metavar="DIR", default=None,
                   help="the directory of a running `verltop watch`: its recorded history fills what one snapshot "
                   "cannot know (memory by phase, growth, headroom; actors' memory peaks); default: the watch's "
                   "default directory when a watch runs there")
    s.add_argument("--remote-processes", action="store_true",
                   help="also read the process trees of actors on other nodes, through a probe actor per node "
                   "(needs ray on this machine; without it they are null)")

    d = sub.add_parser("dump", help="dump every rank's stack, merged, with suspects")
    _shared(d)
    d.add_argument("--group", metavar="PREFIX", help="only this worker group (its WG_PREFIX)")
    d.add_argument("--native", action="store_true", help="include native frames (slower; pauses each rank)")
    d.add_argument("--nonblocking", action="store_true",
                   help="do not pause the ranks while reading them (stacks may be torn)")
    d.add_argument("--samples", type=_count, default=2, metavar="N",
                   help="samples ~1 s apart to tell stuck from slow (default 2; 1 = fastest)")
    d.add_argument("--via", choices=("auto", "local", "dashboard", "probe"), default="auto",
                   help="how to reach ranks: auto (local py-spy here, dashboard or probe elsewhere)")
    d.add_argument("--dump-timeout", type=_positive, default=None, metavar="S",
                   help="per-process py-spy timeout (default 5, 30 with --native)")
    d.add_argument("--json", action="store_true", help="JSON (the documented contract)")
    d.add_argument("--output", "-o", metavar="FILE", help="also write the dump to FILE (mode 0600)")
    d.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    d.add_argument("--no-logs", action="store_true", help="do not read NCCL watchdog lines from worker logs")

    cli_memory.add_memory(sub, _shared)

    c = sub.add_parser("doctor", help="pre-flight check of every node: versions, GPUs, NCCL environment, disks, "
                       "clocks, shared storage")
    _shared(c)
    c.add_argument("--json", action="store_true", help="JSON (the documented contract)")
    c.add_argument("--path", metavar="SHARED_DIR",
                   help="also check that this directory exists, is writable and is shared by every node")
    c.add_argument("--node-timeout", type=_positive, default=30.0, metavar="S",
                   help="give up on a node that has not answered after this many seconds (default 30)")

    m = sub.add_parser("demo", help="run a small verl job on a local Ray cluster that hangs on purpose")
    _shared(m)
    m.add_argument("--hang-after", type=int, default=3, metavar="N",
                   help="steps before one rank hangs (default 3; 0 = only on the H key)")
    m.add_argument("--hang-rank", type=int, default=2, metavar="R", help="which actor rank hangs (default 2)")
    m.add_argument("--hang", choices=("rank", "tp1", "sandbox"), default="rank",
                   help="what hangs after --hang-after steps: a trainer rank in update_actor (default), TP worker 1 "
                   "of the rollout server in its weight load, or a reward sandbox that never returns; the keys H "
                   "and T hang a rank or TP worker 1 at any time")
    m.add_argument("--leak", action="store_true",
                   help="one rank of actor_rollout keeps more host memory after every update_actor (--leak-mib "
                   "per step, up to 1 GiB, then it stops growing): the memory screen (m) flags it with its phase "
                   "within a few steps")
    m.add_argument("--leak-rank", type=int, default=1, metavar="R", help="which actor rank leaks (default 1)")
    m.add_argument("--leak-mib", type=int, default=64, metavar="MIB", help="MiB kept per step (default 64)")
    m.add_argument("--no-tui", action="store_true", help="leave the job running for other tools; Ctrl-C ends it")
    m.add_argument("--record", metavar="FILE", default=argparse.SUPPRESS, help="record the TUI session into FILE")
    cli_watch.add_watch(sub, _shared)
    cli_watch.add_replay(sub)
    return p


ONE_SHOT = frozenset({"snapshot", "dump", "memory", "doctor"})
_ended: list[str] = []  # the command main() ran (``run`` ends a one-shot one at once)


def run() -> None:
    """The ``verltop`` command: ``main``, then a one-shot command's process ends at once. Its output is
    written and flushed; what is left is Python tearing down a thousand modules and their objects, ~25 ms
    of a dump's 0.3 s, and, where its probes joined the Ray cluster, Ray's exit handler shutting a driver down
    (most of a second; the probes die with the driver anyway: none is detached). ``main`` itself never ends
    the process: a caller that is a Ray driver of its own (a test beside the demo) goes on. The TUI, watch,
    replay and demo end normally (the demo's exit handlers stop Ray)."""
    rc = main()
    if _ended and _ended[0] in ONE_SHOT:
        logging.shutdown()
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except (OSError, ValueError):  # a reader that left (BrokenPipe), a closed stream
                pass
        os._exit(rc)
    sys.exit(rc)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cmd = args.cmd or "tui"
        _ended[:] = [cmd]
        if cmd != "tui":
            from verltop import logsetup

            logsetup.to_stderr()
        if cmd == "snapshot":
            from verltop.engine.prefetch import prefetch_snapshot
            from verltop.sources.config import resolve

            # the reads go out before the engine is imported (as dump's do)
            pre = prefetch_snapshot(resolve(args.address), args.timeout, nodes=args.cpu_window <= 0,
                                    trainer_log=not getattr(args, "metrics_file", None))
            return asyncio.run(_snapshot(args, pre))
        if cmd == "dump":
            return asyncio.run(_dump(args, _prefetch(args)))
        if cmd == "memory":
            from verltop.cli_memory import memory

            return memory(args, _monitor, UserError)
        if cmd == "doctor":
            return asyncio.run(_doctor(args))
        if cmd == "demo":
            return _demo(args)
        if cmd == "watch":
            from verltop.cli_watch import watch

            try:
                return watch(args)
            except ValueError as e:
                raise UserError(str(e)) from None
        if cmd == "replay":
            from verltop.cli_watch import replay

            try:
                return replay(args)
            except ValueError as e:
                raise UserError(str(e)) from None
        return _tui(args)
    except UserError as e:
        print(f"verltop: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `verltop dump --json | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _print_json(doc: Any, large: bool) -> None:
    """JSON to stdout; a large one (a dump of a thousand ranks is megabytes) through orjson, in C."""
    if large and hasattr(sys.stdout, "buffer"):
        try:
            import orjson

            sys.stdout.flush()
            sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
            sys.stdout.buffer.flush()
            return
        except ImportError:
            pass
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


def _settings(args: argparse.Namespace) -> tuple[Any, Any]:
    from verltop.analysis.stalls import StallSettings
    from verltop.engine.monitor import Intervals

    interval = args.interval or _env_float("VERLTOP_INTERVAL", 2.0)
    stall_after = args.stall_after or _env_float("VERLTOP_STALL_AFTER", 300.0)
    return Intervals.every(interval, args.timeout), StallSettings(stall_after_s=stall_after)


def _monitor(args: argparse.Namespace, nvml: bool | None = True, prefetch: Any = None) -> Any:
    from verltop.engine import oneshot
    from verltop.sources.config import resolve

    iv, st = _settings(args)
    mon = oneshot.monitor(resolve(args.address), iv, st, use_local=not args.no_local,
                          ras_addrs=tuple(args.ras_addr or ()), nvml=nvml, prefetch=prefetch)
    mon.training.metrics_file = getattr(args, "metrics_file", None)
    return mon


async def _snapshot(args: argparse.Namespace, prefetch: Any = None) -> int:
    from verltop.engine import oneshot

    try:
        snap = await oneshot.snapshot(_monitor(args, nvml=None, prefetch=prefetch), cpu_window_s=args.cpu_window,
                                      remote_processes=args.remote_processes)
    except oneshot.OneShotError as e:
        raise UserError(str(e)) from None
    snap, memory_note = _borrow_history(snap, args.watch_dir)
    if args.json:
        from verltop.text.contract import snapshot_json

        doc = snapshot_json(snap)
        if "memory" not in doc:
            from verltop.codec import to_data

            doc["memory"] = None if snap.memory is None else to_data(snap.memory)
        if memory_note is not None or "memory_note" not in doc:
            doc["memory_note"] = memory_note
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        if snap.truncated:  # the JSON has no field for it; a script's user must still learn of it
            print(f"verltop: warning: {snap.truncated}", file=sys.stderr)
    else:
        from verltop.text.snapshot import snapshot_text

        print(snapshot_text(snap))
        if memory_note:
            print(f"note: {memory_note}")
    return 0


def _borrow_history(snap: Any, watch_dir: str | None) -> tuple[Any, str | None]:
    """The running watch's history lent to a one-shot snapshot (``--watch-dir``, else the watch's default
    directory when a watch runs there), and why memory is missing when it is."""
    from pathlib import Path

    from verltop.cli_watch import default_watch_dir
    from verltop.engine.watch_history import borrow

    d = Path(watch_dir).expanduser() if watch_dir else default_watch_dir()
    if watch_dir and not d.is_dir():
        raise UserError(f"--watch-dir {watch_dir}: no such directory")
    b = borrow(snap, d, explicit=bool(watch_dir), now=snap.taken_at)
    return b.snapshot, b.note


def _prefetch(args: argparse.Namespace) -> Any:
    """``dump``'s first reads, as the engine declares them, sent now from threads: the dashboard answers
    while the engine is still being imported, and the answers wait for it."""
    from verltop.engine.prefetch import prefetch_dump
    from verltop.sources.config import resolve

    # py-spy on this machine's actors from the start, for a whole-job dump (one worker group needs the engine)
    early = not args.group and not args.no_local and args.via in ("auto", "local") and not (
        args.native and args.nonblocking)
    per_process = args.dump_timeout or (30.0 if args.native else 5.0)  # DumpOptions.per_process_timeout
    return prefetch_dump(resolve(args.address), args.timeout, whole_job=not args.group,
                         stacks=(args.native, args.nonblocking, per_process) if early else None)


async def _dump(args: argparse.Namespace, prefetch: Any = None) -> int:
    from verltop.engine import oneshot, oneshot_dump
    from verltop.sources.pyspy import DumpOptions

    opts = DumpOptions(native=args.native, nonblocking=args.nonblocking, samples=args.samples,
                       timeout_s=args.dump_timeout, via=args.via)
    bad = opts.check()
    if bad:
        raise UserError(bad)
    if args.output and os.path.exists(args.output) and not args.force:
        raise UserError(f"{args.output} exists; use --force to overwrite it")
    try:
        report = await oneshot_dump.dump(_monitor(args, nvml=None, prefetch=prefetch), args.group, opts,
                                         use_logs=not args.no_logs)
    except oneshot.OneShotError as e:
        raise UserError(str(e)) from None
    if args.output:
        from verltop.engine.save import save_dump

        try:
            save_dump(report, args.output, as_json=args.json, overwrite=args.force)
        except OSError as e:
            raise UserError(f"cannot write {args.output}: {e.strerror or e}") from None
    if args.json:
        from verltop.text.contract import dump_json

        _print_json(dump_json(report), large=len(report.ranks) > 256)
    else:
        from verltop.text.dump import dump_text

        print(dump_text(report))
    dumped = sum(1 for r in report.ranks if r.error is None)
    if dumped == 0:
        first = next((r.error.text for r in report.ranks if r.error), "no rank could be dumped")
        print(f"verltop: error: no rank could be dumped: {first}", file=sys.stderr)
        return 1
    return 0


async def _doctor(args: argparse.Namespace) -> int:
    """Exit 0: the nodes agree and nothing is wrong; 1: a mismatch or a problem; 2: the check could not run."""
    from verltop.sources.probe_connect import preload

    preload()  # ray's import, most of joining the cluster, goes on while the dashboard lists the nodes
    from verltop.engine.doctor import DoctorJob  # the check alone: none of the monitor's polls
    from verltop.sources.config import resolve
    from verltop.sources.http import DashboardClient
    from verltop.text.doctor import stage_text

    client = DashboardClient(resolve(args.address))
    path = os.path.abspath(os.path.expanduser(args.path)) if args.path else None
    tty = sys.stderr.isatty() and not args.json

    def progress(p: Any) -> None:
        if not tty:
            return
        what = stage_text(p.stage, p.done, p.total)
        if what is not None:
            sys.stderr.write(f"\r\x1b[Kchecking every node: {what}…")
        elif p.stage in ("done", "failed"):
            sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()

    job = DoctorJob(client, path, args.node_timeout, progress)
    try:
        report = await job.run()
    finally:
        await client.close()
    if report is None:
        raise UserError(job.problem.text if job.problem else "the check could not run")
    if args.json:
        from verltop.text.contract import doctor_json

        json.dump(doctor_json(report), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        from verltop.text.doctor import doctor_text

        print(doctor_text(report, color=sys.stdout.isatty() and "NO_COLOR" not in os.environ))
    return 0 if report.ok else 1


def _tui(args: argparse.Namespace, demo: Any = None) -> int:
    from verltop.engine.prefetch import prefetch_tui
    from verltop.sources.config import resolve

    endpoint = resolve(args.address)
    pre = prefetch_tui(endpoint, args.timeout)  # answered while Textual and the engine are imported

    from verltop import logsetup
    from verltop.engine.monitor import Monitor
    from verltop.ui.app import VerltopApp

    iv, st = _settings(args)
    mon = Monitor(endpoint, iv, st, use_local=not args.no_local, ras_addrs=tuple(args.ras_addr or ()))
    mon.client.prefetch = pre
    mon.training.metrics_file = getattr(args, "metrics_file", None)
    recorder = None
    if getattr(args, "record", None):
        from verltop.cli_watch import record_writer

        try:
            recorder = record_writer(args.record, mon.address, st.stall_after_s).attach(mon)
        except OSError as e:
            raise UserError(str(e)) from None
    log = logsetup.to_file(args.log_file)
    try:
        with logsetup.native_stderr_to(log):  # before the app: Textual takes the terminal's stream at its start
            app = VerltopApp(mon, demo=demo, memory_phases=recorder is not None)
            app.run()
    finally:
        if recorder is not None:
            recorder.close()
            print(f"verltop: recorded {recorder.written} frames into {args.record} (verltop replay {args.record})",
                  file=sys.stderr)
    return app.return_code or 0


def _demo(args: argparse.Namespace) -> int:
    try:
        from verltop.demo.cluster import dashboard_port_for_cli, start_demo
    except ImportError as e:
        raise UserError(f"the demo needs ray, torch and verl: pip install 'verltop[demo]' ({e.name} missing)") from None
    import signal

    def _stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # SIGTERM / SIGHUP (ssh gone) must still remove the cluster

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    leak = None
    if args.leak:
        from verltop.demo.cluster import LEAK_CAP_MIB

        if not 0 <= args.leak_rank < 4:
            raise UserError("--leak-rank must be a rank of the 4-rank actor_rollout group (0..3)")
        if not 0 < args.leak_mib <= LEAK_CAP_MIB:
            raise UserError(f"--leak-mib must be 1..{LEAK_CAP_MIB}")
        leak = {"rank": args.leak_rank, "mib": args.leak_mib, "cap_mib": LEAK_CAP_MIB}
    print("verltop demo: starting a local Ray cluster and a small verl PPO job (CPU, gloo)…", file=sys.stderr)
    hang_after = args.hang_after if args.hang_after > 0 else None
    handle = start_demo(hang_after=hang_after, hang_rank=args.hang_rank, hang_target=args.hang,
                        dashboard_port=dashboard_port_for_cli(), leak=leak)
    try:
        if handle.token:
            os.environ["RAY_AUTH_TOKEN"] = handle.token
        if leak:
            print(f"verltop demo: rank {leak['rank']} of actor_rollout keeps +{leak['mib']} MiB of host memory after "
                  f"every update_actor, up to {leak['cap_mib'] // 1024} GiB (then it stops growing)", file=sys.stderr)
        if args.no_tui:
            print(f"dashboard: {handle.address}\nrun `verltop` (or `verltop snapshot`, `dump`, `doctor`, `watch DIR`) "
                  "in another shell as the same user: it finds this dashboard and its token by itself; Ctrl-C "
                  "ends the demo", file=sys.stderr)
            while True:
                time.sleep(3600)
        args.address = handle.address
        return _tui(args, demo=handle)
    except KeyboardInterrupt:
        return 130
    finally:
        print("verltop demo: stopping the cluster…", file=sys.stderr)
        handle.stop()


if __name__ == "__main__":
    run()
