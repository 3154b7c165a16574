from __future__ import annotations

from tests.analysis.helpers import in_collective, row, sleeping
from tests.conftest import load
from verltop.analysis.dump import analyse
from verltop.analysis.merge import build_tree, compact_ints, compact_labels, render_tree
from verltop.sources.watchdog import parse_watchdog
from verltop.text.stacks import tree_text


def test_compact_ranges():
    assert compact_ints([0, 1, 2, 3, 5, 7, 8, 9]) == "0-3,5,7-9"
    assert compact_ints([]) == ""
    assert compact_labels(["g:0", "g:1", "g:2", "controller", "h:4"]) == "g:0-2 h:4 controller"


def test_tree_splits_where_ranks_diverge():
    actors = [row(f"a{i}", rank=i) for i in range(4)]
    samples = {f"a{i}": [in_collective("all_reduce")] for i in (0, 1, 3)}
    samples["a2"] = [sleeping()]
    r = analyse(actors, samples, 0.0)
    stacks = {f"wg:{x.actor.rank}": x.stack for x in r.ranks}
    lines = render_tree(build_tree(stacks))
    text = tree_text(build_tree(stacks))
    assert any(len(rk) == 4 for _, _, rk in lines)  # the shared Ray root
    assert "[wg:0-1,3] (3)" in text and "[wg:2] (1)" in text
    assert len(r.groups) == 2 and r.groups[0].ranks == ("wg:0", "wg:1", "wg:3")


def test_watchdog_lines_from_real_logs():
    info = parse_watchdog(load("nccl-straggler/rank0.log"))
    assert (info.op, info.seq, info.numel, info.last_enqueued, info.last_completed, info.timeout_ms) == \
        ("all_reduce", 5, 16777216, 5, 4, 60000)
    peer = parse_watchdog(load("nccl-straggler/rank1.log"))
    assert peer.op is None and peer.last_enqueued == 4
    assert parse_watchdog("hello\nworld") is None
    assert parse_watchdog(load("nccl-mismatch/rank1.log")).op == "all_gather"
