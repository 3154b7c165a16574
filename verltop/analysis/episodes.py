"""Training incidents for ``verltop watch``: one per episode, not per step. An ``anomaly`` episode is one
metric's run of one kind of anomaly (a NaN grad norm step after step is one episode); it ends after
``quiet_steps`` logged steps without it. A ``slow`` episode is one worker ending one phase last; it ends when
that worker has not been a slow rank for ``clear_after_s``."""

from __future__ import annotations

from dataclasses import dataclass, field

from verltop.model import Anomaly, SlowRank, Snapshot

QUIET_STEPS = 10


@dataclass(slots=True)
class Episode:
    kind: str  # "anomaly" | "slow"
    key: tuple
    opened_at: float
    anomaly: Anomaly | None = None  # the first one
    slow: SlowRank | None = None
    count: int = 1
    last_step: int | None = None
    last_seen: float = 0.0


@dataclass(slots=True)
class EpisodeTracker:
    """Which anomaly and slow episodes are open; ``update`` says which ones each snapshot opens."""

    quiet_steps: int = QUIET_STEPS
    clear_after_s: float = 60.0
    open: dict[tuple, Episode] = field(default_factory=dict)
    _seen: set[tuple] = field(default_factory=set)
    _started: bool = False

    def update(self, snap: Snapshot) -> tuple[list[Episode], list[Episode]]:
        """``(opened, closed)`` by this snapshot. Anomalies already in the history when watching began (older
        than ``quiet_steps`` steps) open nothing: they are yesterday's."""
        now = snap.taken_at
        opened: list[Episode] = []
        t = snap.training
        if t is not None and t.last_step is not None:
            for a in sorted(t.anomalies, key=lambda a: a.step):
                ident = (a.step, a.metric, a.kind)
                if ident in self._seen:
                    continue
                self._seen.add(ident)
                if not self._started and a.step < t.last_step - self.quiet_steps:
                    continue
                key = ("anomaly", a.metric, a.kind)
                ep = self.open.get(key)
                if ep is None:
                    ep = self.open[key] = Episode("anomaly", key, now, anomaly=a, last_step=a.step, last_seen=now)
                    opened.append(ep)
                else:
                    ep.count += 1
                    ep.last_step, ep.last_seen = a.step, now
            if len(self._seen) > 4096:
                self._seen = {x for x in self._seen if x[0] >= t.last_step - 1000}
            self._started = True
        for r in snap.slow_ranks:
            key = ("slow", r.actor_id or r.actor_name, r.phase)
            ep = self.open.get(key)
            if ep is None:
                ep = self.open[key] = Episode("slow", key, now, slow=r, last_seen=now)
                opened.append(ep)
            else:
                ep.slow, ep.last_seen = r, now
        closed = [ep for ep in self.open.values() if self._over(ep, snap)]
        for ep in closed:
            del self.open[ep.key]
        return opened, closed

    def _over(self, ep: Episode, snap: Snapshot) -> bool:
        if ep.kind == "anomaly":
            last = snap.training.last_step if snap.training is not None else None
            return last is not None and ep.last_step is not None and last - ep.last_step >= self.quiet_steps
        return snap.taken_at - ep.last_seen >= self.clear_after_s
