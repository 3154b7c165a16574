"""The actor list: cheap state rows every poll, the detail rows when something changed."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from verltop.engine.polling import DETAIL_REFRESH_S, PollState
from verltop.model import RawActor
from verltop.model.evolve import evolve
from verltop.sources import dashboard as D

log = logging.getLogger("verltop.engine")


class ActorPolls(PollState):
    """The actors source."""

    async def _poll_actors(self) -> None:
        """Base columns every cycle; the heavier detail rows (rank env, death cause) when an actor is new,
        changed state, or every ``refresh_s``."""
        now = time.time()
        detail = self._actor_detail_at is None or now - self._actor_detail_at > refresh_s(len(self._actor_cache))
        if not detail:
            basic = await D.fetch_actor_states(self.client, self.iv.timeout_s)
            if not basic.ok:
                self._record(self.src.actors, basic)
                return
            cache = self._actor_cache
            rows = basic.value or []
            if not (basic.unchanged and self._states_synced):  # the same bytes as checked before: no row to look at
                # a new pid means a restart: the detail rows carry the restart count
                self._states_synced = not any(aid not in cache or cache[aid].state != st
                                              or (pid and cache[aid].pid != pid) for aid, st, pid, _ in rows)
            if not self._states_synced:
                detail = True
            elif basic.unchanged and self.src.actors.value is not None:
                self._record(self.src.actors, replace(basic, value=self.src.actors.value))
                return
            else:
                # unchanged actors keep their (detail) objects: cheaper, and caches keyed on them stay warm
                r = replace(basic, value=[_same_or_updated(cache[aid], pid, node) for aid, _, pid, node in rows])
        if detail:
            r = await D.fetch_actors(self.client, self.iv.timeout_s, detail=True)
            if r.ok and r.value and self._actor_cache:
                # an actor that did not change keeps its object: the rows, identities and caches keyed on it
                # stand (every 30 s at 10,000 actors, a build that looked at every actor again)
                cache = self._actor_cache
                r = replace(r, value=[_same(cache.get(a.actor_id), a) for a in r.value])
        if self._record(self.src.actors, r):
            if detail:
                self._actor_cache = {a.actor_id: a for a in r.value or []}
                self._states_synced = False  # the next base columns are checked against these rows
                self._actor_detail_at = r.taken_at
            self.truncated = r.truncated
            await self._hist_ready()
            self.hist.forget_actors({a.actor_id for a in r.value or []})


def refresh_s(actors: int) -> float:
    """How often the detail rows are read again though no actor is new or changed state: a safety net (what
    they add, the rank env, the death cause, the restart count, comes with a change the base columns show).
    ``DETAIL_REFRESH_S`` up to 1,000 actors, longer in proportion beyond: at 10,000 actors a read is 7 MB
    and ~0.2 s of CPU, every 30 s a fourteenth of the TUI's CPU; every 5 minutes, under a hundredth."""
    return DETAIL_REFRESH_S * max(1.0, actors / 1000)


def _same_or_updated(cached: RawActor, pid: int | None, node_id: str | None) -> RawActor:
    if cached.pid == pid and cached.node_id == node_id:
        return cached
    return evolve(cached, pid=pid, node_id=node_id)


def _same(cached: RawActor | None, new: RawActor) -> RawActor:
    return cached if cached is not None and cached == new else new
