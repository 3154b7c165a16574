"""A task list parsed with the last answer's rows at hand: what it gives is what a fresh parse gives, rows whose
fields did not change keep their objects, and the memo holds one answer's rows."""

from __future__ import annotations

import copy
import json

from tests.conftest import FIX
from verltop.sources import parse


def _doc() -> dict:
    return json.loads((FIX / "ray-gpu-cluster/hung/api_v0_tasks.json").read_text())


def test_rows_that_did_not_change_keep_their_objects():
    doc = _doc()
    rows = doc["data"]["result"]["result"]
    assert len(rows) >= 4
    memo: dict = {}
    first, _ = parse.tasks(doc, memo)
    assert first == parse.tasks(doc)[0] and len(memo) == len(first)
    later = copy.deepcopy(doc)
    r = later["data"]["result"]["result"]
    r[0]["state"] = "FINISHED"  # a field task() reads: a new object
    r[1]["worker_pid"] = 999_999
    r[2]["job_id"] = "ffff"  # one it does not read: the same object
    r.append({**r[3], "task_id": "ab" * 14})  # a new task
    second, _ = parse.tasks(later, memo)
    assert second == parse.tasks(later)[0]
    assert second[0] is not first[0] and second[0].state == "FINISHED"
    assert second[1] is not first[1] and second[1].worker_pid == 999_999
    assert all(second[i] is first[i] for i in range(2, len(first)))
    assert len(memo) == len(second)  # this answer's rows only: the old versions of rows 0 and 1 are gone
    third, _ = parse.tasks(doc, memo)
    assert third == first and third[0] is not first[0]  # gone from the memo: parsed again


def test_odd_rows_are_parsed_as_without_the_memo():
    doc = _doc()
    r = doc["data"]["result"]["result"]
    r[0]["name"] = ["not", "a", "name"]  # unhashable: parsed, not kept
    r[1] = "not a row"
    memo: dict = {}
    got, _ = parse.tasks(doc, memo)
    assert got == parse.tasks(doc)[0] and len(memo) == len(got) - 1
    assert parse.tasks(doc, memo)[0] == got
