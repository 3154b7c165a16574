"""The memory screen's words: who a row is, what a phase keeps step after step, the headroom and steps left,
what a colocated engine still holds, the OOM verdicts, and verl's own ``*/perf/max_memory_*`` for what they
are (lifetime peaks, the max over ranks). Pure functions of the model."""

from __future__ import annotations

from collections.abc import Iterable

from verltop.analysis.memory_reads import low_headroom
from verltop.model import (
    EngineHold,
    Headroom,
    MemoryGrowth,
    MemoryView,
    PhaseMemory,
    TrainingView,
)
from verltop.text.cells import size
from verltop.text.memory import growth_sentence, headroom_mark, headroom_sentence
from verltop.text.memory import who as rank_of

MIB = 1 << 20
LIMIT_TEXT = {"gpu_total": "the GPU's total less other processes on it",
              "ray_memory_threshold": "the node's memory at Ray's memory-monitor threshold",
              "cgroup": "the container's memory limit"}
NO_SAMPLES = "too few samples"
VERL_PEAK_KEYS = ("perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb", "perf/cpu_memory_used_gb")


def who(worker_group: str | None, role: str | None, rank: int | None, actor_name: str | None) -> str:
    """``rank 1 of x2m`` (as the memory book's sentences name a rank); an actor without a rank by its name."""
    return rank_of(worker_group or role, rank, actor_name)


def mib(n: float | None, signed: bool = False) -> str:
    """``+150 MiB``, ``1.2 GiB``; ``-`` when unknown."""
    if n is None:
        return "-"
    sign = "+" if signed and n >= 0 else ("-" if n < 0 else "")
    a = abs(n)
    return f"{sign}{a / (1 << 30):.1f} GiB" if a >= 1 << 30 else f"{sign}{a / MIB:.0f} MiB"


def growth_text(g: MemoryGrowth) -> str:
    """``rank 1 of actor_rollout: +150 MiB host per step in update_actor over 7 steps; peers flat``."""
    return growth_sentence(g)


def headroom_text(h: Headroom) -> str:
    """The rank's peak against its limit and the steps left (``text.memory.headroom_sentence``), and when
    it does not grow, how much is free."""
    s = headroom_sentence(h)
    if h.steps_to_limit is None and h.free_fraction is not None:
        s += f"; {100 * h.free_fraction:.0f}% free, not growing"
    return s


def low(h: Headroom, steps_left: float = 10.0, free_below: float = 0.05) -> bool:
    """The screen's warning colour: few steps left or little free."""
    f = h.free_fraction
    return (h.steps_to_limit is not None and h.steps_to_limit <= steps_left) or (f is not None and f < free_below)


def hold_text(e: EngineHold) -> str:
    """``vllm_server_0_0 holds 12.0 GiB of GPU memory during update_actor (asleep; KV cache 0%)``."""
    extra = []
    if e.sleep_state is not None:
        extra.append("awake" if e.sleep_state == 0 else "asleep")
    if e.kv_cache_usage is not None:
        extra.append(f"KV cache {100 * e.kv_cache_usage:.0f}%")
    tail = f" ({'; '.join(extra)})" if extra else ""
    return f"{e.actor_name or e.actor_id} holds {mib(e.gpu_bytes)} of GPU memory during {e.phase}{tail}"


def phase_cell(p: PhaseMemory, kind: str) -> str:
    """A peak in a table cell; ``?`` when the phase ran without a sample (never 0)."""
    if p.samples == 0:
        return "?"
    return size(p.peak_gpu_bytes if kind == "gpu" else p.peak_rss_bytes)


def verl_peaks(peaks: Iterable[tuple[str, float]], training: TrainingView | None) -> list[tuple[str, float]]:
    """verl's own memory figures at its last step: ``MemoryView.verl_peaks`` when the engine gave them,
    else the keys of the training metrics (``actor/perf/max_memory_allocated_gb`` …)."""
    got = list(peaks)
    if got or training is None:
        return got
    out = []
    for key in sorted(training.metrics):
        if key.endswith(VERL_PEAK_KEYS):
            v = training.latest(key)
            if v is not None:
                out.append((key, v))
    return out


def verl_peak_text(key: str, value: float) -> str:
    """What verl's figure is: its max_memory_* are process-lifetime peaks (never reset per step) and the max
    over ranks (which rank peaked is lost); cpu_memory_used_gb is the whole node's used memory."""
    what = ("the node's used memory (psutil), not the process" if key.endswith("cpu_memory_used_gb")
            else "lifetime peak, max over ranks")
    return f"{key} {value:.2f} GB — {what}"


_MARKS: list[tuple] = [(None, None, {})]  # the last view's headroom and growth (the objects), and its marks


def memory_marks(v: MemoryView | None) -> dict[str, str]:
    """The main screen's mark per actor id: its headroom when low (``GPU full in 6 steps``, ``host 3% free``),
    else what grows (``host +150 MiB/step update_actor``). Kept while the view's lists are the same objects (a
    costly view stands for several snapshots; at 10,000 actors its headroom has 10,000 rows)."""
    if v is None:
        return {}
    headroom, growth, marks = _MARKS[0]
    if headroom is v.headroom and growth is v.growth:
        return dict(marks)
    out = {aid: headroom_mark(h) for aid, h in low_headroom(v).items()}
    for g in sorted(v.growth, key=lambda g: -g.bytes_per_step):
        out.setdefault(g.actor_id, f"{'GPU' if g.kind == 'gpu' else 'host'} {mib(g.bytes_per_step, True)}/step "
                                   f"{g.phase}")
    _MARKS[0] = (v.headroom, v.growth, dict(out))
    return out

