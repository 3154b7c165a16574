"""Rows reused between builds: an actor whose inputs did not change keeps its row object; one whose state,
process figures or task changed is built again; the snapshot is the same as built without the memo."""

from __future__ import annotations

from dataclasses import replace

from verltop.analysis import snapshot_build as SB
from verltop.analysis.history import TaskHistory
from verltop.analysis.snapshot_build import BuildMemo, ClusterData, build_snapshot
from verltop.model import Gpu, Node, ProcStat, RawActor, RawTask

NOW = 1_800_000_000.0
ENV = (("RANK", "0"), ("WORLD_SIZE", "2"), ("WG_PREFIX", "abc"))


def actors() -> list[RawActor]:
    out = [RawActor(actor_id=f"w{i}", class_name="abcWorkerDict", state="ALIVE", name=f"abcWorkerDict_0:{i}",
                    node_id="n1", pid=100 + i, env=(("RANK", str(i)), ("WORLD_SIZE", "2"), ("WG_PREFIX", "abc")))
           for i in range(2)]
    out += [RawActor(actor_id=f"x{i}", class_name="Filler", state="ALIVE", name=None, node_id="n1", pid=200 + i)
            for i in range(3)]
    return out


def data(acts, procs=(), tasks=()) -> ClusterData:
    node = Node("n1", "10.0.0.1", "h1", is_head=True, mem_total_bytes=1 << 36, procs=tuple(procs))
    return ClusterData(address="x", actors=tuple(acts), tasks=tuple(tasks), nodes=(node,))


def test_unchanged_actors_keep_their_rows_and_changed_ones_are_rebuilt():
    hist, memo = TaskHistory(), BuildMemo()
    acts = actors()
    task = RawTask("t1", "update", "WorkerDict.update", "RUNNING", "w0", "n1", 100, (NOW - 30) * 1000)
    procs = [ProcStat(pid=201, cpu_percent=5.0, rss_bytes=1 << 30, title="x")]
    first = build_snapshot(data(acts, procs, [task]), hist, NOW, memo=memo)
    assert set(memo.rows) == {a.actor_id for a in acts}
    acts2 = [*acts[:3], replace(acts[3], state="DEAD"), acts[4]]  # x1 died
    procs2 = [ProcStat(pid=201, cpu_percent=50.0, rss_bytes=1 << 30, title="x")]  # x1's figures changed too
    d2 = data(acts2, procs2, [task])
    second = build_snapshot(d2, hist, NOW + 2, memo=memo)
    by1 = {r.actor_id: r for r in first.actors}
    by2 = {r.actor_id: r for r in second.actors}
    assert by2["x0"] is by1["x0"] and by2["x2"] is by1["x2"] and by2["w1"] is by1["w1"]
    assert by2["w0"] is not by1["w0"] and by2["w0"].task_running_s == 32.0  # its task runs on: a new age
    assert by2["x1"] is not by1["x1"] and by2["x1"].state == "DEAD"
    assert second == build_snapshot(d2, hist, NOW + 2)  # the same snapshot as without the memo
    build_snapshot(data(acts2[:2]), hist, NOW + 4, memo=memo)
    assert set(memo.rows) == {"w0", "w1"}  # actors that left are forgotten


def test_idle_actors_on_the_same_node_objects_keep_their_rows_and_their_stalls_are_judged_anew():
    hist, memo = TaskHistory(), BuildMemo()
    acts = actors()
    procs = [ProcStat(pid=201, cpu_percent=5.0, rss_bytes=1 << 30, title="x")]
    d = data(acts, procs)  # no task runs: every actor idle
    first = build_snapshot(d, hist, NOW, memo=memo)
    for dt in (2.0, 4000.0):  # long enough for the idle ranks to be judged stalled, if the rules say so
        again = build_snapshot(d, hist, NOW + dt, memo=memo)
        assert again == build_snapshot(d, hist, NOW + dt)
        by1 = {r.actor_id: r for r in first.actors}
        for r in again.actors:
            if not r.stalls:
                assert r is by1[r.actor_id]


def test_a_running_call_on_the_same_inputs_is_copied_with_its_new_age_and_judged_anew(monkeypatch):
    """A rank whose call, node and process are the objects of the last build gets a row that differs in its
    age only (copied, not worked out again), its stalls judged at the new time: the same snapshot as a build
    without the memo, whether the call is young, old enough to stall, or has ended."""
    hist, memo = TaskHistory(), BuildMemo()
    acts = actors()
    task = RawTask("t1", "actor_rollout_update_actor", "WorkerDict.actor_rollout_update_actor", "RUNNING", "w0", "n1",
                   100, (NOW - 30) * 1000)
    d = data(acts, [ProcStat(pid=100, cpu_percent=5.0, rss_bytes=1 << 30, title="x")], [task])
    first = build_snapshot(d, hist, NOW, memo=memo)
    copied: list[str] = []
    evolve = SB.evolve

    def spy(row, **changes):  # the copy with its new age (a copy with stalls is another thing)
        if "task_running_s" in changes:
            copied.append(row.actor_id)
        return evolve(row, **changes)

    monkeypatch.setattr(SB, "evolve", spy)
    for dt in (2.0, 4000.0):  # 4000 s: past every age limit, so the rules name a stall
        again = build_snapshot(d, hist, NOW + dt, memo=memo)
        assert again == build_snapshot(d, hist, NOW + dt)
        w0 = next(r for r in again.actors if r.actor_id == "w0")
        assert w0.task_running_s == 30.0 + dt and w0.cpu_percent == 5.0 and w0.role == "actor_rollout"
        assert w0 is not next(r for r in first.actors if r.actor_id == "w0")
    assert any(s.rule == "age" for s in w0.stalls)
    assert copied == ["w0", "w0"]  # the running rank's row was copied, both times (the check builds had no memo)
    ended = build_snapshot(data(acts, (), ()), hist, NOW + 4002, memo=memo)  # the call ended: a new row
    assert ended == build_snapshot(data(acts, (), ()), hist, NOW + 4002)
    assert next(r for r in ended.actors if r.actor_id == "w0").task is None


def test_a_call_that_ended_leaves_the_row_though_nothing_else_about_the_rank_changed():
    """The call ends between two builds and its rank's node, processes and last method are the very objects
    of the last build (the same method runs every step): the row says idle, not the call that ended."""
    hist, memo = TaskHistory(), BuildMemo()
    task = RawTask("t1", "actor_rollout_generate_sequences", "WorkerDict.actor_rollout_generate_sequences",
                   "RUNNING", "w0", "n1", 100, (NOW - 30) * 1000)
    running = data(actors(), [ProcStat(pid=100, cpu_percent=5.0, rss_bytes=1 << 30, title="x")], [task])
    for dt in (0.0, 2.0):  # the first build, then the copied row of a call on the same inputs
        assert next(r for r in build_snapshot(running, hist, NOW + dt, memo=memo).actors if r.actor_id == "w0").task
    idle = replace(running, tasks=())  # the same node object, the same actors
    for dt in (4.0, 6.0):
        after = build_snapshot(idle, hist, NOW + dt, memo=memo)
        assert after == build_snapshot(idle, hist, NOW + dt)
        w0 = next(r for r in after.actors if r.actor_id == "w0")
        assert w0.task is None and w0.task_running_s is None


def test_builds_on_the_same_actor_objects_match_builds_without_the_memo_whatever_changes_between_them():
    """The same actor objects build after build (the usual case: only the rows whose inputs changed are
    looked at), while calls start and end, a node's figures change (its detail read, or only its summary), a
    group learns a new role, an actor dies, a probe comes and goes and this machine's nodes change: every build
    equals one without the memo."""
    import random

    rng = random.Random(7)
    hist, memo = TaskHistory(), BuildMemo()

    def worker(g: str, i: int, node: str) -> RawActor:
        return RawActor(actor_id=f"{g}{i}", class_name=f"{g}WorkerDict", state="ALIVE", name=f"{g}WorkerDict_0:{i}",
                        node_id=node, pid=1000 + 10 * len(g) + i,
                        env=(("RANK", str(i)), ("WORLD_SIZE", "4"), ("WG_PREFIX", g)))

    acts = [worker(g, i, f"n{i % 2}") for g in ("aa", "bbb") for i in range(4)]
    acts += [RawActor(actor_id=f"f{i}", class_name="Filler", state="ALIVE", name=None, node_id="n1", pid=300 + i)
             for i in range(3)]
    probe = RawActor(actor_id="p", class_name="verltop.probe.VerltopProbe", state="ALIVE", name=None, node_id="n0",
                     pid=400)

    def node(nid: str, cpu: float) -> Node:
        procs = tuple(ProcStat(pid=a.pid, cpu_percent=cpu, rss_bytes=1 << 30, title="x") for a in acts if a.pid)
        return Node(nid, f"10.0.0.{nid[1]}", nid, is_head=nid == "n0", mem_total_bytes=1 << 36, procs=procs)

    nodes = {"n0": node("n0", 1.0), "n1": node("n1", 1.0)}
    running: dict[str, RawTask] = {}
    local: frozenset[str] = frozenset()
    now = NOW
    reused = 0
    for step in range(120):
        move = rng.choice(("none", "none", "node", "summary", "summary", "start", "end", "role", "die", "probe", "local"))
        if move == "node":
            nid = rng.choice(("n0", "n1"))
            nodes[nid] = node(nid, rng.choice((1.0, 5.0, 50.0)))
        elif move == "summary":  # the node's summary read anew: a new object, its detail (processes) the same
            nid = rng.choice(("n0", "n1"))
            on = [a.pid for a in acts if a.node_id == nid and a.pid]
            held = rng.sample(on, rng.randrange(0, 3))  # the ranks on its GPUs, their figures new
            gpus = tuple(Gpu(k, "NVIDIA H200", rng.choice((0.0, 90.0)), 10 << 30, 140 << 30, f"GPU-{nid}-{k}",
                             ((pid, rng.choice((8, 9)) << 30, 50.0),)) for k, pid in enumerate(held))
            nodes[nid] = replace(nodes[nid], cpu_percent=rng.random() * 100, gpus=gpus,
                                 mem_total_bytes=rng.choice((1 << 36, 1 << 36, 1 << 37)))
        elif move == "start":
            a = rng.choice(acts)
            method = rng.choice(("actor_rollout_generate_sequences", "actor_rollout_update_actor"))
            running[a.actor_id] = RawTask(f"t{step}", method, f"WorkerDict.{method}", "RUNNING", a.actor_id, a.node_id,
                                          a.pid, (now - 5) * 1000)
        elif move == "end" and running:
            running.pop(rng.choice(sorted(running)))
        elif move == "role":
            hist.remember_method(rng.choice(acts).actor_id,
                                 rng.choice(("critic_update_critic", "ref_compute_ref_log_prob")))
        elif move == "die":
            i = rng.randrange(len(acts))
            acts[i] = replace(acts[i], state="DEAD", pid=None)
            running.pop(acts[i].actor_id, None)
        elif move == "local":
            local = frozenset() if local else frozenset({"n1"})
        hist.observe([(t.task_id, t.actor_id, t.actor_id.rstrip("0123456789"), t.name, t.start_time_ms / 1000)
                      for t in running.values()], now)
        shown = [*acts, probe] if move == "probe" else acts
        d = ClusterData(address="x", actors=tuple(shown), tasks=tuple(running.values()),
                        nodes=(nodes["n0"], nodes["n1"]), local_node_ids=local,
                        local_procs={a.pid: ProcStat(pid=a.pid, cpu_percent=77.0, rss_bytes=1 << 31, title="x")
                                     for a in acts if a.pid and local})  # this machine's own samples
        before = {q[1].actor_id: q[1] for q in memo.quiet if q is not None}
        snap = build_snapshot(d, hist, now, memo=memo)
        assert snap == build_snapshot(d, hist, now), f"step {step}: {move}"
        if move in ("none", "summary"):
            reused += sum(1 for r in snap.actors if before.get(r.actor_id) is r)
        now += 2.0
    assert reused  # idle rows were taken as they were
