"""Incidents: one per stall (not per poll), escalations, the end of one and the start of the next; the
diagnosis names the straggler and the collective its peers wait in."""

from __future__ import annotations

from dataclasses import replace

from tests.analysis.helpers import controller_in_get, in_collective, row, sleeping
from verltop.analysis.dump import analyse
from verltop.analysis.incidents import IncidentTracker, death_is_failure
from verltop.model import CollectiveInfo, Problem, Snapshot, SourceStatus, Stall
from verltop.text.incidents import diagnose, incident_summary

T0 = 1.79e9
PEERS = Stall("peers", running_s=40.0, method="update_actor", peers=3, peers_done_s=35.0)


def snap(t: float, stalled: tuple[int, ...] = (), dead: dict[int, str] | None = None, extra: tuple = (),
         others_stalled: bool = False) -> Snapshot:
    dead = dead or {}
    rows = [row("ctl", group=None, rank=None, role="controller", task="run")]
    for r in range(4):
        a = replace(row(f"a{r}", rank=r, gpu=100.0 if r != 2 else 0.0), task_start_s=T0 - 10)
        if r in stalled:
            a = replace(a, stalls=(PEERS,))
        if r in dead:
            a = replace(a, state="DEAD", death_cause=dead[r], stalls=(Stall("dead", state="DEAD", cause=dead[r]),))
        rows.append(a)
    ref = row("b0", group="refg", rank=0, role="ref")
    if others_stalled:
        ref = replace(ref, stalls=(PEERS,), task_start_s=T0)
    rows.append(ref)
    rows += list(extra)
    return Snapshot(t, "http://x", (), tuple(rows), "update_actor", progress_s=30.0)


CRASH = "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR"
ENDED = "The actor is dead because its owner has died. Owner worker exit type: INTENDED_USER_EXIT"


def test_one_incident_per_stall_not_per_poll():
    tr = IncidentTracker(clear_after_s=30)
    assert tr.update(snap(T0)) == []
    ev = tr.update(snap(T0 + 2, stalled=(0, 1, 3)))
    assert [e.kind for e in ev] == ["opened"] and ev[0].groups == ("wg",) and set(ev[0].stalled) == {"a0", "a1", "a3"}
    assert ev[0].started_at == T0 - 10  # when the stalled task began
    for k in range(2, 50):  # a long hang (until T0 + 98): nothing new
        assert tr.update(snap(T0 + 2 * k, stalled=(0, 1, 3))) == []
    # clear: closes only after clear_after_s without a stall
    assert tr.update(snap(T0 + 100)) == []
    assert tr.update(snap(T0 + 120)) == []
    assert [e.kind for e in tr.update(snap(T0 + 131))] == ["closed"]
    # two stalls in a row: two incidents
    assert [e.kind for e in tr.update(snap(T0 + 140, stalled=(1,)))] == ["opened"]


def test_a_stall_that_flickers_stays_one_incident():
    tr = IncidentTracker(clear_after_s=30)
    tr.update(snap(T0))
    assert tr.update(snap(T0 + 2, stalled=(0,)))[0].kind == "opened"
    for k in range(2, 30):  # stalled every other poll (a rule on the edge): still the same incident
        assert tr.update(snap(T0 + 2 * k, stalled=(0,) if k % 2 else ())) == []


def test_escalations_add_to_the_open_incident():
    tr = IncidentTracker()
    tr.update(snap(T0))
    tr.update(snap(T0 + 2, stalled=(0, 1, 3)))
    ev = tr.update(snap(T0 + 4, stalled=(0, 1, 3), others_stalled=True))
    assert [(e.kind, e.groups) for e in ev] == [("spread", ("refg",))]
    ev = tr.update(snap(T0 + 6, stalled=(0, 1), dead={3: CRASH}))
    assert [(e.kind, e.died) for e in ev] == [("died", ("a3",))]
    assert tr.update(snap(T0 + 8, stalled=(0, 1), dead={3: CRASH})) == []  # a death counts once


def test_deaths_open_incidents_unless_intended_or_old():
    tr = IncidentTracker()
    assert tr.update(snap(T0, dead={1: CRASH})) == []  # dead before we looked: old news
    ev = tr.update(snap(T0 + 2, dead={1: CRASH, 2: CRASH}))
    assert [(e.kind, e.died) for e in ev] == [("opened", ("a2",))]
    tr2 = IncidentTracker()
    tr2.update(snap(T0))
    assert tr2.update(snap(T0 + 2, dead={0: ENDED, 1: "The actor is dead because it was killed by `ray.kill`."})) == []
    assert death_is_failure(replace(row("x"), state="RESTARTING"))


def test_actors_outside_the_job_never_open_one():
    other = replace(row("zz", group=None, rank=None, role="other", task="work"), stalls=(PEERS,))
    tr = IncidentTracker()
    tr.update(snap(T0))
    assert tr.update(snap(T0 + 2, extra=(other,))) == []


def demo_report():
    ranks = list(snap(T0 + 30, stalled=(0, 1, 3)).actors[:5])
    samples = {f"a{r}": [in_collective("all_reduce")] * 3 for r in (0, 1, 3)}
    samples["a2"] = [sleeping("_stuck_rollout")] * 3
    samples["ctl"] = [controller_in_get()] * 3
    coll = {f"a{r}": CollectiveInfo("watchdog_log", "all_reduce", 5, 5, 4, 1024) for r in (0, 1, 3)}
    return analyse(ranks, samples, T0 + 31, coll)


def test_the_summary_names_the_straggler_and_the_collective_its_peers_wait_in():
    s = snap(T0 + 30, stalled=(0, 1, 3))
    d = diagnose(s, demo_report(), ("wg",))
    assert [(w.op, w.ranks, w.collective) for w in d.waits] == [("all_reduce", ("wg:0", "wg:1", "wg:3"), "all_reduce #5")]
    assert d.suspects[0].rank == 2
    text = incident_summary(d, "03:12:40 UTC", "03:12:58 UTC")
    assert text.startswith("Stall in phase update_actor of worker group wg, began 03:12:40 UTC (detected 03:12:58 UTC).")
    assert "Suspect: rank 2 of wg (pid 100): " in text and "_stuck_rollout" in text
    assert "Ranks wg:0-1,3 wait in all_reduce (all_reduce #5) at " in text
    assert "3 of 4 actors of wg stalled" in text and "NCCL watchdog on wg:0: all_reduce #5 timed out" in text
    assert "\n" not in text


def test_without_stacks_the_summary_says_so_and_lists_deaths():
    s = snap(T0 + 30, stalled=(0, 1), dead={3: CRASH})
    d = diagnose(s, None, ("wg",), notes=("stacks not taken: 6 captures in the last hour already",))
    text = incident_summary(d, "a", "b")
    assert "No stacks were taken." not in text  # a death is a finding
    assert "Died: wg:3 DEAD: " + CRASH in text and "stacks not taken" in text
    text2 = incident_summary(diagnose(snap(T0 + 30, stalled=(0,)), None, ("wg",)), "a", "b")
    assert "No stacks were taken." in text2


def test_snapshots_without_fresh_data_neither_open_nor_close():
    """The dashboard stops answering: ages run on with the clock, tasks that ended look stuck. No incident
    from that; and an open incident does not end because the data went away."""
    down = (SourceStatus("actors", 1.0, None, 7.0),
            SourceStatus("tasks", 3.0, Problem("unreachable", "dashboard not reachable"), 7.0))
    stale = (SourceStatus("actors", 9.0, None, 7.0), SourceStatus("tasks", 1.0, None, 7.0))
    tr = IncidentTracker(clear_after_s=10)
    tr.update(snap(T0))
    assert tr.update(replace(snap(T0 + 2, stalled=(0, 1)), sources=down)) == []
    assert tr.update(replace(snap(T0 + 4, stalled=(0, 1)), sources=stale)) == []
    assert [e.kind for e in tr.update(snap(T0 + 6, stalled=(0, 1)))] == ["opened"]
    assert tr.update(replace(snap(T0 + 30), sources=down)) == []  # blind, not clear
    assert [e.kind for e in tr.update(snap(T0 + 32))] == ["closed"]


def test_wait_chains_and_classified_deaths_in_the_summary():
    from verltop.model import Chain, ChainEnd, ChainLink, Death, EndWhy
    from verltop.text.chains import chain_text

    s = snap(T0 + 30, stalled=(0, 1), dead={3: CRASH})
    rep = demo_report()
    chain = Chain((ChainLink("ctl", None, "TaskRunner.run", 10), ChainLink("a2", "wgWorkerDict_0:2",
                                                                             "WorkerDict.actor_rollout_update_actor", 102)),
                  ChainEnd(102, None, "workers.py:55 _stuck_rollout", EndWhy("own_code", "workers.py:55 _stuck_rollout")))
    ranks = tuple(replace(r, death=Death("nccl_timeout", "all_reduce #5 timed out after 600 s"))
                  if r.actor.actor_id == "a3" else r for r in rep.ranks)
    rep = replace(rep, ranks=ranks, chains=(chain,))
    d = diagnose(s, rep, ("wg",), chains=(chain_text(chain),))
    text = incident_summary(d, "a", "b")
    assert f"Wait chains: {chain_text(chain)}." in text
    assert chain_text(chain).endswith(": in its own code at workers.py:55 _stuck_rollout")
    assert "Died: wg:3 DEAD: nccl_timeout: all_reduce #5 timed out after 600 s." in text
