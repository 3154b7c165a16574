"""The rollout engines' load in words: one replica, the long tail of a generation, the details panel's rows."""

from __future__ import annotations

from tests.analysis.helpers import row
from verltop.engine.rollout_load import OTHER_NODE
from verltop.model import RolloutLoad
from verltop.text.contract import rollout_json
from verltop.text.rollout import load_text, tail_line
from verltop.ui.screens.details import facts_text


def load(name: str, running: int, waiting: int = 0, **kw) -> RolloutLoad:
    return RolloutLoad(f"id-{name}", name, "10.0.0.1:41000", "vllm", running, waiting, kw.get("kv", 0.5),
                       kw.get("pre", 0), 1e6, kw.get("tps", 812.4), 100.0, kw.get("problem"))


def test_one_replica():
    assert load_text(load("s", 14, 2, kv=0.634, pre=1)) == ("vllm 14 running, 2 waiting, KV cache 63%, 1 preemption, "
                                                             "812 tokens/s")
    assert load_text(RolloutLoad("x", "s", None, problem=OTHER_NODE)) == f"not read: {OTHER_NODE}"
    assert load_text(RolloutLoad("x", "s", None)) == "not read yet"
    stale = load("s", 3, problem="/metrics did not answer within 2 s")
    assert load_text(stale).endswith("(last read failed: /metrics did not answer within 2 s)")


def test_the_long_tail_names_the_replica_the_generation_waits_on():
    loads = [load("vllm_server_3_0", 14)] + [load(f"vllm_server_{i}_0", 0) for i in range(3)]
    assert tail_line("gen", loads) == ("gen waits on vllm_server_3_0: 14 requests still running, the other replicas "
                                       "idle")
    assert tail_line("update_actor", loads) is None  # not generating: idle engines are expected
    assert tail_line("gen", [load(f"s{i}", 5) for i in range(4)]) is None  # all busy: no tail
    assert tail_line("gen", [load("a", 1), load("b", 0)]) == "gen waits on a: 1 request still running, the other replica idle"
    assert tail_line("gen", [load("a", 1)]) is None  # one replica: nothing to compare


def test_json_and_the_details_panel():
    r = load("vllm_server_0_0", 14, 2, kv=0.63412)
    assert rollout_json(r) == {"actor_name": "vllm_server_0_0", "address": "10.0.0.1:41000", "running": 14,
                               "waiting": 2, "kv_cache_usage": 0.6341, "preemptions_total": 0,
                               "gen_tokens_per_s": 812.4, "engine": "vllm", "problem": None}
    a = row("srv", group=None, rank=None, role="rollout_server")
    text = facts_text(a, r, "gen waits on vllm_server_0_0: 14 requests still running, the other replicas idle").plain
    assert "engine load     vllm 14 running, 2 waiting, KV cache 63%" in text and "(10.0.0.1:41000)" in text
    assert "replicas        gen waits on vllm_server_0_0" in text
    assert "engine load" not in facts_text(a).plain


def test_snapshot_text_lists_each_replica():
    from dataclasses import replace

    from tests.engine.helpers import synthetic_snapshots
    from verltop.text.snapshot import snapshot_text

    s = replace(synthetic_snapshots()[5], phase="gen", rollout=(load("vllm_server_0_0", 14), load("vllm_server_1_0", 0)))
    text = snapshot_text(s)
    assert "ROLLOUT (each server's own /metrics)\ngen waits on vllm_server_0_0: 14 requests still running, the other " \
           "replica idle\nvllm_server_0_0  10.0.0.1:41000  vllm 14 running" in text
    assert "ROLLOUT" not in snapshot_text(synthetic_snapshots()[5])
