"""The ``memory`` command: Ray's object store read once, as ``ray memory --stats-only`` and ``ray memory``
show it, with verl's names on the holders. Headless like ``snapshot``; the same rules as ``cli.py``: imports
deferred, user errors as one line, never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from verltop.sources.reads import LIMIT


def _limit(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a whole number") from None
    if not 1 <= n <= LIMIT:
        raise argparse.ArgumentTypeError(f"must be 1 to {LIMIT} (Ray's own cap)")
    return n


def add_memory(sub: Any, shared: Any) -> None:
    m = sub.add_parser("memory", help="Ray's object store once: store used/spilled/restored per node, objects by "
                       "holder (actor, rank) and call site, largest first",
                       description="Reads Ray's object references (/api/v0/objects) and each node's store stats "
                       "once. The objects list asks every raylet, which asks every worker: verltop reads it only "
                       "when asked (this command, the TUI's o key). Call sites need RAY_record_ref_creation_sites=1 "
                       "at `ray start`.")
    shared(m)
    m.add_argument("--json", action="store_true", help="JSON (the documented contract)")
    m.add_argument("--limit", type=_limit, default=LIMIT, metavar="N",
                   help=f"object references to read at most (default {LIMIT}, Ray's cap); a cut is said")
    m.add_argument("--objects-timeout", type=float, default=30.0, metavar="S",
                   help="how long Ray may take to ask every raylet (default 30)")
    m.add_argument("--top", type=int, default=50, metavar="N", help="groups shown in the text (default 50)")


def memory(args: argparse.Namespace, monitor: Any, user_error: type[Exception]) -> int:
    from verltop.engine import oneshot

    if args.objects_timeout <= 0:
        raise user_error("--objects-timeout must be > 0")
    try:
        report = asyncio.run(oneshot.object_store(monitor(args, nvml=False), args.limit, args.objects_timeout))
    except oneshot.OneShotError as e:
        raise user_error(str(e)) from None
    if args.json:
        from verltop.text.contract import object_store_json

        json.dump(object_store_json(report), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        from verltop.text.object_store import object_store_text

        print(object_store_text(report, top=max(1, args.top)))
    if report.truncated:
        print(f"verltop: warning: {report.truncated}", file=sys.stderr)
    if report.problem and not report.groups:
        print(f"verltop: error: {report.problem}", file=sys.stderr)
        return 1
    return 0
