"""The memory book and its view: by phase and step, growth (a leak's rate, no false leak), headroom."""

from __future__ import annotations

import random
import sys
from dataclasses import replace

from tests.analysis.helpers import row
from verltop.analysis.memory import MemoryBook
from verltop.analysis.memory_view import MemorySettings, memory_view
from verltop.model import PhaseRun, RolloutLoad, Step

MIB = 1 << 20
GIB = 1 << 30
STEP_S = 15.0
# phase -> (method, start, end) within a step
PLAN = {"gen": ("actor_rollout_generate_sequences", 0.0, 4.0), "old_log_prob": ("actor_rollout_compute_log_prob", 4.0, 8.0),
        "update_actor": ("actor_rollout_update_actor", 8.0, 14.0)}
TOTAL = 80 * GIB
OTHERS = 5 * GIB  # what other processes hold on each rank's GPU


def job(n_steps: int = 12, ranks: int = 4, leak_rank: int | None = 1, leak: int = 150 * MIB, peak_rank: int | None = 2,
        noise: int = 20 * MIB, dt: float = 1.0, warmup: int = 0, seed: int = 0, plan: dict | None = None):
    """A verl-shaped job sampled every ``dt``: rank ``peak_rank`` takes 4 GiB in old_log_prob and gives it back,
    rank ``leak_rank`` keeps ``leak`` more after each update_actor, every rank grows by ``warmup`` in each of
    the first two steps."""
    rng = random.Random(seed)
    plan = plan or PLAN
    book = MemoryBook()
    level = [10 * GIB] * ranks
    steps = []
    for s in range(n_steps):
        t0 = s * STEP_S
        runs = []
        for phase, (method, a, b) in plan.items():
            runs.append(PhaseRun(phase, "wg", method, t0 + a, t0 + b, ranks))
            t = t0 + a + dt / 2
            while t < t0 + b:
                samples = []
                for r in range(ranks):
                    g = level[r] + rng.randint(-noise, noise)
                    if r == peak_rank and phase == "old_log_prob" and t0 + a + 1 < t < t0 + b - 1:
                        g += 4 * GIB
                    if r == leak_rank and phase == "update_actor" and t > t0 + a + 2:
                        g += leak
                    if s < 2 and phase == "gen" and t > t0 + a + 1:
                        g += warmup
                    samples.append((f"a{r}", f"t{s}{phase}{r}", phase, "actor_rollout", t0 + a, g, 2 * GIB, TOTAL - OTHERS,
                                    None, None))
                book.add(t, samples)
                t += dt
        for r in range(ranks):
            if r == leak_rank:
                level[r] += leak
            if s < 2:
                level[r] += warmup
        steps.append(Step(s + 1, t0, STEP_S, tuple(runs), ()))
    rows = [row(f"a{r}", rank=r, pid=100 + r) for r in range(ranks)]
    return book, steps, rows


def test_a_rank_that_keeps_memory_each_update_is_named_with_its_rate_and_peers_flat():
    book, steps, rows = job()
    v = memory_view(book, steps, rows)
    (g,) = v.growth
    assert (g.actor_id, g.rank, g.phase, g.kind) == ("a1", 1, "update_actor", "gpu")
    assert abs(g.bytes_per_step - 150 * MIB) <= 0.3 * 150 * MIB
    assert g.steps >= 4 and g.peers_bytes_per_step is not None and abs(g.peers_bytes_per_step) < 32 * MIB


def test_a_transient_peak_given_back_is_shown_in_its_phase_and_is_no_leak():
    book, steps, rows = job(leak_rank=None)
    v = memory_view(book, steps, rows)
    assert v.growth == ()
    peaks = {(p.step, p.rank): p for p in v.by_phase if p.phase == "old_log_prob"}
    p = peaks[(5, 2)]
    assert p.peak_gpu_bytes is not None and p.peak_gpu_bytes >= 14 * GIB - 20 * MIB
    assert p.samples >= 3  # a 4 s phase at 1 s
    assert peaks[(5, 0)].peak_gpu_bytes < 11 * GIB
    assert abs(p.end_gpu_bytes - 10 * GIB) <= 20 * MIB


def test_warm_up_and_noise_raise_no_alarm():
    book, steps, rows = job(leak_rank=None, peak_rank=None, warmup=3 * GIB, noise=200 * MIB, seed=3)
    assert memory_view(book, steps, rows).growth == ()


def test_a_group_that_grows_together_is_named_rank_by_rank_with_its_peers_rate():
    book, steps, rows = job(leak_rank=None, peak_rank=None)
    for r in range(4):  # every rank keeps 64 MiB more after each old_log_prob (by its end)
        for ab in [book.actors[f"a{r}"]]:
            for k, e in enumerate(ab.eps.values()):
                bump = (k // 3) * 64 * MIB + (64 * MIB if e.phase != "gen" else 0)
                e.g1 += bump
                ab.version += 1
    g = memory_view(book, steps, rows).growth
    assert sorted(x.rank for x in g) == [0, 1, 2, 3]
    assert all(x.phase == "old_log_prob" and abs(x.peers_bytes_per_step - 64 * MIB) < 5 * MIB for x in g)


def test_a_leak_needs_four_steps_past_warm_up():
    book, steps, rows = job(n_steps=5)  # 2 warm-up steps, 3 after
    assert memory_view(book, steps, rows).growth == ()
    book, steps, rows = job(n_steps=6)
    assert [g.rank for g in memory_view(book, steps, rows).growth] == [1]


def test_a_phase_that_takes_what_another_gives_back_each_step_does_not_grow():
    # gen wakes an engine (+6 GiB kept at its end), update_actor frees it: gen "keeps" 6 GiB every step, its end
    # does not climb
    rng = random.Random(1)
    book = MemoryBook()
    steps = []
    for s in range(10):
        t0 = s * STEP_S
        runs = []
        for phase, (method, a, b) in PLAN.items():
            runs.append(PhaseRun(phase, "wg", method, t0 + a, t0 + b, 1))
            for k in range(int(b - a)):
                g = 10 * GIB + (6 * GIB if phase in ("gen", "old_log_prob") else 0) + rng.randint(0, MIB)
                book.add(t0 + a + k + 0.5, [("a0", f"{s}{phase}", phase, None, t0 + a, g, None, None, None, None)])
        steps.append(Step(s + 1, t0, STEP_S, tuple(runs), ()))
    assert memory_view(book, steps, [row("a0")]).growth == ()


def test_headroom_is_the_limit_less_others_and_steps_left_at_the_rate():
    book, steps, rows = job()
    v = memory_view(book, steps, rows)
    h = {(x.actor_id, x.kind): x for x in v.headroom}
    leak = h[("a1", "gpu")]
    assert leak.limit_bytes == TOTAL - OTHERS and leak.limit_source == "gpu_total"
    rate = v.growth[0].bytes_per_step
    assert leak.steps_to_limit == (leak.limit_bytes - leak.peak_bytes) / rate
    assert h[("a0", "gpu")].steps_to_limit is None  # not growing
    assert h[("a2", "gpu")].peak_bytes >= 14 * GIB - 20 * MIB  # its tightest sample: the transient peak
    assert h[("a0", "host")].limit_bytes is None and h[("a0", "host")].peak_bytes == 2 * GIB
    assert 0 < h[("a2", "gpu")].free_fraction < 1


def test_too_few_samples_say_so_and_show_no_zero_peak():
    # a 0.6 s phase sampled every 2 s: some steps catch it, others do not
    plan = {"gen": ("g", 0.0, 6.0), "old_log_prob": ("lp", 6.0, 6.6), "update_actor": ("u", 6.6, 14.0)}
    book, steps, rows = job(plan=plan, dt=2.0, leak_rank=None, peak_rank=None)
    lp = [p for p in memory_view(book, steps, rows).by_phase if p.phase == "old_log_prob"]
    assert lp and all(p.samples == 0 and p.peak_gpu_bytes is None for p in lp)
    assert len(lp) == 4 * 12


def test_by_phase_is_bounded_on_a_large_job():
    book, steps, rows = job(ranks=64, n_steps=20, leak_rank=None, peak_rank=None)
    v = memory_view(book, steps, rows, st=MemorySettings(max_by_phase=1000))
    assert len(v.by_phase) <= 1000 and len({p.step for p in v.by_phase}) >= 2
    assert max(p.step for p in v.by_phase) == 20


def test_the_views_cache_holds_only_the_steps_it_shows():
    """A large job shows its last steps only: the rows kept between views are those steps' (each step left
    behind held ~3 MB at 10,000 actors, and the view kept them for 20 steps); a view of the same book gives
    the same rows, from the cache."""
    book, steps, rows = job(ranks=64, n_steps=20, leak_rank=None, peak_rank=None)
    st = MemorySettings(max_by_phase=1000)
    for n in (12, 16, 20):  # the job goes on: each view sees more steps
        v = memory_view(book, steps[:n], rows, st=st)
        shown = {p.step for p in v.by_phase}
        assert max(shown) == n and set(book.row_cache) <= shown
    again = memory_view(book, steps, rows, st=st)
    assert again.by_phase == v.by_phase and all(a is b for a, b in zip(again.by_phase, v.by_phase, strict=True))


def test_book_is_bounded_and_forgets_gone_actors():
    book = MemoryBook(max_episodes=10)
    for i in range(100):
        book.add(float(i), [("a", f"k{i}", "gen", None, float(i), 1, 1, None, None, None)])
    assert len(book.actors["a"].eps) == 10
    book.add(200.0, [("a", "k99", "gen", None, 99.0, 1, 1, None, None, None)])
    book.add(200.0, [("a", "k99", "gen", None, 99.0, 1, 1, None, None, None)])  # the same report twice
    assert book.actors["a"].eps["k99"].n == 2
    book.drop_before(95.0)
    assert len(book.actors["a"].eps) == 5
    book.retain([])
    assert book.actors == {}


def test_engine_hold_of_a_colocated_server_in_trainer_phases():
    book, steps, rows = job(leak_rank=None, peak_rank=None, ranks=2)
    rows = [replace(r, gpu_index=0) for r in rows]
    server = replace(row("srv", group=None, role="rollout_server"), actor_name="vllm_server_0", worker_group=None,
                     gpu_index=0, class_name="vLLMHttpServer")
    for s in steps:
        for run in s.runs:
            held = 20 * GIB if run.phase == "gen" else 2 * GIB
            book.add(run.start_s + 0.5, [("srv", f"~{run.phase}@{run.start_s}", run.phase, "rollout_server", run.start_s,
                                          held, GIB, None, None, None)])
    load = RolloutLoad("srv", "vllm_server_0", "x:1", "vllm", kv_cache_usage=0.0, sleep_state=1.0)
    v = memory_view(book, steps, [*rows, server], rollout={"srv": load})
    holds = {h.phase: h for h in v.engine_holds}
    assert set(holds) == {"old_log_prob", "update_actor"}
    assert holds["update_actor"].gpu_bytes == 2 * GIB and holds["update_actor"].sleep_state == 1.0


def test_a_ranks_lead_up_includes_the_running_step():
    from verltop.analysis.memory_view import actor_entries

    book, steps, rows = job(n_steps=8)
    steps[-1] = replace(steps[-1], duration_s=None)
    memory_view(book, steps, rows)  # a view first: the lead-up reads the same state
    ups = actor_entries(book, steps, rows[1], "update_actor")
    assert [p.step for p in ups] == list(range(1, 9))
    assert [p.end_gpu_bytes > q.end_gpu_bytes for p, q in zip(ups[1:], ups, strict=False)] == [True] * 7


def test_a_report_taken_before_the_call_began_is_not_the_calls():
    book = MemoryBook()
    assert book.add(100.0, [("a", "t1", "update_actor", None, 103.0, 5, 5, None, None, None)]) == 0
    assert book.add(103.2, [("a", "t1", "update_actor", None, 103.0, 5, 5, None, None, None)]) == 1


class _Tape(MemoryBook):
    """A book that records what it is fed, to feed it again in another order of views."""

    def __init__(self) -> None:
        super().__init__()
        self.tape: list[tuple[float, list]] = []

    def add(self, at, samples):
        samples = list(samples)
        self.tape.append((at, samples))
        return super().add(at, samples)


def test_a_view_worked_out_step_by_step_equals_one_worked_out_at_the_end(monkeypatch):
    """The view works out only what changed since the last one, freezes old steps and lets their episodes go:
    viewed after every step of a job (with leaks, peaks, noise and a window shorter than the job), it ends
    where a view of the whole job at once does."""
    monkeypatch.setattr(sys.modules[__name__], "MemoryBook", _Tape)
    st = MemorySettings(keep_steps=8, min_steps=3, warmup_steps=0)  # (warm-up counts from the first step seen)
    for seed in range(3):
        tape_book, steps, rows = job(n_steps=20, ranks=6, leak_rank=seed, peak_rank=5 - seed, seed=seed,
                                     warmup=64 * MIB)
        whole = memory_view(tape_book, steps, rows, st=st)
        live = MemoryBook()
        fed = 0
        for n in range(1, len(steps) + 1):
            end = steps[n].started_at if n < len(steps) else float("inf")
            while fed < len(tape_book.tape) and tape_book.tape[fed][0] < end:
                live.add(*tape_book.tape[fed])
                fed += 1
            v = memory_view(live, steps[:n], rows, st=st)
        assert v.growth and v.growth == whole.growth
        assert v.headroom == whole.headroom and v.by_phase == whole.by_phase
        window = {s.index for s in steps[-st.keep_steps:]}
        for ab in live.actors.values():  # what each actor keeps is the window's steps, however long the job
            av = ab.cache
            for kept in (av.aggs, av.step_gen, av.step_tight, av.step_kept, av.members, av.frozen):
                assert set(kept) <= window
