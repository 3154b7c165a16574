"""The JSON contracts (``snapshot --json``, ``dump --json``, ``doctor --json``, incident files): views of the
model made for scripts, with their human-readable fields (``stall_reason``, ``reason``) in the same words as
the screens. Stable: tests and scripts rely on every key. Unknown values are null, not absent.

A recording stores the model itself, every field (``verltop.codec``); these views drop what scripts do not
need and add derived fields.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from verltop.model import PHASES
from verltop.text.memory import NO_HISTORY, growth_sentence
from verltop.text.oom import verdict_reason
from verltop.text.pending import pending_reason
from verltop.text.stalls import stall_reason, stall_reasons, stall_target
from verltop.text.training import anomaly_sentence, slow_sentence

if TYPE_CHECKING:
    from verltop.model import (
        ActorRow,
        BlockedOn,
        Chain,
        ChainEnd,
        ChainLink,
        CollectiveInfo,
        Death,
        DoctorNode,
        DoctorReport,
        DumpReport,
        Frame,
        Headroom,
        MemoryGrowth,
        MemoryView,
        Mismatch,
        Node,
        ObjectStoreReport,
        OomVerdict,
        PendingItem,
        PhaseMemory,
        ProcRow,
        RankDump,
        RolloutLoad,
        SlowRank,
        Snapshot,
        StackGroup,
        Stall,
        Step,
        Suspect,
        TrainingView,
    )


def _round(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


# ---------------------------------------------------------------- snapshot --json


def snapshot_json(s: Snapshot) -> dict[str, Any]:
    """``verltop snapshot --json``."""
    return {
        "taken_at": s.taken_at,
        "source": {"address": s.address, "age_s": _round(s.age_s), "errors": s.errors},
        "nodes": [node_json(n) for n in s.nodes],
        "actors": [actor_json(a) for a in s.actors],
        "phase": s.phase,
        "orphans": None if s.orphans is None else [orphan_json(o) for o in s.orphans],
        "pending": [pending_json(p) for p in s.pending],
        "steps": [step_json(st) for st in s.steps],
        "training": None if s.training is None else training_json(s.training),
        "slow_ranks": [slow_rank_json(r) for r in s.slow_ranks],
        "rollout": [rollout_json(r) for r in s.rollout],
        "memory": None if s.memory is None else memory_json(s.memory),
        "memory_note": NO_HISTORY if s.memory is None else s.memory.note,
    }


def memory_json(m: MemoryView) -> dict[str, Any]:
    """Memory by phase and rank, growth, headroom, engine holds, OOM verdicts (``memory``)."""
    return {
        "by_phase": [phase_memory_json(p) for p in m.by_phase],
        "growth": [growth_json(g) for g in m.growth],
        "headroom": [headroom_json(h) for h in m.headroom],
        "engine_holds": [{"actor_name": h.actor_name, "actor_id": h.actor_id, "phase": h.phase, "gpu_bytes": h.gpu_bytes,
                          "sleep_state": h.sleep_state, "kv_cache_usage": _round(h.kv_cache_usage, 4)}
                         for h in m.engine_holds],
        "oom": [oom_json(o) for o in m.oom],
        "verl_peaks": {k: _finite(v) for k, v in m.verl_peaks},
        "note": m.note,
    }


def _who(x: PhaseMemory | MemoryGrowth | Headroom) -> dict[str, Any]:
    return {"worker_group": x.worker_group, "role": x.role, "rank": x.rank, "actor_name": x.actor_name,
            "actor_id": x.actor_id}


def phase_memory_json(p: PhaseMemory) -> dict[str, Any]:
    """One rank's memory in one phase of one step (``memory.by_phase[]``); ``samples`` 0: no peak known."""
    return {**_who(p), "step": p.step, "phase": p.phase, "peak_gpu_bytes": p.peak_gpu_bytes,
            "peak_rss_bytes": p.peak_rss_bytes, "samples": p.samples, "start_gpu_bytes": p.start_gpu_bytes,
            "end_gpu_bytes": p.end_gpu_bytes, "start_rss_bytes": p.start_rss_bytes, "end_rss_bytes": p.end_rss_bytes}


def growth_json(g: MemoryGrowth) -> dict[str, Any]:
    """A phase that keeps memory step after step (``memory.growth[]``)."""
    return {**_who(g), "phase": g.phase, "kind": g.kind, "bytes_per_step": round(g.bytes_per_step),
            "steps": g.steps,
            "peers_bytes_per_step": None if g.peers_bytes_per_step is None else round(g.peers_bytes_per_step),
            "detail": growth_sentence(g)}


def headroom_json(h: Headroom) -> dict[str, Any]:
    """A rank's peak against the limit that would kill it (``memory.headroom[]``)."""
    return {**_who(h), "kind": h.kind, "peak_bytes": h.peak_bytes, "limit_bytes": h.limit_bytes,
            "limit_source": h.limit_source, "steps_to_limit": _round(h.steps_to_limit, 1),
            "free_fraction": _round(h.free_fraction, 4)}


def oom_json(o: OomVerdict) -> dict[str, Any]:
    """A rank that ran out of memory (``memory.oom[]``), with its lead-up."""
    return {"worker_group": o.worker_group, "role": o.role, "rank": o.rank, "actor_name": o.actor_name,
            "actor_id": o.actor_id, "pid": o.pid, "kind": o.kind, "how": o.how, "at": o.at, "step": o.step,
            "phase": o.phase, "method": o.method, "message": o.message, "reason": verdict_reason(o),
            "lead_up": [phase_memory_json(p) for p in o.lead_up],
            "growth": None if o.growth is None else growth_json(o.growth),
            "peers_peak_bytes": [{"rank": r, "peak_bytes": b} for r, b in o.peers_peak_bytes],
            "top_processes": [{"pid": p, "name": n, "bytes": b} for p, n, b in o.top_processes]}


def rollout_json(r: RolloutLoad) -> dict[str, Any]:
    """A rollout server's own load, from its /metrics (``rollout[]``)."""
    return {
        "actor_name": r.actor_name,
        "address": r.address,
        "running": r.running,
        "waiting": r.waiting,
        "kv_cache_usage": _round(r.kv_cache_usage, 4),
        "preemptions_total": r.preemptions_total,
        "gen_tokens_per_s": _round(r.gen_tokens_per_s),
        "engine": r.engine,
        "problem": r.problem,
    }


def node_json(n: Node) -> dict[str, Any]:
    """A node with its GPUs (``nodes[]``)."""
    return {
        "node_id": n.node_id,
        "ip": n.ip,
        "hostname": n.hostname,
        "cpu_percent": n.cpu_percent,
        "mem_used_bytes": n.mem_used_bytes,
        "mem_total_bytes": n.mem_total_bytes,
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "util_percent": g.util_percent,
                "mem_used_bytes": g.mem_used_bytes,
                "mem_total_bytes": g.mem_total_bytes,
                "power_w": g.power_w,
            }
            for g in n.gpus
        ],
        "object_store_used_bytes": n.object_store_used_bytes,
        "object_store_total_bytes": n.object_store_total_bytes,
        "object_store_spilled_bytes": n.object_store_spilled_bytes,
    }


def _identity(a: ActorRow) -> dict[str, Any]:
    """The fields that say which actor and rank a row is, first in both ``actors[]`` and ``ranks[]``."""
    return {
        "actor_id": a.actor_id,
        "actor_name": a.actor_name,
        "class_name": a.class_name,
        "pid": a.pid,
        "node_ip": a.node_ip,
        "state": a.state,
        "worker_group": a.worker_group,
        "rank": a.rank,
        "world_size": a.world_size,
        "role": a.role,
        "roles": list(a.roles),
        "task": a.task,
        "task_running_s": _round(a.task_running_s),
    }


def actor_json(a: ActorRow) -> dict[str, Any]:
    """One actor (``actors[]``): its rank, task, use, stalls and processes."""
    return {
        **_identity(a),
        "gpu_index": a.gpu_index,
        "gpu_util_percent": a.gpu_util_percent,
        "gpu_mem_bytes": a.gpu_mem_bytes,
        "cpu_percent": a.cpu_percent,
        "rss_bytes": a.rss_bytes,
        "stalled": a.stalled,
        "stall_reason": stall_reasons(a),
        "stalls": [stall_json(st) for st in a.stalls],
        "processes": None if a.processes_read_at is None else [proc_json(p) for p in a.processes],
        "num_restarts": a.num_restarts,
        "gpu_power_w": a.gpu_power_w,
        "gpu_mem_peak_bytes": a.gpu_mem_peak_bytes,
        "rss_peak_bytes": a.rss_peak_bytes,
        "gpu_mem_growth_bytes_per_min": _round(a.gpu_mem_growth_bytes_per_min),
        "rss_growth_bytes_per_min": _round(a.rss_growth_bytes_per_min),
    }


def stall_json(st: Stall) -> dict[str, Any]:
    """One stall rule that fired (``actors[].stalls[]``), its numbers and its sentence."""
    return {"rule": st.rule, "running_s": _round(st.running_s), "method": st.method,
            "median_s": _round(st.median_s), "ratio": _round(st.ratio), "limit_s": _round(st.limit_s),
            "peers": st.peers, "peers_done_s": _round(st.peers_done_s), "state": st.state,
            "cause": st.cause, "op": st.op, "count": st.count, "expected": st.expected,
            "restarts": st.restarts, "waits_for": st.waits_for, "target": stall_target(st),
            "scheduling_state": st.scheduling_state, "waiting_s": _round(st.waiting_s),
            "reason": stall_reason(st)}


def proc_json(p: ProcRow) -> dict[str, Any]:
    """A descendant process (``actors[].processes``): the first seven fields."""
    return {"pid": p.pid, "ppid": p.ppid, "title": p.title, "cpu_percent": p.cpu_percent,
            "rss_bytes": p.rss_bytes, "gpu_index": p.gpu_index, "gpu_mem_bytes": p.gpu_mem_bytes}


def orphan_json(p: ProcRow) -> dict[str, Any]:
    """An orphan (``orphans``): a descendant's fields, its node and the actor it was last seen under."""
    return {**proc_json(p), "node_ip": p.node_ip, "actor_id": p.actor_id}


def pending_json(p: PendingItem) -> dict[str, Any]:
    """A placement group, actor or task Ray has not placed (``pending[]``), and why."""
    return {
        "kind": p.kind,
        "id": p.id,
        "name": p.name,
        "worker_group": p.worker_group,
        "state": p.state,
        "scheduling_state": p.scheduling_state,
        "demand": [dict(b) for b in p.demand],
        "strategy": p.strategy,
        "waiting_s": _round(p.waiting_s),
        "reason": pending_reason(p),
    }


def step_json(st: Step) -> dict[str, Any]:
    """One training step (``steps[]``): seconds per phase and the arrival skew of each."""
    ph, sk = dict(st.phases), dict(st.skew_s)
    return {"index": st.index, "started_at": round(st.started_at, 3), "duration_s": _round(st.duration_s),
            "phases": {p: _round(ph.get(p)) for p in PHASES},
            "skew_s": {p: _round(sk.get(p)) for p in PHASES if p != "other"}}


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def training_json(t: TrainingView) -> dict[str, Any]:
    """verl's logged metrics (``training``): ``metrics`` as ``[[step, value], ...]`` per key, NaN and inf as
    null (the anomaly that flags them names them); each anomaly with its rule, numbers and sentence."""
    return {
        "source": t.source,
        "actor_name": t.actor_name,
        "last_step": t.last_step,
        "metrics": {k: [[st, _finite(v)] for st, v in pts] for k, pts in t.metrics.items()},
        "anomalies": [{"step": a.step, "metric": a.metric, "kind": a.kind, "value": _finite(a.value),
                       "baseline": _finite(a.baseline), "detail": anomaly_sentence(a)} for a in t.anomalies],
    }


def slow_rank_json(r: SlowRank) -> dict[str, Any]:
    """A worker that ends a phase last, step after step (``slow_ranks[]``), and by how much."""
    return {"actor_id": r.actor_id, "actor_name": r.actor_name, "worker_group": r.worker_group, "rank": r.rank,
            "phase": r.phase, "method": r.method, "steps": r.steps, "lag_s": _round(r.lag_s),
            "detail": slow_sentence(r)}


# ---------------------------------------------------------------- dump --json


def dump_json(r: DumpReport) -> dict[str, Any]:
    """``verltop dump --json`` (and a saved dump's ``.json``)."""
    return {
        "taken_at": r.taken_at,
        "ranks": [rank_json(x) for x in r.ranks],
        "groups": [group_json(g) for g in r.groups],
        "suspects": [suspect_json(s) for s in r.suspects],
        "chains": [chain_json(c) for c in r.chains],
        "notes": list(r.notes),
    }


def rank_json(x: RankDump) -> dict[str, Any]:
    """One dumped process (``ranks[]``): its actor's fields, where it waits, its stack."""
    a = x.actor
    return {
        **_identity(a),
        "actor_id": None if x.is_driver else a.actor_id,  # keeps its first place in the object
        "process": x.process,
        "parent_pid": x.parent_pid,
        "blocked_on": blocked_json(x.blocked_on) if x.blocked_on else None,
        "collective": collective_json(x.collective) if x.collective else None,
        "stuck": x.stuck,
        "stack": [frame_json(f) for f in x.stack],
        "error": x.error.text if x.error else None,
        "death": death_json(x.death) if x.death else None,
    }


def frame_json(f: Frame) -> dict[str, Any]:
    """One stack frame."""
    return {"func": f.func, "file": f.file, "line": f.line}


def blocked_json(b: BlockedOn) -> dict[str, Any]:
    """The call a rank waits in, and the frame that made it."""
    return {"op": b.op, "frame": b.frame}


def collective_json(c: CollectiveInfo) -> dict[str, Any]:
    """The collective a rank is in, from the Flight Recorder or the watchdog's log."""
    return {
        "source": c.source,
        "op": c.op,
        "seq": c.seq,
        "last_enqueued": c.last_enqueued,
        "last_completed": c.last_completed,
        "numel": c.numel,
    }


def death_json(d: Death) -> dict[str, Any]:
    """Why a process died."""
    return {"kind": d.kind, "detail": d.detail}


def group_json(g: StackGroup) -> dict[str, Any]:
    """Ranks with the same stack (``groups[]``), frames as ``file:line func``."""
    return {
        "ranks": list(g.ranks),
        "blocked_on": blocked_json(g.blocked_on) if g.blocked_on else None,
        "frames": [f.short() for f in g.frames],
    }


def suspect_json(s: Suspect) -> dict[str, Any]:
    """A suspect (``suspects[]``): the process (or placement group) and why."""
    from verltop.text.suspects import suspect_reason  # with the stack analysis: only where a dump is shown

    return {"actor_id": s.actor_id or None, "worker_group": s.worker_group, "rank": s.rank,
            "pid": s.pid, "reason": suspect_reason(s), "placement_group_id": s.placement_group_id}


def chain_json(c: Chain) -> dict[str, Any]:
    """A wait chain (``chains[]``): its hops from the top, and where it ends."""
    return {"path": [link_json(p) for p in c.path], "ends_in": chain_end_json(c.ends_in)}


def link_json(lk: ChainLink) -> dict[str, Any]:
    """One hop of a wait chain."""
    return {"actor_id": lk.actor_id, "actor_name": lk.actor_name, "task": lk.task, "pid": lk.pid}


def chain_end_json(e: ChainEnd) -> dict[str, Any]:
    """Where a wait chain ends, and why there."""
    from verltop.text.chains import end_text  # the stack analysis: a dump's, not a snapshot's

    return {"pid": e.pid, "process": e.process, "frame": e.frame, "reason": end_text(e),
            "placement_group_id": e.placement_group_id}


# ---------------------------------------------------------------- doctor --json


def doctor_json(r: DoctorReport) -> dict[str, Any]:
    """``verltop doctor --json``."""
    return {"taken_at": r.taken_at, "nodes": [doctor_node_json(n) for n in r.nodes],
            "mismatches": [mismatch_json(m) for m in r.mismatches], "problems": [p.text for p in r.problems],
            "notes": list(r.notes), "path": r.path, "elapsed_s": _round(r.elapsed_s)}


def doctor_node_json(n: DoctorNode) -> dict[str, Any]:
    """One node's column: its checks by name, or why it could not be checked."""
    return {"node_id": n.node_id, "ip": n.ip, "hostname": n.hostname, "label": n.label,
            "is_head": n.is_head, "checks": dict(n.checks), "error": n.error.text if n.error else None}


def mismatch_json(m: Mismatch) -> dict[str, Any]:
    """A check that differs between nodes: the values, the majority, the odd ones out."""
    return {"check": m.check, "values": dict(m.values), "majority": m.majority,
            "deviants": list(m.deviants), "text": m.problem.text}


def object_store_json(r: ObjectStoreReport) -> dict[str, Any]:
    """``verltop memory --json``: each node's store and the references grouped by holder and call site."""
    from verltop.text.object_store import NOT_RECORDED, holder_text

    return {
        "taken_at": r.taken_at,
        "nodes": [{"node_id": n.node_id, "ip": n.ip, "hostname": n.hostname, "used_bytes": n.used_bytes,
                   "total_bytes": n.total_bytes, "spilled_bytes": n.spilled_bytes,
                   "spilled_objects": n.spilled_objects, "restored_bytes": n.restored_bytes,
                   "restored_objects": n.restored_objects, "primary_copy_bytes": n.primary_copy_bytes,
                   "fallback_bytes": n.fallback_bytes, "local_objects": n.local_objects} for n in r.nodes],
        "objects": {
            "total_refs": r.total_refs,
            "returned_refs": r.returned_refs,
            "objects": r.objects,
            "bytes": r.bytes,
            "limit": r.limit,
            "truncated": r.truncated,
            "call_sites_recorded": r.call_sites_recorded,
            "call_sites_note": NOT_RECORDED if r.call_sites_recorded is False else None,
            "warnings": list(r.warnings),
            "problem": r.problem,
            "elapsed_s": _round(r.elapsed_s),
            "groups": [{"holder": holder_text(g), "worker_group": g.worker_group, "role": g.role, "rank": g.rank,
                        "actor_name": g.actor_name, "actor_id": g.actor_id, "class_name": g.class_name,
                        "pid": g.pid, "ip": g.ip, "worker_type": g.worker_type, "call_site": g.call_site,
                        "refs": g.refs, "objects": g.objects, "bytes": g.bytes, "unknown_size": g.unknown_size,
                        "reference_types": dict(g.reference_types)} for g in r.groups],
        },
    }

