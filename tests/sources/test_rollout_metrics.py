"""The rollout engines' /metrics: vLLM's and SGLang's names (the answers in tests/fixtures/rollout are written
after the engines' metric definitions: vLLM V1 ``vllm/v1/metrics/loggers.py``, SGLang 0.5
``srt/metrics/collector.py``), and the listening sockets of a process read from /proc."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from verltop.sources.rollout import connect_host, host_port, listening, parse_engine_metrics

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "rollout"


def test_vllm_v1_with_two_data_parallel_engines():
    m = parse_engine_metrics((FIX / "vllm-0.11-dp2.txt").read_text())
    assert m is not None and m.engine == "vllm"
    assert (m.running, m.waiting, m.preemptions_total) == (17, 2, 2)  # summed over the engines
    assert m.kv_cache_usage == pytest.approx(0.6312)  # the fullest engine's
    assert m.gen_tokens_total == 912345.0 and m.gen_tokens_per_s is None
    # vllm:num_preemptions_created (a gauge prometheus_client adds to counters) is not the count


def test_older_vllm_names():
    m = parse_engine_metrics((FIX / "vllm-old-gpu-cache.txt").read_text())
    assert m is not None and (m.running, m.waiting, m.kv_cache_usage, m.preemptions_total) == (5, 1, 0.25, 7)


def test_sglang_0_5():
    m = parse_engine_metrics((FIX / "sglang-0.5.txt").read_text())
    assert m is not None and m.engine == "sglang"
    assert (m.running, m.waiting, m.preemptions_total) == (9, 4, 3)  # the counter, not the last batch's gauge
    assert m.kv_cache_usage == pytest.approx(0.41) and m.gen_tokens_per_s == pytest.approx(1523.7)


@pytest.mark.parametrize("text", ["", "# HELP x\nray_tasks 3\n", "vllm:num_requests_running{x=\"1\"} garbage\n",
                                  "<html>not found</html>", "vllm:num_requests_running NaN\n"])
def test_not_an_engine(text):
    assert parse_engine_metrics(text) is None


def test_labels_with_spaces_and_braces():
    m = parse_engine_metrics('vllm:num_requests_running{model_name="a b}c"} 4 1700000000\n')
    assert m is not None and m.running == 4


def test_listening_sockets_of_a_process_from_proc():
    with socket.socket() as lo, socket.socket(socket.AF_INET6) as six, socket.socket() as bound:
        lo.bind(("127.0.0.1", 0))
        lo.listen()
        six.bind(("::", 0))
        six.listen()
        bound.bind(("127.0.0.1", 0))  # bound, not listening (verl's port reservations): not a server
        got = listening(os.getpid())
        assert ("127.0.0.1", lo.getsockname()[1]) in got
        assert ("::", six.getsockname()[1]) in got
        assert all(p != bound.getsockname()[1] for _, p in got)
    assert listening(2**22 + 12345) == []  # no such process


def test_where_to_connect():
    assert connect_host("0.0.0.0", "10.0.0.3") == "10.0.0.3"
    assert connect_host("::", None) == "127.0.0.1"
    assert connect_host("::ffff:10.1.2.3", None) == "10.1.2.3"
    assert host_port("fe80::1", 80) == "[fe80::1]:80" and host_port("10.0.0.1", 8000) == "10.0.0.1:8000"


def test_vllm_sleep_state_is_the_level_of_the_state_set_to_one():
    base = (FIX / "vllm-0.11-dp2.txt").read_text()
    assert parse_engine_metrics(base).sleep_state is None  # no sleep mode: not said
    lines = ['# TYPE vllm:engine_sleep_state gauge']
    for eng, on in (("0", "weights_offloaded"), ("1", "discard_all")):
        for st in ("awake", "weights_offloaded", "discard_all"):
            lines.append(f'vllm:engine_sleep_state{{engine="{eng}",model_name="m",sleep_state="{st}"}} '
                         f'{1.0 if st == on else 0.0}')
    m = parse_engine_metrics(base + "\n".join(lines) + "\n")
    assert m is not None and m.sleep_state == 1.0  # the most awake engine's level
    awake = 'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 1.0\n'
    assert parse_engine_metrics(base + awake).sleep_state == 0.0
