"""Memory by phase through the engine's real poll path: the synthetic dashboard's ``/nodes/{id}`` reports (each
rank's GPU memory follows the phase it runs) booked under each rank's running call, cut into the timeline's
steps; and this machine's sample (children's memory, GPU and host limits) booked once a second."""

from __future__ import annotations

from tests.fakeray import FakeCluster, FakeDashboard
from tests.wait import wait_until_async
from verltop.engine.memory_book import MemoryWatch, verl_peaks
from verltop.engine.monitor import Intervals, Monitor
from verltop.model import Gpu, ProcStat, ProcTree, RawActor, RawTask
from verltop.sources.config import Endpoint
from verltop.sources.local import LocalSample
from verltop.text.contract import snapshot_json

MIB = 1 << 20
GIB = 1 << 30
IV = Intervals(actors_s=0.5, tasks_s=0.25, nodes_s=5.0, node_detail_s=0.25, waiting_s=5.0, timeout_s=5.0)


async def test_each_ranks_peak_in_its_phase_from_the_node_reports():
    c = FakeCluster(nodes=1, gpus_per_node=4, seed=2, speed=10.0, history_s=15.0, report_interval_s=0.2, tick_s=0.1)
    total = c.config.gpu_mem_mib * MIB
    async with FakeDashboard(c) as fd:
        mon = Monitor(Endpoint(fd.url, "--address", None, None), IV, use_local=False)
        mon.start()
        seen: list = [None]

        async def done_step():
            snap = await mon.publish_now()
            seen[0] = snap
            if snap is None or snap.memory is None:
                return None
            done = {s.index for s in snap.steps if not s.running}
            by = snap.memory.by_phase
            ua = [p for p in by if p.phase == "update_actor" and p.step in done and p.samples >= 2 and p.worker_group]
            # old_log_prob lasts 0.6 s here: on a loaded machine a step's can pass between two node reads
            lp = [p for p in by if p.phase == "old_log_prob" and p.step in done and p.samples and p.worker_group]
            return snap if len(ua) >= 4 and lp else None

        try:
            snap = await wait_until_async(done_step, 90, "finished steps' update_actor booked for 4 ranks and an "
                                          "old_log_prob", step=0.5,
                                          detail=lambda: seen[0] and seen[0].memory and seen[0].memory.by_phase[-8:])
            mon.show_memory_phases(False)  # no view shows them (the TUI's main screen)
            off = (await mon.publish_now()).memory
            cached = dict(mon.memory.book.row_cache)
            mon.show_memory_phases(True)
            on = (await mon.publish_now()).memory
        finally:
            await mon.stop()
    assert off.by_phase == () and off.by_phase_skipped and not cached  # and the rows it kept for them let go
    assert {(h.actor_id, h.kind) for h in off.headroom} == {(h.actor_id, h.kind) for h in snap.memory.headroom}
    assert on.by_phase and not on.by_phase_skipped
    m = snap.memory
    done = {s.index for s in snap.steps if not s.running}
    ua = [p for p in m.by_phase if p.phase == "update_actor" and p.step in done and p.samples >= 2
                  and p.worker_group]
    for p in ua:  # the fake's ranks hold 74 % (+-4 %) of the GPU in update_actor, 45 % in old_log_prob
        assert 0.69 * total <= p.peak_gpu_bytes <= 0.79 * total, p
        assert p.worker_group and p.rank is not None and p.peak_rss_bytes and p.peak_rss_bytes > 8 * GIB
    lp = [p for p in m.by_phase if p.phase == "old_log_prob" and p.step in done and p.samples and p.worker_group]
    assert lp and all(p.peak_gpu_bytes < 0.55 * total for p in lp)
    ctl = [p for p in m.by_phase if p.role == "controller"]
    assert ctl and all(p.peak_gpu_bytes is None and p.peak_rss_bytes for p in ctl)  # booked under the job's phase
    gpu = [h for h in m.headroom if h.kind == "gpu"]
    assert gpu and all(h.limit_source == "gpu_total" and h.peak_bytes < h.limit_bytes <= total for h in gpu)
    host = [h for h in m.headroom if h.kind == "host"]
    assert host and all(h.limit_bytes is not None and h.limit_source == "ray_memory_threshold" for h in host)
    assert m.growth == ()
    doc = snapshot_json(snap)["memory"]
    assert len(doc["by_phase"]) == len(m.by_phase) and doc["note"] is None


def _actor(aid: str, pid: int, cls: str = "WorkerDict", name: str | None = None) -> RawActor:
    return RawActor(aid, cls, "ALIVE", name or f"wgWorkerDict_0:{pid % 10}", "n1", pid,
                    env=(("RANK", str(pid % 10)), ("WORLD_SIZE", "2"), ("WG_PREFIX", "wg")))


def test_the_local_sample_books_children_and_limits_every_second():
    w = MemoryWatch(threshold=0.95)
    a0, a1 = _actor("a0", 100), _actor("a1", 101)
    srv = _actor("s", 200, "vLLMHttpServer", "vllm_server_0")
    actors = {a.actor_id: a for a in (a0, a1, srv)}
    task = [RawTask("t0", "x", "WorkerDict.actor_rollout_update_actor", "RUNNING", "a0", "n1", 100, 10_000.0),
            RawTask("t1", "x", "WorkerDict.actor_rollout_update_actor", "RUNNING", "a1", "n1", 101, 10_000.0)]
    tree = ProcTree(0.0, (100, 101, 200), procs=(ProcStat(201, None, 3 * GIB, ppid=200),))
    for k in range(3):  # a 3 s phase sampled every second
        gpus = (Gpu(0, "H100", 90.0, None, 80 * GIB, processes=((100, (20 + k) * GIB, None), (201, 30 * GIB, None))),
                Gpu(1, "H100", 90.0, None, 80 * GIB, processes=((101, 20 * GIB, None),)))
        s = LocalSample(10.5 + k, {100: ProcStat(100, 1.0, 4 * GIB), 101: ProcStat(101, 1.0, 4 * GIB),
                                   200: ProcStat(200, 1.0, GIB)}, gpus, None, tree)
        assert w.feed_local(s, actors.values(), task, actors, host=(100 * GIB, 50 * GIB, "cgroup")) == 3
    eps = {aid: next(iter(ab.eps.values())) for aid, ab in w.book.actors.items()}
    e0, es = eps["a0"], eps["s"]
    assert (e0.n, e0.phase, e0.gpk, e0.g0, e0.g1) == (3, "update_actor", 22 * GIB, 20 * GIB, 22 * GIB)
    # GPU 0: 80 GiB less the server's engine (30 GiB) at its tightest sample
    assert (e0.g_val, e0.g_lim) == (22 * GIB, 50 * GIB)
    # host: 95 % of the container's 100 GiB less what others use (50 GiB used, 4 of them its own)
    assert (e0.h_val, e0.h_lim, e0.h_src) == (4 * GIB, int(95 * GIB) - 46 * GIB, "cgroup")
    # the server has no phase of its own: the job's, with its engine child's GPU memory and RSS
    assert (es.phase, es.key, es.gpk, es.rpk) == ("update_actor", "~update_actor@10.000", 30 * GIB, 4 * GIB)
    assert w.last_feed_ms < 50


def test_titles_book_a_call_from_its_first_second_and_stop_when_it_ends():
    """Ray titles a worker ``ray::WorkerDict.<method>`` while a call runs: the 1 s sample knows the call before
    the 2 s tasks poll does, and knows when it ended."""
    w = MemoryWatch(threshold=0.95)
    a0 = _actor("a0", 100)
    ctl = RawActor("c", "TaskRunner", "ALIVE", None, "n1", 300)
    actors = {a.actor_id: a for a in (a0, ctl)}
    procs = {100: ProcStat(100, 1.0, 4 * GIB), 300: ProcStat(300, 1.0, GIB)}

    def at(t: float, title: str, tasks: list) -> int:
        s = LocalSample(t, procs, None, None, None, {100: title, 300: "ray::TaskRunner.run"})
        return w.feed_local(s, actors.values(), tasks, actors)

    assert at(20.0, "ray::WorkerDict.actor_rollout_update_actor", []) == 2  # no tasks poll yet: the title says
    task = [RawTask("t0", "x", "WorkerDict.actor_rollout_update_actor", "RUNNING", "a0", "n1", 100, 19_600.0)]
    assert at(21.0, "ray::WorkerDict.actor_rollout_update_actor", task) == 2
    ep = next(iter(w.book.actors["a0"].eps.values()))
    assert (ep.phase, ep.n, ep.start_s) == ("update_actor", 2, 19.6)  # the task's start, once the poll gave it
    ctl_ep = next(iter(w.book.actors["c"].eps.values()))
    assert ctl_ep.phase == "update_actor"  # the controller under the phase its ranks run
    assert at(22.0, "ray::WorkerDict", task) == 1  # ended (the tasks poll still lists it): only the controller
    assert ep.n == 2


def test_verls_own_peaks_at_its_last_step():
    metrics = {"actor/perf/max_memory_allocated_gb": ((4, 60.0), (5, 61.5)), "perf/cpu_memory_used_gb": ((5, 200.0),),
               "critic/perf/max_memory_reserved_gb": ((4, 70.0),), "actor/entropy": ((5, 0.4),)}
    assert verl_peaks(metrics, 5) == (("actor/perf/max_memory_allocated_gb", 61.5), ("perf/cpu_memory_used_gb", 200.0))


def test_a_costly_view_stands_for_its_share_of_time_and_a_cheap_one_is_worked_out_each_time():
    """Thousands of actors make a view cost ~90 ms: it is worked out again once that is ``view_share`` of the
    time since (samples are booked meanwhile); a cheap view, every time."""
    from tests.analysis.helpers import row
    from verltop.engine.memory_book import VIEW_CPU_SHARE
    from verltop.model import PhaseRun, Step

    a0 = _actor("a0", 100)
    actors = {"a0": a0}
    task = [RawTask("t0", "x", "WorkerDict.actor_rollout_update_actor", "RUNNING", "a0", "n1", 100, 10_000.0)]
    steps = (Step(1, 10.0, None, (PhaseRun("update_actor", "wg", "actor_rollout_update_actor", 10.0, None, 1),), ()),)
    rows = [row("a0", rank=0, pid=100)]

    def peak_after(w: MemoryWatch, t: float, gib: int):
        gpus = (Gpu(0, "H100", 90.0, None, 80 * GIB, processes=((100, gib * GIB, None),)),)
        w.feed_local(LocalSample(t, {100: ProcStat(100, 1.0, 4 * GIB)}, gpus, None, None), actors.values(), task,
                     actors)
        return w.view(steps, rows)

    # a view without the phases does not stand for one that asks for them
    w = MemoryWatch(threshold=0.95, view_share=1e-9, costly_s=0.0)
    gpus = (Gpu(0, "H100", 90.0, None, 80 * GIB, processes=((100, 20 * GIB, None),)),)
    w.feed_local(LocalSample(10.5, {100: ProcStat(100, 1.0, 4 * GIB)}, gpus, None, None), actors.values(), task, actors)
    off = w.view(steps, rows, phases=False)
    assert off.by_phase == () and off.by_phase_skipped and w.view(steps, rows, phases=False) is off
    on = w.view(steps, rows)
    assert on is not off and on.by_phase and w.view(steps, rows, phases=False) is on
    for costly_s, share, stands in ((0.0, 1e-9, True), (VIEW_CPU_SHARE, VIEW_CPU_SHARE, False)):
        w = MemoryWatch(threshold=0.95, view_share=share, costly_s=costly_s)
        first = peak_after(w, 10.5, 20)
        again = peak_after(w, 11.5, 30)
        assert w.book.actors["a0"].eps["t0"].gpk == 30 * GIB  # booked either way
        assert (again is first) == stands
        assert [p.peak_gpu_bytes for p in again.by_phase if p.samples] == [20 * GIB if stands else 30 * GIB]


def test_a_costly_view_stands_at_least_as_long_as_the_agents_report_interval():
    """However cheap its share, a costly view is not worked out again within the node agents' 5 s: nothing it is
    made of came meanwhile from most nodes. Past that, the next view is new."""
    from tests.analysis.helpers import row
    from verltop.engine import memory_book
    from verltop.model import PhaseRun, Step

    clock = [1000.0]
    a0 = _actor("a0", 100)
    task = [RawTask("t0", "x", "WorkerDict.actor_rollout_update_actor", "RUNNING", "a0", "n1", 100, 10_000.0)]
    steps = (Step(1, 10.0, None, (PhaseRun("update_actor", "wg", "actor_rollout_update_actor", 10.0, None, 1),), ()),)
    rows = [row("a0", rank=0, pid=100)]
    # every view costly, its share no wait at all; the watch's own clock (never the process's)
    w = MemoryWatch(threshold=0.95, view_share=1e9, costly_s=0.0, clock=lambda: clock[0])
    gpus = (Gpu(0, "H100", 90.0, None, 80 * GIB, processes=((100, 20 * GIB, None),)),)
    w.feed_local(LocalSample(10.5, {100: ProcStat(100, 1.0, 4 * GIB)}, gpus, None, None), [a0], task, {"a0": a0})
    first = w.view(steps, rows)
    clock[0] += memory_book.VIEW_COSTLY_EVERY_S - 0.5
    assert w.view(steps, rows) is first
    clock[0] += 1.0
    assert w.view(steps, rows) is not first
