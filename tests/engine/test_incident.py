"""An incident directory as the watch writes it: the files, their modes, the incident.json contract."""

from __future__ import annotations

import json
import os
import stat

from tests.analysis.test_incidents import T0, demo_report, snap
from verltop.engine.incident import Incident, incident_dir, prune_incidents
from verltop.text.contract import chain_json, dump_json, suspect_json

KEYS = {"kind", "id", "started_at", "detected_at", "closed_at", "phase", "groups", "suspects", "chains", "evidence",
        "deaths", "waits", "summary", "recording", "dump", "captures", "escalations"}


def test_files_and_contract(tmp_path):
    s = snap(T0 + 30, stalled=(0, 1, 3))
    d = incident_dir(tmp_path, T0 + 30, "wg/odd name")
    assert d.parent.name == "incidents" and d.name.endswith("-wg_odd_name")
    inc = Incident(d.name, d, T0, T0 + 30, ["wg"], "update_actor", first=s, snap=s, report=demo_report(),
                   captures=1)
    inc.escalate(T0 + 90, "died", "wg:3 DEAD: worker died")
    inc.write()
    doc = json.loads((d / "incident.json").read_text())
    assert set(doc) == KEYS and doc["dump"] == "dump.json" and doc["recording"] is None  # not exported here
    assert doc["kind"] == "hang"
    assert doc["suspects"] == [suspect_json(s_) for s_ in demo_report().suspects]
    assert doc["chains"] == [chain_json(c) for c in demo_report().chains] and doc["chains"]  # the dump's wait chains
    assert "Wait chains: " in doc["summary"] and "_stuck_rollout" in doc["summary"].split("Wait chains: ")[1]
    assert doc["waits"] == [{"group": "wg", "op": "all_reduce", "ranks": "wg:0-1,3", "count": 3,
                             "frame": doc["waits"][0]["frame"], "collective": "all_reduce #5"}]
    assert doc["escalations"] == [{"at": T0 + 90, "kind": "died", "text": "wg:3 DEAD: worker died"}]
    assert (d / "summary.txt").read_text() == doc["summary"] + "\n"
    assert json.loads((d / "dump.json").read_text()) == json.loads(json.dumps(dump_json(demo_report())))
    for p in (d, d.parent):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o700
    for f in ("summary.txt", "incident.json", "dump.json"):
        assert stat.S_IMODE(os.stat(d / f).st_mode) == 0o600
    assert not list(d.glob(".*"))  # no temporary file left
    # without a capture: still a valid contract
    inc2 = Incident("x", tmp_path / "incidents" / "x", None, T0, ["wg"], None, first=s, snap=s,
                    capture_note="stacks not taken (--max-captures 0)")
    inc2.write()
    doc2 = json.loads((tmp_path / "incidents" / "x" / "incident.json").read_text())
    assert set(doc2) == KEYS and doc2["suspects"] == [] and doc2["dump"] is None
    assert doc2["captures"] == {"stacks": 0, "note": "stacks not taken (--max-captures 0)"}
    assert "No stacks were taken." in doc2["summary"] and "--max-captures 0" in doc2["summary"]


def test_oldest_incidents_are_pruned(tmp_path):
    for i in range(5):
        incident_dir(tmp_path, T0 + i * 60, "wg").mkdir(parents=True)
    gone = prune_incidents(tmp_path, 3)
    assert len(gone) == 2 and sorted(p.name for p in (tmp_path / "incidents").iterdir())[0] > gone[-1]
