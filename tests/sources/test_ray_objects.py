"""Ray's object store read on demand, from real Ray 2.60 answers: two actors (``holder_0`` with three 4 MiB
objects and a small one, ``holder_1`` with one 10 MiB and a small one) and the driver's 2 MiB put, captured
with call sites off (Ray's default) and on (RAY_record_ref_creation_sites=1), in an 80 MiB store."""

from __future__ import annotations

import json
from pathlib import Path

from tests.analysis.helpers import row
from verltop.analysis.object_store import group_refs, object_store_report, truncation
from verltop.sources import object_store as O
from verltop.sources import parse

F = Path(__file__).parent.parent / "fixtures" / "ray-2.60" / "F_objects"
MIB = 1 << 20


def doc(name: str):
    return json.loads((F / name).read_text())


def actors(prefix: str):
    """The captured actors as rows: holder_0 is rank 1 of an actor_rollout group, holder_1 a plain actor."""
    out = []
    for r in doc(f"{prefix}_actors.json")["data"]["result"]["result"]:
        a = row(r["actor_id"], group="wgA" if r["name"] == "holder_0" else None,
                rank=1 if r["name"] == "holder_0" else None, pid=r["pid"])
        a.actor_name, a.node_ip, a.class_name = r["name"], "192.0.2.2", r["class_name"]
        out.append(a)
    return out


def test_references_and_the_unrecorded_call_sites():
    refs, held, returned, recorded, warnings = O.objects(doc("off_objects_detail.json"))
    assert (held, returned, recorded, warnings) == (9, 9, False, ())
    assert {r.worker_type for r in refs} == {"WORKER", "DRIVER"}
    assert all(r.call_site is None for r in refs)  # "disabled"
    handles = [r for r in refs if r.reference_type == "ACTOR_HANDLE"]
    assert len(handles) == 2 and all(r.size_bytes is None for r in handles)  # -1: unknown


def test_recorded_call_sites_are_kept():
    refs, _, _, recorded, _ = O.objects(doc("on_objects_detail.json"))
    assert recorded is True
    puts = [r for r in refs if r.call_site and r.call_site.startswith("(put object)")]
    assert len(puts) == 7


def test_a_limit_is_a_cut_said_in_a_line():
    refs, held, returned, _, _ = O.objects(doc("off_objects_limit5.json"))
    assert (len(refs), held, returned) == (5, 9, 5)
    line = truncation(held, returned, 5)
    assert line is not None and "only 5 of 9" in line and "partial" in line
    assert truncation(9, 9, 10000) is None


def test_store_per_node_with_restored_unknown_until_stats_arrive():
    (n,) = O.store_nodes(doc("off_nodes_view_summary.json"))
    assert n.used_bytes == 25167300 and n.total_bytes == 80 * MIB
    assert (n.spilled_bytes, n.restored_bytes, n.local_objects) == (0, 0, 7)
    d = doc("off_nodes_view_summary.json")
    del d["data"]["summary"][0]["raylet"]["storeStats"]
    (n,) = O.store_nodes(d)
    assert n.restored_bytes is None and n.spilled_bytes is None


def test_grouped_by_holder_and_call_site_largest_first():
    refs, held, _, recorded, _ = O.objects(doc("off_objects_detail.json"))
    rows = actors("off")
    groups = group_refs(refs, rows)
    g0 = groups[0]  # holder_0: 3 × 4 MiB + 103 B, beats holder_1's 10 MiB
    assert (g0.actor_name, g0.worker_group, g0.rank, g0.objects, g0.refs) == ("holder_0", "wgA", 1, 4, 4)
    assert g0.bytes == 3 * 4194558 + 103
    assert groups[1].actor_name == "holder_1" and groups[1].rank is None and groups[1].bytes == 10486014 + 103
    drivers = [g for g in groups if g.worker_type == "DRIVER"]
    assert len(drivers) == 1 and drivers[0].actor_id is None and drivers[0].refs == 3
    assert drivers[0].unknown_size == 2 and drivers[0].bytes == 2097406  # two actor handles: size unknown
    assert dict(drivers[0].reference_types) == {"ACTOR_HANDLE": 2, "LOCAL_REFERENCE": 1}
    r = object_store_report(1.0, refs, held, recorded, rows, O.store_nodes(doc("off_nodes_view_summary.json")),
                            10000)
    assert r.objects == 9 and r.bytes == 3 * 4194558 + 10486014 + 2097406 + 2 * 103
    assert r.truncated is None and r.call_sites_recorded is False


def test_with_call_sites_each_site_is_its_own_group():
    refs, *_ = O.objects(doc("on_objects_detail.json"))
    groups = group_refs(refs, actors("on"))
    h0 = [g for g in groups if g.actor_name == "holder_0"]
    # the list comprehension's three puts share a site; the small put in __init__ has its own
    assert sorted(g.objects for g in h0) == [1, 3]


def test_an_error_answer_is_a_parse_error():
    import pytest

    with pytest.raises(parse.ParseError):
        O.objects({"result": False, "msg": "boom"})
