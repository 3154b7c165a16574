"""The rollout engines' own load: where each rollout server's HTTP server listens, and what its Prometheus
``/metrics`` says (read-only: one GET of ``/metrics``, never another path, never the Ray token).

verl 0.9's ``vLLMHttpServer`` and ``SGLangHttpServer`` run the engine's OpenAI server (uvicorn) inside the Ray
actor's own process, bound to the node's IP on a port the OS picked (``verl/workers/rollout/utils.py``
``run_uvicorn``). So the actor's listening TCP sockets (``/proc/PID/fd`` joined with ``/proc/PID/net/tcp``)
hold it, beside Ray's own worker port; the one whose ``/metrics`` speaks vLLM or SGLang is the server.

Names, as the engines emit them (checked in their sources):

- vLLM V1 (``vllm/v1/metrics/loggers.py``, 0.10 to 0.24): gauges ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (0..1; before 0.11 also, and in older
  releases only, ``vllm:gpu_cache_usage_perc``), counters ``vllm:num_preemptions`` and
  ``vllm:generation_tokens`` (exposed with ``_total``); labels ``model_name`` and ``engine`` (one set per
  data-parallel engine); with sleep mode, ``vllm:engine_sleep_state{sleep_state="awake"|"weights_offloaded"|
  "discard_all"}``, 1 for the state the engine is in (``vllm/v1/metrics/loggers.py``; read as 0, 1, 2: the
  sleep level).
- SGLang 0.5.x (``python/sglang/srt/metrics/collector.py``): gauges ``sglang:num_running_reqs``,
  ``sglang:num_queue_reqs``, ``sglang:token_usage`` (0..1), ``sglang:gen_throughput`` (tokens/s), counters
  ``sglang:num_retracted_requests_total`` (preemptions; older: gauge ``sglang:num_retracted_reqs``) and
  ``sglang:generation_tokens_total``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from dataclasses import dataclass

from verltop.sources import streams, wire
from verltop.sources.aio import within

MAX_BODY = 8 << 20  # a vLLM /metrics with every histogram is ~0.1-0.5 MB

# metric name -> (engine, field); several names for one field: the first found wins (newest name first)
_NAMES: dict[str, tuple[str, str]] = {
    "vllm:num_requests_running": ("vllm", "running"),
    "vllm:num_requests_waiting": ("vllm", "waiting"),
    "vllm:kv_cache_usage_perc": ("vllm", "kv"),
    "vllm:gpu_cache_usage_perc": ("vllm", "kv_old"),
    "vllm:num_preemptions_total": ("vllm", "preempt"),
    "vllm:generation_tokens_total": ("vllm", "gen"),
    "sglang:num_running_reqs": ("sglang", "running"),
    "sglang:num_requests_running": ("sglang", "running_old"),
    "sglang:num_queue_reqs": ("sglang", "waiting"),
    "sglang:num_requests_waiting": ("sglang", "waiting_old"),
    "sglang:token_usage": ("sglang", "kv"),
    "sglang:num_retracted_requests_total": ("sglang", "preempt"),
    "sglang:num_retracted_reqs": ("sglang", "preempt_old"),
    "sglang:generation_tokens_total": ("sglang", "gen"),
    "sglang:gen_throughput": ("sglang", "tps"),
}
_MAX_FIELDS = {"kv", "kv_old"}  # the fullest engine's, not a sum
_SLEEP = "vllm:engine_sleep_state"
_SLEEP_LEVEL = {"awake": 0.0, "weights_offloaded": 1.0, "discard_all": 2.0}
_PREFIXES = (*_NAMES, _SLEEP)  # str.startswith on a tuple skips the histograms' thousands of lines in C


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """What one ``/metrics`` answer says (summed over its label sets)."""

    engine: str
    running: int | None
    waiting: int | None
    kv_cache_usage: float | None
    preemptions_total: int | None
    gen_tokens_total: float | None
    gen_tokens_per_s: float | None  # as the engine reports it (SGLang); vLLM: None
    sleep_state: float | None = None  # vLLM's sleep level: 0 awake, 1 weights offloaded, 2 all discarded


def parse_engine_metrics(text: str) -> EngineMetrics | None:
    """The load in a Prometheus text answer of vLLM or SGLang; None when it is neither's."""
    vals: dict[str, float] = {}
    engine = None
    for line in text.splitlines():
        if not line.startswith(_PREFIXES):
            continue
        end = len(line)
        for ch in "{ ":
            j = line.find(ch)
            if 0 <= j < end:
                end = j
        name = line[:end]
        if name == _SLEEP:
            level = _sleep_level(line)
            if level is not None:
                # engines in several states (data-parallel): the most awake one's (it holds the most)
                sleep = vals.get("sleep")
                vals["sleep"] = level if sleep is None else min(sleep, level)
            continue
        spec = _NAMES.get(name)
        if spec is None:
            continue
        rest = line[line.rfind("}") + 1:] if line[end:end + 1] == "{" else line[end:]
        try:
            v = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        if v != v:  # NaN
            continue
        engine = spec[0]
        f = spec[1]
        vals[f] = max(vals.get(f, v), v) if f in _MAX_FIELDS else vals.get(f, 0.0) + v
    if engine is None:
        return None

    def pick(*names: str) -> float | None:
        return next((vals[n] for n in names if n in vals), None)

    def count(*names: str) -> int | None:
        v = pick(*names)
        return None if v is None else int(v)

    return EngineMetrics(engine, count("running", "running_old"), count("waiting", "waiting_old"),
                         pick("kv", "kv_old"), count("preempt", "preempt_old"), pick("gen"), pick("tps"),
                         pick("sleep"))


def _sleep_level(line: str) -> float | None:
    """The level of a ``vllm:engine_sleep_state{…,sleep_state="…"} 1.0`` line whose value is 1, else None."""
    i = line.find('sleep_state="')
    j = line.rfind("}")
    if i < 0 or j < i:
        return None
    state = line[i + 13:line.find('"', i + 13)]
    try:
        on = float(line[j + 1:].split()[0]) >= 0.5
    except (IndexError, ValueError):
        return None
    return _SLEEP_LEVEL.get(state) if on else None


# ---------------------------------------------------------------- where it listens


def _socket_inodes(pid: int, root: str) -> set[str]:
    out: set[str] = set()
    d = f"{root}/{pid}/fd"
    try:
        names = os.listdir(d)
    except OSError:
        return out
    for n in names:
        try:
            t = os.readlink(f"{d}/{n}")
        except OSError:
            continue
        if t.startswith("socket:["):
            out.add(t[8:-1])
    return out


def _hex_addr(h: str, v6: bool) -> str:
    raw = bytes.fromhex(h)
    # /proc writes each 32-bit word in host (little-endian) order
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.IPv6Address(words) if v6 else ipaddress.IPv4Address(words))


def listening(pid: int, root: str = "/proc") -> list[tuple[str, int]]:
    """The TCP addresses the process listens on (its own sockets, not its children's), as ``(ip, port)``."""
    inodes = _socket_inodes(pid, root)
    if not inodes:
        return []
    out: list[tuple[str, int]] = []
    for name, v6 in (("tcp", False), ("tcp6", True)):
        try:
            with open(f"{root}/{pid}/net/{name}") as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            p = line.split()
            if len(p) < 10 or p[3] != "0A" or p[9] not in inodes:  # 0A: LISTEN
                continue
            host, port = p[1].split(":")
            try:
                out.append((_hex_addr(host, v6), int(port, 16)))
            except ValueError:
                continue
    return out


def listening_many(pids: list[int]) -> dict[int, list[tuple[str, int]]]:
    """What the probe runs on another node (stdlib only: it is shipped there by value): each pid's sockets."""
    return {p: listening(p) for p in pids}


def loopback(ip: str) -> bool:
    return ip.startswith("127.") or ip == "::1"


def connect_host(ip: str, node_ip: str | None) -> str:
    """Where to connect for a socket bound to ``ip`` (a wildcard: the node's address, else loopback)."""
    if ip in ("0.0.0.0", "::"):
        return node_ip or "127.0.0.1"
    if ip.startswith("::ffff:"):
        return ip[7:]
    return ip


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ---------------------------------------------------------------- reading it


async def get_metrics(address: str, timeout_s: float) -> tuple[str | None, str | None]:
    """GET ``http://ADDRESS/metrics`` on its own connection (asyncio streams: a one-shot ``snapshot`` must not
    pay aiohttp's 0.1 s import for a few small reads): ``(text, None)`` or ``(None, why)``."""
    try:
        host, port, _, req = wire.request(f"http://{address}", "/metrics", None, {"User-Agent": "verltop"})
    except ValueError:
        return None, f"/metrics: not an address: {address[:80]}"
    try:
        status, body, _ = await within(streams.get_once(host, port, req, MAX_BODY), timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        return None, f"/metrics did not answer within {timeout_s:g} s"
    except (OSError, ValueError, UnicodeError) as e:
        return None, f"/metrics: {e.__class__.__name__}: {str(e)[:120]}"
    if status != 200:
        return None, f"/metrics answered HTTP {status}"
    return body.decode("utf-8", "replace"), None
