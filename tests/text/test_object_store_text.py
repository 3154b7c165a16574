"""``verltop memory``'s text and JSON, from the real Ray 2.60 answers of tests/sources/test_ray_objects.py."""

from __future__ import annotations

from tests.sources.test_ray_objects import actors, doc
from verltop.analysis.object_store import object_store_report
from verltop.sources import object_store as O
from verltop.text.contract import object_store_json
from verltop.text.object_store import NOT_RECORDED, call_site_text, object_store_text


def report(prefix: str, limit: int = 10000, objects: str = "objects_detail"):
    refs, held, _, recorded, warnings = O.objects(doc(f"{prefix}_{objects}.json"))
    return object_store_report(1764921600.0, refs, held, recorded, actors(prefix),
                               O.store_nodes(doc(f"{prefix}_nodes_view_summary.json")), limit, warnings, elapsed_s=0.4)


def test_text_names_the_rank_the_driver_and_the_missing_call_sites():
    t = object_store_text(report("off"))
    assert "192.0.2.2: 24.0M of 80.0M used (30%), spilled 0B, restored 0B" in t
    assert "9 references to 9 objects, 24.0M, held by 3 processes (read in 0.4s)" in t
    lines = t.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("SIZE"))
    assert "actor_rollout rank 1 (holder_0)" in lines[first + 1] and "12.0M" in lines[first + 1]
    assert "holder_1" in lines[first + 2] and "driver pid" in t
    assert f"note: {NOT_RECORDED}" in t


def test_text_says_when_the_answer_was_cut():
    t = object_store_text(report("off", limit=5, objects="objects_limit5"))
    assert "note: only 5 of 9 object references came back" in t


def test_call_site_is_its_kind_and_the_first_frame_outside_ray():
    site = ("(put object)  | /venv/lib/python3.11/site-packages/ray/_private/client_mode_hook.py:wrapper:134 | "
            "/venv/lib/python3.11/site-packages/ray/_private/auto_init_hook.py:auto_init_wrapper:22 | "
            "/home/user/job/holders.py:<listcomp>:20")
    assert call_site_text(site) == "(put object) holders.py:<listcomp>:20"
    assert call_site_text(None) == "(not recorded)"
    assert "holders.py" in object_store_text(report("on")) and NOT_RECORDED not in object_store_text(report("on"))


def test_json_contract():
    j = object_store_json(report("off", limit=5, objects="objects_limit5"))
    assert set(j) == {"taken_at", "nodes", "objects"}
    assert set(j["nodes"][0]) == {"node_id", "ip", "hostname", "used_bytes", "total_bytes", "spilled_bytes",
                                  "spilled_objects", "restored_bytes", "restored_objects", "primary_copy_bytes",
                                  "fallback_bytes", "local_objects"}
    o = j["objects"]
    assert (o["total_refs"], o["returned_refs"], o["limit"], o["call_sites_recorded"]) == (9, 5, 5, False)
    assert o["truncated"].startswith("only 5 of 9") and o["call_sites_note"] == NOT_RECORDED
    g = o["groups"][0]
    assert set(g) == {"holder", "worker_group", "role", "rank", "actor_name", "actor_id", "class_name", "pid", "ip",
                      "worker_type", "call_site", "refs", "objects", "bytes", "unknown_size", "reference_types"}
    assert o["groups"] == sorted(o["groups"], key=lambda g: -g["bytes"])
