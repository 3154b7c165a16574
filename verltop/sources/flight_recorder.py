"""Flight Recorder files on this machine: read the dumps a job wrote, or ask for fresh ones through the
debug-info pipe (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``), which dumps without stopping training."""

from __future__ import annotations

import asyncio
import errno
import os
import time

from verltop.analysis.flight_recorder import FrRank, collective_info, load_dump, match, rank_state
from verltop.model import ActorRow, CollectiveInfo

DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"  # torch's default TORCH_FR_DUMP_TEMP_FILE
MAX_BYTES = 64 * 1024 * 1024


def dump_path(a: ActorRow) -> str | None:
    if a.rank is None:
        return None
    return f"{a.fr_dump_prefix or DEFAULT_PREFIX}{a.rank}"


def read_local(ranks: list[ActorRow]) -> tuple[dict[str, CollectiveInfo], list[str], dict[str, float]]:
    """actor_id → FR facts for ranks whose dump file exists here; cross-rank findings; file mtimes."""
    states: list[tuple[ActorRow, FrRank]] = []
    mtimes: dict[str, float] = {}
    notes: list[str] = []
    for a in ranks:
        p = dump_path(a)
        if not p or not os.path.isfile(p):
            continue
        try:
            st = os.stat(p)
            if st.st_size > MAX_BYTES:
                notes.append(f"{p}: larger than {MAX_BYTES >> 20} MiB, skipped")
                continue
            with open(p, "rb") as f:
                data = f.read()
        except OSError as e:
            notes.append(f"{p}: {e.strerror}")
            continue
        doc, err = load_dump(data)
        if doc is None:
            notes.append(f"{p}: {err}")
            continue
        mtimes[a.actor_id] = st.st_mtime
        states.append((a, rank_state(doc, a.rank or 0)))
    infos = {a.actor_id: collective_info(s) for a, s in states}
    by_group: dict[str | None, list[FrRank]] = {}
    for a, s in states:
        by_group.setdefault(a.worker_group, []).append(s)
    findings = [f"{g}: {f}" for g, rs in by_group.items() for f in match(rs)]
    return infos, findings + notes, mtimes


def trigger(ranks: list[ActorRow]) -> tuple[int, list[str]]:
    """Write to each rank's ``<pipe prefix><rank>.pipe``; returns how many accepted, and problems."""
    ok, problems = 0, []
    for a in ranks:
        if not a.fr_pipe_prefix or a.rank is None:
            continue
        path = f"{a.fr_pipe_prefix}{a.rank}.pipe"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            problems.append(f"{path}: no such pipe (not on this node, FR buffer size 0, or no NCCL process group in that rank)")
            continue
        except OSError as e:
            why = "nobody reads it (the rank's monitor thread is gone?)" if e.errno == errno.ENXIO else e.strerror
            problems.append(f"{path}: {why}")
            continue
        try:
            os.write(fd, b"1")
            ok += 1
        except OSError as e:
            problems.append(f"{path}: {e.strerror}")
        finally:
            os.close(fd)
    if not any(a.fr_pipe_prefix for a in ranks):
        problems.append("no rank has TORCH_NCCL_DEBUG_INFO_PIPE_FILE in its runtime env (see README: Flight Recorder)")
    return ok, problems


async def trigger_and_read(ranks: list[ActorRow], wait_s: float = 15.0
                           ) -> tuple[dict[str, CollectiveInfo], list[str]]:
    """Ask for fresh dumps, wait until the files are rewritten (a few seconds), then read them."""
    t0 = time.time()
    ok, problems = trigger(ranks)
    if ok == 0:
        return {}, problems
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        _, _, mt = await asyncio.to_thread(read_local, ranks)
        if sum(1 for v in mt.values() if v >= t0) >= ok:
            break
    infos, findings, mt = await asyncio.to_thread(read_local, ranks)
    fresh = sum(1 for v in mt.values() if v >= t0)
    if fresh < ok:
        old = [v for v in mt.values() if v < t0]
        shown = (f"; the dumps shown are older (written {time.strftime('%H:%M:%S', time.localtime(max(old)))})"
                 if old else "")
        problems.append(f"{ok - fresh} of {ok} ranks wrote no fresh dump within {wait_s:g} s (a rank past an NCCL "
                        f"watchdog timeout no longer answers its pipe){shown}")
    return infos, problems + findings
