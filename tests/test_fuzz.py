"""Property-based: no input escapes the parsers or the classifier as an exception."""

from __future__ import annotations

import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from verltop.analysis import roles as R
from verltop.analysis.collectives import blocked_on, task_thread
from verltop.model import RawActor
from verltop.sources import parse
from verltop.sources.flight_recorder import load_dump
from verltop.sources.pyspy import parse_json, parse_text
from verltop.sources.watchdog import parse_watchdog

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=6),
    max_leaves=30,
)

ACTOR_KEYS = ["actor_id", "class_name", "state", "name", "node_id", "pid", "job_id", "serialized_runtime_env",
              "death_cause", "num_restarts", "placement_group_id"]
row = st.fixed_dictionaries({}, optional={k: json_values for k in ACTOR_KEYS})
envelope = st.fixed_dictionaries({
    "result": st.booleans() | st.none(),
    "data": st.fixed_dictionaries({"result": st.fixed_dictionaries({"result": st.lists(row | json_values, max_size=5),
                                                                      "total": json_values})}) | json_values,
})


@settings(max_examples=300, deadline=None)
@given(envelope | json_values)
def test_state_api_parsers_total(doc):
    for fn in (parse.actors, parse.tasks, parse.state_nodes):
        try:
            fn(doc)
        except parse.ParseError:
            pass


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_node_parsers_total(doc):
    for fn in (parse.nodes_summary, parse.node_detail):
        try:
            fn({"result": True, "data": {"summary": [doc], "detail": doc}}, now=1.0)
            fn(doc)
        except parse.ParseError:
            pass
    parse.node_stats(doc)
    parse.runtime_env(doc)
    parse.runtime_env(json.dumps(doc))
    parse.death_cause_text(doc)


frame = st.fixed_dictionaries({}, optional={"name": json_values, "filename": json_values, "line": json_values,
                                            "module": json_values})
thread = st.fixed_dictionaries({}, optional={"thread_id": json_values, "thread_name": json_values,
                                             "active": json_values, "owns_gil": json_values,
                                             "frames": st.lists(frame | json_values, max_size=6)})


@settings(max_examples=300, deadline=None)
@given(st.lists(thread | json_values, max_size=4) | json_values, st.floats(allow_nan=True) | st.none())
def test_pyspy_json_and_analysis_total(doc, gpu):
    threads, _err = parse_json(json.dumps(doc, default=str))
    t = task_thread(threads)
    blocked_on(t, gpu)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_text_parsers_total(text):
    threads, _ = parse_text(text)
    blocked_on(task_thread(threads))
    parse_watchdog(text)
    load_dump(text.encode())


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60), st.text(max_size=60) | st.none(),
       st.lists(st.tuples(st.sampled_from(["RANK", "WORLD_SIZE", "WG_PREFIX", "RAY_LOCAL_WORLD_SIZE"]),
                          st.text(max_size=8)), max_size=4),
       st.lists(st.text(max_size=40), max_size=5))
def test_role_classifier_total(cls, name, env, methods):
    a = RawActor("id", cls, "ALIVE", name, None, None, env=tuple(env))
    ident = R.identity(a)
    roles = R.roles_from_methods(methods)
    role = R.active_role(ident.base_role, roles, methods[0] if methods else None, None)
    assert role in ("controller", "actor_rollout_ref", "actor_rollout", "actor", "rollout", "ref", "critic", "rm",
                    "teacher", "rollout_server", "agent_loop", "reward_loop", "other")
    R.step_phase([(role, m) for m in methods])


# ---------------------------------------------------------------------------------------------- NCCL evidence
# The watchdog lines come from worker logs and the Flight Recorder dumps from files in /tmp: both are input
# verltop does not control (a planted /tmp file included). Generated close to the real shapes, then broken.

from verltop.analysis.flight_recorder import collective_info, match  # noqa: E402
from verltop.sources.flight_recorder import rank_state  # noqa: E402
from verltop.sources.watchdog import OP_NAMES  # noqa: E402

big_digits = st.text(alphabet="0123456789", min_size=1, max_size=5000)  # past int()'s 4300-digit limit
numbers = st.integers(min_value=-(2**70), max_value=2**70).map(str) | big_digits | st.text(max_size=6)
watchdog_line = st.one_of(
    st.builds(lambda seq, op, n_in, n_out, t, ms: (
        f"[rank{seq[:3]}]:[E ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n_in}, NumelOut={n_out}, Timeout(ms)={t}) ran for {ms} "
        "milliseconds before timing out."),
        numbers, st.sampled_from(sorted(OP_NAMES)) | st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_", max_size=30),
        numbers, numbers, numbers, numbers),
    st.builds(lambda pg, guid, r, enq, comp: (
        f"[PG ID {pg} PG GUID {guid} Rank {r}] Exception (either an error or timeout) detected by watchdog at work: "
        f"{enq}, last enqueued NCCL work: {enq}, last completed NCCL work: {comp}."),
        st.text(max_size=5), st.text(max_size=12), numbers, numbers, numbers),
    st.text(max_size=200),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(watchdog_line, max_size=6))
@example(["Watchdog caught collective operation timeout: WorkNCCL(SeqNum=" + "9" * 5000 + ", OpType=ALLREDUCE)"])
@example(["[PG ID 0 PG GUID 0 Rank 1] last enqueued NCCL work: " + "1" * 4400 + ", last completed NCCL work: 3"])
def test_watchdog_parser_total(lines):
    info = parse_watchdog("\n".join(lines))
    if info is not None:
        for v in (info.seq, info.last_enqueued, info.last_completed, info.numel, info.timeout_ms):
            assert v is None or isinstance(v, int)


fr_entry = st.fixed_dictionaries({}, optional={
    "record_id": json_values, "pg_id": st.sampled_from([0, "0", 1]) | json_values,
    "collective_seq_id": st.integers(-5, 50) | json_values, "p2p_seq_id": json_values, "op_id": json_values,
    "profiling_name": st.sampled_from(["nccl:all_reduce", "nccl:all_gather", "nccl:all_reduce_barrier"]) | json_values,
    "input_sizes": st.lists(st.lists(st.integers(-3, 10**6) | st.floats(allow_nan=True) | json_values, max_size=3),
                            max_size=2) | st.frozensets(st.integers(0, 9), max_size=2) | json_values,
    "output_sizes": json_values, "state": st.sampled_from(["scheduled", "started", "completed"]) | json_values,
    "is_p2p": json_values, "time_created_ns": json_values, "frames": json_values,
})
fr_dump = st.fixed_dictionaries({"entries": st.lists(fr_entry | json_values, max_size=6)}, optional={
    "version": json_values, "pg_config": json_values,
    "pg_status": st.dictionaries(st.sampled_from(["0", "1"]) | st.text(max_size=3), st.fixed_dictionaries({}, optional={
        "last_enqueued_collective": json_values, "last_started_collective": json_values,
        "last_completed_collective": json_values}) | json_values, max_size=2) | json_values,
})


def _fr(entry: dict) -> dict:
    return {"entries": [{"pg_id": 0, "collective_seq_id": 1, "profiling_name": "nccl:all_reduce",
                         "input_sizes": [[4]], **entry}]}


@settings(max_examples=300, deadline=None)
@given(st.lists(fr_dump, min_size=1, max_size=3), st.booleans())
@example([_fr({"profiling_name": ["nccl:all_reduce"]})], False)  # a list where a name belongs
@example([_fr({"input_sizes": [[float("inf")]]})], False)  # JSON's Infinity as a size
@example([_fr({"input_sizes": frozenset({1, 2})})], True)  # a pickled set
def test_flight_recorder_total(docs, as_pickle):
    import pickle

    states = []
    for i, d in enumerate(docs):
        raw = pickle.dumps(d) if as_pickle else json.dumps(d, default=str).encode()
        doc, err = load_dump(raw)
        assert (doc is None) != (err is None)
        if doc is not None:
            s = rank_state(doc, i)
            collective_info(s)
            match([s, rank_state(doc, i + len(docs))])  # the same entries on two ranks: compared
            states.append(s)
    match(states)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_flight_recorder_bytes_total(data):
    doc, err = load_dump(data)
    assert (doc is None) != (err is None)
    if doc is not None:
        match([rank_state(doc, 0), rank_state(doc, 1)])
