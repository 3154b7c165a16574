"""The memory book: each actor's memory samples, grouped by the call (or the job's phase) they were taken in.
Pure and bounded; the engine feeds it from every sample of a source (this machine every second, other nodes
as their dashboard agent reports, every 5 s), and ``memory_view`` turns it into phases of steps.

A sample is booked under an *episode*: a rank's own call of a verl method (its task id: one phase of one
step), or, for an actor with no phase of its own (the controller, a rollout server, an agent loop), the
job's phase running at that moment (``~phase@start``). Each episode keeps its first, last and peak GPU
memory and RSS (children included) and, per kind, the sample where it came nearest its limit (the limit is
what is left to it: the device's total, or the host's kill threshold, less what other processes hold)."""

from __future__ import annotations

from collections.abc import Iterable

STALE_S = 0.5  # a sample this long before its call's (estimated) start is not the call's
MAX_EPISODES = 240  # per actor: ~20 steps of a colocated worker's few calls, with room to spare

# (actor_id, episode key, phase, role, start_s, gpu bytes, rss bytes, gpu limit, host limit, host limit source)
# The limits are what is left to this actor at that sample (None: unknown); bytes None: not read.
MemSample = tuple[str, str, str, "str | None", float, "int | None", "int | None", "int | None", "int | None",
                  "str | None"]


class Episode:
    """One call (or one stretch of the job's phase) of one actor, as its samples saw it."""

    __slots__ = ("first_at", "g0", "g1", "g_lim", "g_margin", "g_val", "gpk", "h_lim", "h_margin", "h_src",
                 "h_val", "key", "last_at", "n", "phase", "r0", "r1", "role", "rpk", "start_s")

    def __init__(self, key: str, phase: str, role: str | None, start_s: float, at: float) -> None:
        self.key, self.phase, self.role, self.start_s = key, phase, role, start_s
        self.first_at = self.last_at = at
        self.n = 0
        self.g0 = self.g1 = self.gpk = self.r0 = self.r1 = self.rpk = None
        # the sample nearest the limit, per kind: its margin (limit - value), value and limit
        self.g_margin = self.g_val = self.g_lim = None
        self.h_margin = self.h_val = self.h_lim = self.h_src = None


class ActorBook:
    __slots__ = ("cache", "eps", "last_key", "reset", "touched", "version")

    def __init__(self) -> None:
        self.eps: dict[str, Episode] = {}  # in the order they began
        self.version = 0
        # episodes booked since the view last looked (it works out only those): the last one booked, and the
        # ones before it (a set kept small: consecutive samples of one call add it once)
        self.touched: set[str] | None = None  # (None while empty: an empty set is 216 bytes, 10,000 actors)
        self.last_key: str | None = None
        self.reset = False  # set: the view works this actor out afresh
        self.cache: object = None  # memory_view's per-actor state


class MemoryBook:
    """Every actor's episodes, at most ``max_episodes`` each. Not thread-safe: the engine serialises calls."""

    def __init__(self, max_episodes: int = MAX_EPISODES) -> None:
        self.max_episodes = max_episodes
        self.actors: dict[str, ActorBook] = {}
        self.samples = 0  # booked so far (tests, the bench)
        self.row_cache: dict[int, dict[str, tuple]] = {}  # the view's rows per step and actor, while they hold

    def add(self, at: float, samples: Iterable[MemSample]) -> int:
        """Book the samples taken at ``at``. Returns how many were booked."""
        actors, cap = self.actors, self.max_episodes
        n = 0
        for aid, key, phase, role, start_s, g, r, glim, hlim, hsrc in samples:
            if at + STALE_S < start_s:
                continue  # a report taken before the call began (a node's agent reports every 5 s)
            ab = actors.get(aid)
            if ab is None:
                ab = actors[aid] = ActorBook()
            eps = ab.eps
            ep = eps.get(key)
            if ep is None:
                ep = eps[key] = Episode(key, phase, role, start_s, at)
                if len(eps) > cap:
                    old = next(iter(eps))
                    del eps[old]
                    _touch(ab, (old,))  # the view takes it out of its step
            elif at <= ep.last_at:
                continue  # the same sample twice (a node's report read again)
            else:
                ep.start_s = start_s  # a start Ray gave later (it was estimated from the polls)
            ep.last_at = at
            ep.n += 1
            ab.version += 1
            if key != ab.last_key:
                if ab.last_key is not None:
                    _touch(ab, (ab.last_key,))
                ab.last_key = key
            n += 1
            if g is not None:
                if ep.g0 is None:
                    ep.g0 = g
                ep.g1 = g
                if ep.gpk is None or g > ep.gpk:
                    ep.gpk = g
                if glim is not None and (ep.g_margin is None or glim - g < ep.g_margin):
                    ep.g_margin, ep.g_val, ep.g_lim = glim - g, g, glim
            if r is not None:
                if ep.r0 is None:
                    ep.r0 = r
                ep.r1 = r
                if ep.rpk is None or r > ep.rpk:
                    ep.rpk = r
                if hlim is not None and (ep.h_margin is None or hlim - r < ep.h_margin):
                    ep.h_margin, ep.h_val, ep.h_lim, ep.h_src = hlim - r, r, hlim, hsrc
        self.samples += n
        return n

    def retain(self, actor_ids: Iterable[str]) -> None:
        """Forget actors that are no longer listed."""
        keep = set(actor_ids)
        for aid in [a for a in self.actors if a not in keep]:
            del self.actors[aid]
        if sum(map(len, self.row_cache.values())) > 2 * len(keep) * (len(self.row_cache) + 1) + 1024:  # gone actors
            self.row_cache.clear()

    def drop_before(self, t: float) -> None:
        """Forget episodes that began before ``t`` (the oldest step the timeline keeps)."""
        for ab in self.actors.values():
            eps = ab.eps
            if eps and next(iter(eps.values())).start_s < t:
                old = [k for k, e in eps.items() if e.start_s < t]
                for k in old:
                    del eps[k]
                _touch(ab, old)  # the view takes them out of their steps
                ab.version += 1


def _touch(ab: ActorBook, keys: Iterable[str]) -> None:
    if ab.touched is None:
        ab.touched = set(keys)
    else:
        ab.touched.update(keys)
