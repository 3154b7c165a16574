"""``memory`` in ``snapshot --json``: every key of every row, null where unknown, the sentences; a recording keeps
the whole view (codec round trip)."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.analysis.test_memory import job
from tests.engine.helpers import synthetic_snapshots
from verltop.analysis.memory_reads import low_headroom
from verltop.analysis.memory_view import memory_view
from verltop.codec import from_data, to_data
from verltop.model import EngineHold, MemoryView, OomVerdict, Snapshot
from verltop.text.contract import snapshot_json
from verltop.text.memory import NO_HISTORY, growth_sentence, headroom_mark

WHO = {"worker_group", "role", "rank", "actor_name", "actor_id"}
BY_PHASE = WHO | {"step", "phase", "peak_gpu_bytes", "peak_rss_bytes", "samples", "start_gpu_bytes", "end_gpu_bytes",
                  "start_rss_bytes", "end_rss_bytes"}
GROWTH = WHO | {"phase", "kind", "bytes_per_step", "steps", "peers_bytes_per_step", "detail"}
HEADROOM = WHO | {"kind", "peak_bytes", "limit_bytes", "limit_source", "steps_to_limit", "free_fraction"}


def view() -> MemoryView:
    book, steps, rows = job()
    v = memory_view(book, steps, rows, verl_peaks=(("actor/perf/max_memory_allocated_gb", 61.5),))
    hold = EngineHold("vllm_server_0", "srv", "update_actor", 2 << 30, 1.0, None)
    oom = OomVerdict("wg", "actor_rollout", 1, "wgWorkerDict_0:1", "a1", 101, "gpu", "task_error", 1.0, 7,
                     "update_actor", "actor_rollout_update_actor", "CUDA out of memory.", v.by_phase[:2], v.growth[0],
                     ((0, 10 << 30),))
    return replace(v, engine_holds=(hold,), oom=(oom,))


def test_memory_keys_and_sentences():
    s = replace(synthetic_snapshots(2)[-1], memory=view())
    doc = json.loads(json.dumps(snapshot_json(s)))
    m = doc["memory"]
    assert doc["memory_note"] is None
    assert set(m) == {"by_phase", "growth", "headroom", "engine_holds", "oom", "verl_peaks", "note"}
    assert m["by_phase"] and all(set(p) == BY_PHASE for p in m["by_phase"])
    assert [set(g) for g in m["growth"]] == [GROWTH]
    assert m["headroom"] and all(set(h) == HEADROOM for h in m["headroom"])
    assert m["verl_peaks"] == {"actor/perf/max_memory_allocated_gb": 61.5}
    g = m["growth"][0]
    assert g["detail"].startswith("rank 1 of wg: +1") and g["detail"].endswith("in update_actor over 10 steps; peers flat")
    host = next(h for h in m["headroom"] if h["kind"] == "host")
    assert host["limit_bytes"] is None and host["steps_to_limit"] is None and host["free_fraction"] is None
    assert m["oom"][0]["lead_up"] and m["oom"][0]["growth"]["phase"] == "update_actor"


def test_no_history_is_null_and_says_why():
    doc = snapshot_json(synthetic_snapshots(1)[-1])
    assert doc["memory"] is None and doc["memory_note"] == NO_HISTORY


def test_a_recording_keeps_the_memory_view():
    s = replace(synthetic_snapshots(2)[-1], memory=view())
    back = from_data(Snapshot, json.loads(json.dumps(to_data(s))))
    assert back.memory == s.memory


def test_the_rows_mark_and_the_growth_sentence():
    v = view()
    low = low_headroom(v, steps_left=1000)
    h = low["a1"]
    assert headroom_mark(h) == f"GPU full in {int(h.steps_to_limit)} steps"
    assert "a0" not in low  # flat, with room
    assert "peers flat" in growth_sentence(v.growth[0])


def test_an_unnamed_actor_is_named_by_its_role():
    """The controller (TaskRunner: no name, no group, no rank) reads "the controller", not "an actor"."""
    from verltop.model import Headroom
    from verltop.text.memory import headroom_sentence, who
    from verltop.text.oom import headroom_summary

    h = Headroom("", "controller", None, None, "c1", "host", 400 << 20, 18 << 30, "ray_memory_threshold", None)
    assert headroom_sentence(h).startswith("the controller: host peak")
    assert headroom_summary(h, None, 4, 0.1).startswith("Memory: the controller")
    assert who("wg", 1, "wgWorkerDict_0:1", "actor_rollout") == "rank 1 of wg"
    assert who(None, None, "vllm_server_0_0", "rollout_server") == "vllm_server_0_0"
    assert who(None, None, None, None) == "an actor"
