"""PyTorch NCCL Flight Recorder files on this machine: read the dumps a job wrote, or ask for fresh ones through
the debug-info pipe (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``), which dumps without stopping training; and parse
them into per-rank state (``FrRank``).

``load_dump`` takes bytes (pickle or JSON). The pickle is read with an unpickler that refuses every class: a
dump holds only dicts, lists, tuples, strings and numbers, and a planted file in /tmp must not run code as
the (often root) verltop user.
"""

from __future__ import annotations

import asyncio
import errno
import io
import json
import os
import pickle
import time
from typing import Any

from verltop.convert import one_line, to_int
from verltop.model import ActorRow, FrEntry, FrRank

DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"  # torch's default TORCH_FR_DUMP_TEMP_FILE
MAX_BYTES = 64 * 1024 * 1024
MTIME_SLACK_S = 1.0


# ---------------------------------------------------------------- parsing


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a flight-recorder dump")


def load_dump(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """A flight-recorder dump (pickle or JSON) as plain data, or an error string."""
    try:
        if data[:1] in (b"{", b"["):
            doc = json.loads(data.decode("utf-8", "replace"))
        else:
            doc = _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as e:  # noqa: BLE001 - any malformed file is "unreadable", never a crash
        return None, f"unreadable flight-recorder dump ({e.__class__.__name__}: {one_line(e, 80)})"
    if not isinstance(doc, dict) or not isinstance(doc.get("entries", []), list):
        return None, "not a flight-recorder dump"
    return doc, None


def _op(name: Any) -> str | None:
    if not isinstance(name, str):
        return None
    op = name.split(":", 1)[-1].split(" ", 1)[0]
    return "barrier" if op == "all_reduce_barrier" else op


def rank_state(doc: dict[str, Any], rank: int, pg: str = "0") -> FrRank:
    """One rank's collectives on process group ``pg`` (point-to-point entries left out)."""
    st = doc.get("pg_status") if isinstance(doc.get("pg_status"), dict) else {}
    s = st.get(pg) or st.get(int(pg) if pg.isdigit() else pg) or {}
    entries = []
    for e in doc.get("entries") or []:
        if not isinstance(e, dict) or e.get("is_p2p"):
            continue
        pgid = str(e.get("pg_id", "0"))
        seq = to_int(e.get("collective_seq_id"))
        if pgid != pg or seq is None:
            continue
        name = e.get("profiling_name")
        name = name if isinstance(name, str) else None  # compared and hashed across ranks: a string or nothing
        entries.append(FrEntry(pgid, seq, _op(name), name, e.get("input_sizes"), e.get("state")))
    return FrRank(rank, to_int(s.get("last_enqueued_collective")) if isinstance(s, dict) else None,
                  to_int(s.get("last_completed_collective")) if isinstance(s, dict) else None, tuple(entries))


# ---------------------------------------------------------------- files


def dump_path(a: ActorRow) -> str | None:
    if a.rank is None:
        return None
    return f"{a.fr_dump_prefix or DEFAULT_PREFIX}{a.rank}"


def read_local(ranks: list[ActorRow]) -> tuple[dict[str, FrRank], list[str], dict[str, float]]:
    """actor_id → FR state for ranks whose dump file exists here; problems reading them; file mtimes."""
    states: dict[str, FrRank] = {}
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
        states[a.actor_id] = rank_state(doc, a.rank or 0)
    return states, notes, mtimes


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
                           ) -> tuple[dict[str, FrRank], list[str]]:
    """Ask for fresh dumps, wait until the files are rewritten (a few seconds), then read them."""
    # a file's time comes from a coarse clock (a jiffy; a whole second on some filesystems): a dump written
    # just after the trigger can carry a time before ``time.time()`` of it; a dump from before is seconds older
    t0 = time.time() - MTIME_SLACK_S
    ok, problems = trigger(ranks)
    if ok == 0:
        return {}, problems
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        _, _, mt = await asyncio.to_thread(read_local, ranks)
        if sum(1 for v in mt.values() if v >= t0) >= ok:
            break
    states, notes, mt = await asyncio.to_thread(read_local, ranks)
    fresh = sum(1 for v in mt.values() if v >= t0)
    if fresh < ok:
        old = [v for v in mt.values() if v < t0]
        shown = (f"; the dumps shown are older (written {time.strftime('%H:%M:%S', time.localtime(max(old)))})"
                 if old else "")
        problems.append(f"{ok - fresh} of {ok} ranks wrote no fresh dump within {wait_s:g} s (a rank past an NCCL "
                        f"watchdog timeout no longer answers its pipe){shown}")
    return states, problems + notes
