"""PyTorch NCCL Flight Recorder dumps: per-rank state and a cross-rank match by ``collective_seq_id``,
like ``torch.distributed.flight_recorder.fr_trace`` but joined to the live stacks. Pure.

``load_dump`` takes bytes (pickle or JSON). The pickle is read with an unpickler that refuses every
class: a dump holds only dicts, lists, tuples, strings and numbers, and a planted file in /tmp must not
run code as the (often root) verltop user.
"""

from __future__ import annotations

import io
import json
import math
import pickle
from dataclasses import dataclass
from typing import Any

from verltop.model import CollectiveInfo


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
        return None, f"unreadable flight-recorder dump ({e.__class__.__name__}: {' '.join(str(e).split())[:80]})"
    if not isinstance(doc, dict) or not isinstance(doc.get("entries", []), list):
        return None, "not a flight-recorder dump"
    return doc, None


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return None
    return None


def _numel(sizes: Any) -> int | None:
    if isinstance(sizes, list) and sizes and isinstance(sizes[0], list):
        try:
            return int(math.prod(int(x) for x in sizes[0]))
        except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity as a size
            return None
    return None


def _op(name: Any) -> str | None:
    if not isinstance(name, str):
        return None
    op = name.split(":", 1)[-1].split(" ", 1)[0]
    return "barrier" if op == "all_reduce_barrier" else op


@dataclass(frozen=True, slots=True)
class FrEntry:
    pg: str
    seq: int
    op: str | None
    profiling_name: str | None
    input_sizes: Any
    state: str | None


@dataclass(frozen=True, slots=True)
class FrRank:
    rank: int
    last_enqueued: int | None
    last_completed: int | None
    entries: tuple[FrEntry, ...]


def rank_state(doc: dict[str, Any], rank: int, pg: str = "0") -> FrRank:
    st = doc.get("pg_status") if isinstance(doc.get("pg_status"), dict) else {}
    s = st.get(pg) or st.get(int(pg) if pg.isdigit() else pg) or {}
    entries = []
    for e in doc.get("entries") or []:
        if not isinstance(e, dict) or e.get("is_p2p"):
            continue
        pgid = str(e.get("pg_id", "0"))
        seq = _int(e.get("collective_seq_id"))
        if pgid != pg or seq is None:
            continue
        name = e.get("profiling_name")
        name = name if isinstance(name, str) else None  # compared and hashed across ranks: a string or nothing
        entries.append(FrEntry(pgid, seq, _op(name), name, e.get("input_sizes"), e.get("state")))
    return FrRank(rank, _int(s.get("last_enqueued_collective")) if isinstance(s, dict) else None,
                  _int(s.get("last_completed_collective")) if isinstance(s, dict) else None, tuple(entries))


def collective_info(r: FrRank) -> CollectiveInfo:
    """The rank's first unfinished collective (or its last one)."""
    pending = [e for e in r.entries if e.state != "completed"]
    e = min(pending, key=lambda x: x.seq) if pending else (max(r.entries, key=lambda x: x.seq) if r.entries else None)
    return CollectiveInfo(
        source="flight_recorder",
        op=e.op if e else None,
        seq=e.seq if e else r.last_enqueued,
        last_enqueued=r.last_enqueued,
        last_completed=r.last_completed,
        numel=_numel(e.input_sizes) if e else None,
    )


def match(ranks: list[FrRank]) -> list[str]:
    """Cross-rank findings: ranks missing from a collective, and mismatched ops or sizes."""
    out: list[str] = []
    if len(ranks) < 2:
        return out
    by_seq: dict[int, dict[int, FrEntry]] = {}
    for r in ranks:
        for e in r.entries:
            by_seq.setdefault(e.seq, {})[r.rank] = e
    all_ranks = {r.rank for r in ranks}
    for seq in sorted(by_seq):
        have = by_seq[seq]
        done = all(e.state == "completed" for e in have.values())
        missing = sorted(all_ranks - set(have))
        if missing and not done:
            first = next(iter(have.values()))
            out.append(f"collective #{seq} ({first.profiling_name}): ranks {missing} never joined "
                       f"(ranks {sorted(have)} wait)")
        names = {e.profiling_name for e in have.values()}
        sizes = {json.dumps(e.input_sizes, default=repr) for e in have.values()}  # a pickle may hold a set
        if len(names) > 1 or (len(sizes) > 1 and len(names) == 1 and "all_gather" not in str(names)):
            detail = ", ".join(f"rank {k} {e.profiling_name} {e.input_sizes}" for k, e in sorted(have.items()))
            out.append(f"collective #{seq} mismatch: {detail}")
    return out
