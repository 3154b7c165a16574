from __future__ import annotations

import pickle

from tests.conftest import FIX
from verltop.analysis.flight_recorder import collective_info, match
from verltop.sources.flight_recorder import load_dump, rank_state


def ranks(case):
    out = []
    for k in (0, 1):
        doc, err = load_dump((FIX / case / "fr" / f"nccl_trace_rank_{k}").read_bytes())
        assert err is None
        out.append(rank_state(doc, k))
    return out


def test_straggler_missing_from_collective_5():
    r = ranks("nccl-straggler")
    i0, i1 = collective_info(r[0]), collective_info(r[1])
    assert (i0.op, i0.seq, i0.last_enqueued, i0.last_completed, i0.numel) == ("all_reduce", 5, 5, 4, 16777216)
    assert i1.last_enqueued == 4
    (finding,) = match(r)
    assert "#5" in finding and "ranks [1] never joined" in finding


def test_mismatch_op_and_sizes():
    r = ranks("nccl-mismatch")
    assert collective_info(r[0]).op == "all_reduce" and collective_info(r[1]).op == "all_gather"
    assert any("mismatch" in f and "all_gather" in f and "all_reduce" in f for f in match(r))


def test_barrier_and_json_variant():
    r = ranks("nccl-barrier")
    assert collective_info(r[0]).op == "barrier"
    doc, err = load_dump((FIX / "ray-token-auth-1gpu/fr/inprocess_dump_nccl_trace_json.json").read_bytes())
    assert err is None and rank_state(doc, 0).last_enqueued == 4  # pg_status values are strings there


def test_pickle_with_code_is_refused():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    doc, err = load_dump(pickle.dumps({"entries": [Evil()]}))
    assert doc is None and "refusing" in err
    assert load_dump(b"\x00garbage")[0] is None
