"""NCCL RAS: ask a node's RAS thread (NCCL ≥ 2.24, in every NCCL process) for the job's communicators, and
parse its answer — per communicator, each rank's host, pid, GPU and how many collectives of each type it has
enqueued, plus the ranks whose processes did not answer. No ptrace, no waiting for the watchdog.

The protocol (observed on NCCL 2.28.9, tests/fixtures/ras/README.md): line-based ASCII over TCP at
``NCCL_RAS_ADDR`` (default ``localhost:28028``); ``CLIENT PROTOCOL 2`` → ``SERVER PROTOCOL 2``;
``SET FORMAT json`` → ``OK`` (2.28.7+; older versions answer ``ERROR`` and speak text); ``STATUS`` → the
report, then the server closes. Every NCCL process of a node listens on the same port (SO_REUSEPORT): a
connection that lands on a SIGSTOPped process is accepted and never answered, so the first reply has a short
timeout and the client reconnects.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from verltop.convert import one_line, to_bool, to_int, to_str
from verltop.model import Problem
from verltop.sources.aio import within

if TYPE_CHECKING:  # RAS's model loads with its first answer (an engine without RAS never builds it)
    from verltop.model import RasComm, RasRank, RasReport

DEFAULT_PORT = 28028
DEFAULT_HOST = "127.0.0.1"
ARM = ("NCCL_RAS_ENABLE=1 (the default from NCCL 2.24); give each NCCL job on a node its own NCCL_RAS_ADDR "
       "(host:port) when several share it")


def parse_addr(v: str | None) -> tuple[str, int]:
    """``NCCL_RAS_ADDR`` (``host:port``, ``[v6]:port`` or ``port``) → (host, port); the default when unset."""
    if not v or not v.strip():
        return DEFAULT_HOST, DEFAULT_PORT
    s = v.strip()
    host, port = DEFAULT_HOST, DEFAULT_PORT
    if s.startswith("["):
        h, _, rest = s[1:].partition("]")
        host = h or host
        p = to_int(rest.lstrip(":")) if rest else None
        return host, p or port
    if s.count(":") == 1:
        h, _, p = s.partition(":")
        return (h or host), (to_int(p) or port)
    p = to_int(s)
    if p is not None:
        return host, p
    return s, port


async def query(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, timeout_s: float = 5.0,
                first_reply_s: float = 1.0, attempts: int = 3) -> tuple[str | None, Problem | None]:
    """One STATUS report (JSON when the server speaks it, else text), or why not."""
    last: Problem | None = None
    for _ in range(max(1, attempts)):
        body, last, retry = await _one(host, port, timeout_s, first_reply_s)
        if body is not None or not retry:
            return body, last
    return None, last


async def _one(host: str, port: int, timeout_s: float, first_reply_s: float
               ) -> tuple[str | None, Problem | None, bool]:
    where = f"{host}:{port}"
    try:
        reader, writer = await within(asyncio.open_connection(host, port), first_reply_s + 1)
    except (ConnectionRefusedError, asyncio.TimeoutError, OSError) as e:
        refused = isinstance(e, ConnectionRefusedError)
        return None, Problem("ras_unreachable", f"no NCCL RAS service at {where}"
                             + ("" if refused else f" ({one_line(e) or e.__class__.__name__})"), ARM), not refused
    try:
        writer.write(b"CLIENT PROTOCOL 2\n")
        await writer.drain()
        try:
            hello = await within(reader.readline(), first_reply_s)
        except asyncio.TimeoutError:
            # accepted by a process that does not run (SIGSTOP, or stuck): another listener may answer
            return None, Problem("ras_timeout", f"NCCL RAS at {where} accepted but did not answer within "
                                 f"{first_reply_s:g} s (a stopped process holds the port)"), True
        if not hello.startswith(b"SERVER PROTOCOL"):
            return None, Problem("ras_protocol", f"NCCL RAS at {where} answered {one_line(hello, 60)!r}"), False
        writer.write(b"SET FORMAT json\n")
        await writer.drain()
        ok = await within(reader.readline(), first_reply_s)  # "OK", or "ERROR: ..." before 2.28.7
        del ok
        writer.write(b"STATUS\n")
        await writer.drain()
        body = await within(reader.read(), timeout_s)  # the server closes after the report
    except asyncio.TimeoutError:
        return None, Problem("ras_timeout", f"NCCL RAS at {where} did not finish its report within {timeout_s:g} s"), True
    except OSError as e:
        return None, Problem("ras_unreachable", f"NCCL RAS at {where}: {one_line(e)}"), True
    finally:
        writer.close()
    return body.decode("utf-8", "replace"), None, False


# ---------------------------------------------------------------- parsing

# NCCL 2.28.7–2.28.9 forget the comma after "nvml_dev" in missing-rank objects (fixed in 2.29.2)
_MISSING_COMMA = re.compile(r'("nvml_dev":\s*-?\d+)(\s*\n\s*"status":)')


def parse(body: str) -> tuple[RasReport | None, str | None]:
    """A STATUS answer, JSON or text, as a report (or why it could not be read)."""
    s = body.lstrip()
    if s.startswith("SERVER PROTOCOL"):  # a whole conversation, the handshake's answer first
        s = s.split("\n", 1)[1].lstrip() if "\n" in s else ""
    if s.startswith("{"):
        return parse_json(s)
    if s.startswith("NCCL version"):
        return parse_text(s)
    return None, f"not an NCCL RAS report ({one_line(s, 60)!r})"


def parse_json(body: str) -> tuple[RasReport | None, str | None]:
    from verltop.model import RasComm, RasReport

    try:
        doc = json.loads(_MISSING_COMMA.sub(r"\1,\2", body))
    except ValueError as e:
        return None, f"unreadable NCCL RAS JSON ({one_line(e, 80)})"
    if not isinstance(doc, dict):
        return None, "NCCL RAS JSON is not an object"
    comms = []
    for c in doc.get("communicators") or []:
        if not isinstance(c, dict):
            continue
        ranks = tuple(_json_rank(r, False) for r in c.get("ranks") or [] if isinstance(r, dict))
        missing = tuple(_json_rank(r, True) for r in c.get("missing_ranks") or [] if isinstance(r, dict))
        h = to_str(c.get("hash")) or "?"
        comms.append(RasComm(h[2:] if h.startswith("0x") else h, to_int(c.get("size")), ranks, missing))
    return RasReport(to_str(doc.get("nccl_version")), tuple(comms), source="json"), None


def _json_rank(r: dict[str, Any], missing: bool) -> RasRank:
    from verltop.model import RasRank

    st = r.get("status") if isinstance(r.get("status"), dict) else {}
    counts = r.get("collective_counts") if isinstance(r.get("collective_counts"), dict) else {}
    return RasRank(
        rank=to_int(r.get("rank")), host=to_str(r.get("host")), pid=to_int(r.get("pid")),
        cuda_dev=to_int(r.get("cuda_dev")),
        counts=tuple((str(k), n) for k, n in ((k, to_int(x)) for k, x in counts.items()) if n is not None),
        missing=missing, unresponsive=to_bool(st.get("unresponsive")), considered_dead=to_bool(st.get("considered_dead")),
        abort=to_bool(st.get("abort_flag")), async_error=to_int(st.get("async_error")),
    )


_VERSION = re.compile(r"^NCCL version (\S+)")
_COMM = re.compile(r"^#\d+-\d+ \(([0-9a-fA-F]+)\) (\w+)")
# "GPU 0 (NVML 1)": the process sees one GPU (CUDA_VISIBLE_DEVICES), NVML's index is the machine's
_LAUNCHED = re.compile(r"Rank (\d+) has (?:launched up to operation (\d+)|not launched any operations) -- "
                       r"GPU (\d+)(?: \(NVML \d+\))? managed by process (\d+) on node (\S+)")
_OPS = re.compile(r"different (\w+) operation counts")
_MISSING = re.compile(r"^\s+Rank (\d+) -- GPU (\d+)(?: \(NVML \d+\))? managed by process (\d+) on node (\S+)")
_MISSING_N = re.compile(r"Missing communicator data from (\d+) rank")
_PROCESS = re.compile(r"^\s+Process (\d+) on node (\S+) managing GPU")


def parse_text(body: str) -> tuple[RasReport | None, str | None]:
    """The text report lists only communicators with a problem (mismatched counts, missing ranks). NCCL
    before 2.29.2 garbles every communicator printed after one with missing ranks: those are dropped."""
    from verltop.model import RasComm, RasRank, RasReport

    lines = body.splitlines()
    m = _VERSION.match(lines[0]) if lines else None
    if not m:
        return None, "not an NCCL RAS text report"
    comms: list[RasComm] = []
    procs: list[tuple[int | None, str | None]] = []
    cur: dict[str, Any] | None = None
    garbled = False

    def flush() -> None:
        nonlocal cur, garbled
        if cur is not None and not garbled:
            comms.append(RasComm(cur["hash"], None, tuple(cur["ranks"]), tuple(cur["missing"])))
            if cur["missing"] and _old(m.group(1)):
                garbled = True
        cur = None

    for line in lines:
        c = _COMM.match(line)
        if c:
            flush()
            cur = {"hash": c.group(1).lower(), "ranks": [], "missing": [], "op": None}
            continue
        p = _PROCESS.match(line)
        if p and cur is None:
            procs.append((to_int(p.group(1)), p.group(2)))
            continue
        if cur is None:
            continue
        o = _OPS.search(line)
        if o:
            cur["op"] = o.group(1)
            continue
        la = _LAUNCHED.search(line)
        if la:
            op = cur["op"] or "?"
            rank, n = int(la.group(1)), int(la.group(2) or 0)
            prev = next((i for i, x in enumerate(cur["ranks"]) if x.rank == rank), None)
            if prev is None:
                cur["ranks"].append(RasRank(rank, la.group(5), int(la.group(4)), int(la.group(3)), ((op, n),)))
            else:  # one section per operation whose counts differ: a rank's counts add up
                x = cur["ranks"][prev]
                cur["ranks"][prev] = replace(x, counts=(*x.counts, (op, n)))
            continue
        mi = _MISSING.match(line)
        if mi:
            cur["missing"].append(RasRank(int(mi.group(1)), mi.group(4), int(mi.group(3)), int(mi.group(2)),
                                          missing=True))
    flush()
    return RasReport(m.group(1), tuple(comms), tuple(procs), source="text"), None


def _old(version: str) -> bool:
    parts = [to_int(x) for x in version.split(".")[:3]]
    if any(x is None for x in parts):
        return False
    return tuple(parts) < (2, 29, 2)  # type: ignore[operator]


async def fetch(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, timeout_s: float = 5.0
                ) -> tuple[RasReport | None, Problem | None, float]:
    """Query and parse; returns (report, problem, seconds it took)."""
    t0 = time.monotonic()
    body, problem = await query(host, port, timeout_s)
    if body is None:
        return None, problem, time.monotonic() - t0
    report, err = parse(body)
    if report is None:
        return None, Problem("ras_protocol", f"NCCL RAS at {host}:{port}: {err}"), time.monotonic() - t0
    return report, None, time.monotonic() - t0
