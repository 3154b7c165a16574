"""Property-based: no input escapes the parsers or the classifier as an exception."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from verltop.analysis import roles as R
from verltop.analysis.collectives import blocked_on, task_thread
from verltop.analysis.flight_recorder import load_dump
from verltop.analysis.watchdog import parse_watchdog
from verltop.model import RawActor
from verltop.sources import parse
from verltop.sources.pyspy_parse import parse_json, parse_text

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
    parse.rank_env(doc)
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
